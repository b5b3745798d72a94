"""The DFlash training objective: random anchors, one packed multi-block head pass, decayed block CE.

Follows SpecForge's `OnlineDFlashModel` (sgl-project/SpecForge@a6b6b023,
`specforge/algorithms/common/dflash_family_model.py`):

- Anchors: per row, up to A positions a with loss_mask[a] & loss_mask[a+1], uniformly without
  replacement, fresh every step, sorted; unused slots are flagged invalid.
- Block j = [x_anchor, MASK x (Bk-1)] at positions anchor..anchor+Bk-1. It sees the target's
  features strictly before its anchor (at decode time the root has not been fed to the target
  yet) and every slot of its own block, both ways. All blocks of a batch go through the head in
  ONE pass: queries [A*Bk], keys [S context ; A*Bk blocks], block-sparse mask (or, to bound
  attention memory at recipe scale, in checkpointed groups of blocks: `head_group`).
- Slot k predicts the token at anchor+k (no shift); weight = valid block x (anchor+k < S) x (k>0)
  x loss_mask[anchor+k] x w_k, w_k = exp(-(k-1)/gamma); loss = sum w CE / sum w, the CE through
  the target's frozen lm_head in fp32, chunked over blocks so [A*Bk, V] logits never exist at once.

Block positions are pos[anchor] + k on all three MRoPE axes: what decoding uses (drafted tokens
are text), and equal to SpecForge PR #730's gather of position_ids[anchor+k] wherever anchor+k is
a response token (text right after text); unlike the gather it stays right past the end of the
response, where right padding holds position 0.

Letters: B rows, S seq_len, A anchors per row, Bk block size, Q = A*Bk block slots, D head width,
F = n_taps * Dt feature width, V vocab, C blocks per CE chunk.
"""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from glance_jax import sharding as shd
from glance_jax.head.model import BlockHead, block_mask
from glance_jax.qwen3_vl.layers import matmul_t
from glance_jax.train.batch import TrainBatch

# gamma per block size, from the DFlash paper and the trainers' defaults: 16 -> 7
# (SpecForge), 8 -> 4 (speculators, ModelOpt), 10 -> 5 (paper, unverified).
RECIPE_GAMMA = {16: 7.0, 10: 5.0, 8: 4.0}


def default_gamma(block_size: int) -> float:
  if block_size not in RECIPE_GAMMA:
    raise ValueError(f"no recipe loss-decay gamma for block_size {block_size} (known: "
                     f"{sorted(RECIPE_GAMMA)}); pass gamma explicitly")
  return RECIPE_GAMMA[block_size]


def decay_weights(block_size: int, gamma: float) -> np.ndarray:
  """float32 [Bk]: w_0 = 0 (the anchor is given, not predicted), w_k = exp(-(k-1)/gamma)."""
  if gamma <= 0:
    raise ValueError(f"gamma must be > 0, got {gamma}")
  k = np.arange(block_size, dtype=np.float64)
  w = np.exp(-(k - 1) / gamma)
  w[0] = 0.0
  return w.astype(np.float32)


# --- anchors, masks, block inputs and targets ---------------------------------------------------

def sample_anchors(key: jax.Array, loss_mask: jax.Array,
                   num_anchors: int) -> tuple[jax.Array, jax.Array]:
  """loss_mask bool [B,S] -> (anchors int32 [B,A] sorted, valid bool [B,A]; invalid anchors 0).

  Candidates a in [0, S-2] with loss_mask[a] and loss_mask[a+1] (the anchor token is a response
  token and so is the first predicted one). A uniform draw without replacement is the top A of
  iid uniform keys over the candidates.
  """
  b, s = loss_mask.shape
  n = s - 1
  k = min(num_anchors, max(n, 0))
  if k == 0:
    return jnp.zeros((b, num_anchors), jnp.int32), jnp.zeros((b, num_anchors), bool)
  lm = loss_mask.astype(bool)
  cand = lm[:, :-1] & lm[:, 1:]                                           # [B, S-1]
  score = jnp.where(cand, jax.random.uniform(key, (b, n)), -1.0)
  top, idx = jax.lax.top_k(score, k)                                      # [B, k]
  anchors = jnp.sort(jnp.where(top >= 0, idx, s), axis=1)                 # invalid -> sentinel S
  valid = anchors < s
  anchors = jnp.where(valid, anchors, 0).astype(jnp.int32)
  if k < num_anchors:
    anchors = jnp.pad(anchors, ((0, 0), (0, num_anchors - k)))
    valid = jnp.pad(valid, ((0, 0), (0, num_anchors - k)))
  return anchors, valid


def packed_block_mask(anchors: jax.Array, anchor_valid: jax.Array, seq_len: int,
                      block_size: int) -> jax.Array:
  """bool [B, Q, S+Q] over [context slots ; block slots].

  A slot of block j sees context slots < anchor_j and the Bk slots of block j (both ways). An
  invalid block sees only itself: its rows are never empty, and it touches nothing real.
  """
  b, a = anchors.shape
  q = a * block_size
  anc = jnp.repeat(anchors, block_size, axis=1)                           # [B, Q]
  ok = jnp.repeat(anchor_valid, block_size, axis=1)
  ctx = (jnp.arange(seq_len)[None, None, :] < anc[:, :, None]) & ok[:, :, None]   # [B, Q, S]
  blk = jnp.arange(q) // block_size
  own = jnp.broadcast_to(blk[:, None] == blk[None, :], (b, q, q))          # [B, Q, Q]
  return jnp.concatenate([ctx, own], axis=-1)


def block_inputs(input_ids: jax.Array, positions: jax.Array, anchors: jax.Array,
                 anchor_valid: jax.Array, *, block_size: int,
                 mask_token_id: int) -> tuple[jax.Array, jax.Array]:
  """-> (noise ids int32 [B,Q]: [x_anchor, MASK...] per block, all MASK when invalid;
  noise positions int32 [3,B,Q]: pos[anchor] + k on every axis)."""
  b, a = anchors.shape
  root = jnp.take_along_axis(input_ids, anchors, axis=1)                  # [B, A]
  root = jnp.where(anchor_valid, root, mask_token_id)
  ids = jnp.full((b, a, block_size), mask_token_id, jnp.int32).at[:, :, 0].set(root)
  p0 = jnp.take_along_axis(positions, jnp.broadcast_to(anchors[None], (3, b, a)), axis=2)  # [3,B,A]
  pos = p0[..., None] + jnp.arange(block_size, dtype=positions.dtype)     # [3, B, A, Bk]
  return ids.reshape(b, a * block_size), pos.reshape(3, b, a * block_size).astype(jnp.int32)


def block_targets(input_ids: jax.Array, loss_mask: jax.Array, anchors: jax.Array,
                  anchor_valid: jax.Array, *, block_size: int) -> tuple[jax.Array, jax.Array]:
  """-> (labels int32 [B,A,Bk] = input_ids[anchor+k], supervised bool [B,A,Bk] = valid block and
  anchor+k < S and k > 0 and loss_mask[anchor+k])."""
  b, s = input_ids.shape
  a = anchors.shape[1]
  idx = anchors[:, :, None] + jnp.arange(block_size)                      # [B, A, Bk]
  inside = idx < s
  flat = jnp.minimum(idx, s - 1).reshape(b, a * block_size)
  labels = jnp.take_along_axis(input_ids, flat, axis=1).reshape(b, a, block_size)
  lm = jnp.take_along_axis(loss_mask.astype(bool), flat, axis=1).reshape(b, a, block_size)
  sup = anchor_valid[:, :, None] & inside & lm & (jnp.arange(block_size) > 0)
  return labels.astype(jnp.int32), sup


# --- target features ------------------------------------------------------------------------------

def _no_pin(x, *axes):
  return x


def target_features(target, batch: TrainBatch, tap_layers: Sequence[int], pin=_no_pin) -> jax.Array:
  """One causal forward of the frozen target (a merged `Qwen3VL`) -> feats [B,S,F], taps
  concatenated in `tap_layers` order, under stop_gradient.

  Exactly the prefill features decoding feeds the head (same call, same tap point: decoder
  layer outputs after the deepstack addition). Layers past the deepest tap, the final norm and
  the K/V written to the throwaway S-slot cache are unused, so XLA drops them. `pin(x, *axes)`
  (sharding.pinner) fixes the features' layout: rows on the batch axes.
  """
  t = target.cfg.text
  tap_layers = tuple(int(i) for i in tap_layers)
  bad = [i for i in tap_layers if not 0 <= i < t.num_hidden_layers]
  if bad:
    raise ValueError(f"tap layers {bad} outside the target's {t.num_hidden_layers} layers")
  _, _, taps = target.forward_prompt(batch.prompt, tap_layers=tap_layers)
  feats = jnp.concatenate([pin(taps[i], shd.BATCH, shd.LENGTH, None) for i in tap_layers], axis=-1)
  return jax.lax.stop_gradient(pin(feats, shd.BATCH, shd.LENGTH, None))


# --- the head pass and the loss -------------------------------------------------------------------

def _check(head: BlockHead, feats: jax.Array, batch: TrainBatch, block_size: int) -> None:
  c = head.cfg
  if block_size != c.block_size:
    raise ValueError(f"block_size {block_size} disagrees with the head's configured block_size "
                     f"{c.block_size} (the head is trained and decoded with one block size)")
  if feats.shape[:2] != batch.input_ids.shape:
    raise ValueError(f"features {feats.shape[:2]} do not cover the batch {batch.input_ids.shape}")
  if feats.shape[-1] != c.fc_in_features:
    raise ValueError(f"features of width {feats.shape[-1]}, the head's fc takes {c.num_taps} taps x "
                     f"{c.target_hidden_size} = {c.fc_in_features}")


def packed_hidden(head: BlockHead, embed_w: jax.Array, feats: jax.Array, batch: TrainBatch,
                  anchors: jax.Array, anchor_valid: jax.Array, *, block_size: int,
                  mask_token_id: int, group: int | None = None, pin=_no_pin) -> jax.Array:
  """All blocks of the batch through the head -> hidden [B, Q, D] (compute dtype = the head's
  parameter dtype). Context K/V are computed once for all S slots: rows are independent, so block
  j reading slots < anchor_j equals a context of exactly those rows.

  group=None: every block in ONE pass (queries [Q], keys [S ; Q], block-sparse mask).
  group=G: the same pass over G blocks at a time (lax.map under jax.checkpoint), so attention
  scores are [G*Bk, S + G*Bk] per head instead of [Q, S + Q]: the recipe's A = 512, Bk = 16,
  S = 3072 makes the one-pass scores ~12 GB per row and layer. Blocks never see each other, so
  the result is the same. `pin` (sharding.pinner) keeps every activation's rows on the batch axes,
  the width whole: the weights are gathered to the rows, not the rows to the weights.
  """
  _check(head, feats, batch, block_size)
  dtype = head.fc.weight[...].dtype
  row = lambda x: pin(x, shd.BATCH, *([None] * (x.ndim - 1)))  # noqa: E731
  ctx = row(head.project_context(row(feats.astype(dtype))))              # [B, S, D]
  ctx_k, ctx_v = head.context_kv(ctx, batch.positions)                    # per layer [B,S,K,hd]
  kv = lambda x: pin(x, shd.BATCH, shd.LENGTH, shd.KV_HEADS, None)  # noqa: E731
  ctx_k, ctx_v = tuple(map(kv, ctx_k)), tuple(map(kv, ctx_v))

  def blocks(anc, val):                                                   # [B, n] -> [B, n*Bk, D]
    ids, pos = block_inputs(batch.input_ids, batch.positions, anc, val, block_size=block_size,
                            mask_token_id=mask_token_id)
    noise = row(jnp.take(embed_w, ids, axis=0).astype(dtype))             # [B, n*Bk, D]
    mask = packed_block_mask(anc, val, batch.seq_len, block_size)
    return row(head(noise, pos, ctx_k, ctx_v, mask))

  b, a = anchors.shape
  if group is None or group >= a:
    return blocks(anchors, anchor_valid)
  n = -(-a // group)
  pad = ((0, 0), (0, n * group - a))
  anc = jnp.moveaxis(jnp.pad(anchors, pad).reshape(b, n, group), 1, 0)    # [n, B, G]
  val = jnp.moveaxis(jnp.pad(anchor_valid, pad).reshape(b, n, group), 1, 0)
  h = jax.lax.map(jax.checkpoint(lambda xs: blocks(*xs)), (anc, val))     # [n, B, G*Bk, D]
  h = jnp.moveaxis(h, 0, 1).reshape(b, n * group * block_size, -1)
  return h[:, :a * block_size]


def map_block_chunks(fn, hidden: jax.Array, labels: jax.Array, chunk: int) -> tuple:
  """fn(hidden [B,C,Bk,D], labels [B,C,Bk]) -> a tuple of [B,C,Bk] arrays, run over C blocks at a
  time under jax.checkpoint (the backward recomputes each chunk's [B,C,Bk,V] logits instead of
  keeping them all) -> the same tuple for all A blocks, [B,A,Bk] each."""
  b, a, bk, d = hidden.shape
  c = max(1, min(chunk, a))
  n = -(-a // c)
  pad = n * c - a
  if pad:
    hidden = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0), (0, 0)))
    labels = jnp.pad(labels, ((0, 0), (0, pad), (0, 0)))
  h = jnp.moveaxis(hidden.reshape(b, n, c, bk, d), 1, 0)                  # [n, B, C, Bk, D]
  y = jnp.moveaxis(labels.reshape(b, n, c, bk), 1, 0)                     # [n, B, C, Bk]
  outs = jax.lax.map(jax.checkpoint(lambda xs: fn(*xs)), (h, y))
  return tuple(jnp.moveaxis(x, 0, 1).reshape(b, n * c, bk)[:, :a] for x in outs)


def chunked_ce(hidden: jax.Array, lm_head_w: jax.Array, labels: jax.Array,
               chunk: int, pin=_no_pin) -> tuple[jax.Array, jax.Array]:
  """hidden [B,A,Bk,D], labels [B,A,Bk] -> (CE fp32 [B,A,Bk], argmax == label bool [B,A,Bk]).

  Logits through the frozen lm_head (fp32 accumulation, as `Qwen3VL.logits`) for C blocks at a
  time (map_block_chunks). `pin` keeps each chunk's rows (and its logits' rows) on the batch axes.
  """
  def one(hc, yc):
    hc = pin(hc, shd.BATCH, None, None, None)
    logits = pin(matmul_t(hc, lm_head_w, out_dtype=jnp.float32),          # [B, C, Bk, V]
                 shd.BATCH, None, None, shd.VOCAB)
    picked = jnp.take_along_axis(logits, yc[..., None], axis=-1)[..., 0]
    ce = jax.nn.logsumexp(logits, axis=-1) - picked
    return ce, jnp.argmax(logits, axis=-1) == yc

  return map_block_chunks(one, hidden, labels, chunk)


def head_loss(head: BlockHead, embed_w: jax.Array, lm_head_w: jax.Array, feats: jax.Array,
              batch: TrainBatch, anchors: jax.Array, anchor_valid: jax.Array, *, block_size: int,
              gamma: float, mask_token_id: int, chunk: int = 128,
              head_group: int | None = None, pin=_no_pin) -> tuple[jax.Array, dict]:
  """-> (loss = sum w CE / sum w, metrics). embed_w / lm_head_w are the target's (frozen).

  chunk: blocks per CE chunk (logits memory); head_group: blocks per head pass (attention
  memory, see `packed_hidden`; None = all blocks in one pass); pin: activation layout
  (sharding.pinner; the identity by default).

  Metrics: acc_per_offset [Bk-1] (k = 1..Bk-1: argmax == label over supervised slots), acc,
  tau_implied = 1 + sum_k prod_{i<=k} acc_i (the accepted length those accuracies imply if
  offsets were independent), accept_len (mean over valid blocks of 1 + the longest run of
  correct supervised slots from k = 1: the chain a greedy verifier would accept), counts.
  """
  b, a = anchors.shape
  hidden = packed_hidden(head, embed_w, feats, batch, anchors, anchor_valid, block_size=block_size,
                         mask_token_id=mask_token_id, group=head_group, pin=pin)
  labels, sup = block_targets(batch.input_ids, batch.loss_mask, anchors, anchor_valid,
                              block_size=block_size)
  ce, hit = chunked_ce(hidden.reshape(b, a, block_size, -1), lm_head_w, labels, chunk, pin=pin)
  w = sup * jnp.asarray(decay_weights(block_size, gamma))                 # [B, A, Bk]
  w_sum = jnp.sum(w)
  loss = jnp.sum(ce * w) / jnp.maximum(w_sum, 1e-9)
  return loss, _metrics(hit, sup, anchor_valid, w_sum)


def _metrics(hit: jax.Array, sup: jax.Array, anchor_valid: jax.Array, w_sum: jax.Array) -> dict:
  good = (hit & sup)[..., 1:].astype(jnp.float32)                         # [B, A, Bk-1]
  den = sup[..., 1:].astype(jnp.float32)
  acc_k = jnp.sum(good, axis=(0, 1)) / jnp.maximum(jnp.sum(den, axis=(0, 1)), 1.0)
  chain = jnp.sum(jnp.cumprod(good, axis=-1), axis=-1)                    # [B, A]
  n_blocks = jnp.sum(anchor_valid)
  return dict(
      acc_per_offset=acc_k,
      acc=jnp.sum(good) / jnp.maximum(jnp.sum(den), 1.0),
      tau_implied=1.0 + jnp.sum(jnp.cumprod(acc_k)),
      accept_len=jnp.sum(jnp.where(anchor_valid, 1.0 + chain, 0.0)) / jnp.maximum(n_blocks, 1),
      num_blocks=n_blocks,
      num_targets=jnp.sum(den),
      weight_sum=w_sum,
  )


# --- references for tests -------------------------------------------------------------------------

def packed_logits(head: BlockHead, embed_w: jax.Array, lm_head_w: jax.Array, feats: jax.Array,
                  batch: TrainBatch, anchors: jax.Array, anchor_valid: jax.Array, *,
                  block_size: int, mask_token_id: int) -> jax.Array:
  """fp32 logits [B, A, Bk, V] of the packed pass (small shapes only: no chunking)."""
  b, a = anchors.shape
  h = packed_hidden(head, embed_w, feats, batch, anchors, anchor_valid, block_size=block_size,
                    mask_token_id=mask_token_id)
  return matmul_t(h, lm_head_w, out_dtype=jnp.float32).reshape(b, a, block_size, -1)


def head_logits_single_block(head: BlockHead, embed_w: jax.Array, lm_head_w: jax.Array,
                             feats_row: jax.Array, positions_row: jax.Array, input_ids_row: jax.Array,
                             anchor, *, block_size: int, mask_token_id: int,
                             sliced: bool = False) -> jax.Array:
  """One block alone, as decoding runs it -> fp32 logits [Bk, V]: block [x_anchor, MASK...] at
  pos[anchor] + k over a context of the features of positions < anchor only.

  By default the context is all S rows with decoding's `block_mask(ctx_len=anchor)` hiding rows
  >= anchor (decoding's fixed-size context cache; `anchor` may be traced, so one compile serves
  every anchor). `sliced=True` instead hands the head exactly rows [0, anchor) (`anchor` a Python
  int). feats_row [S, F], positions_row [3, S], input_ids_row [S].
  """
  dtype = head.fc.weight[...].dtype
  feats_row, positions_row = jnp.asarray(feats_row), jnp.asarray(positions_row)
  n_ctx = anchor if sliced else feats_row.shape[0]
  ctx = head.project_context(feats_row[None, :n_ctx].astype(dtype))       # [1, n_ctx, D]
  ctx_k, ctx_v = head.context_kv(ctx, positions_row[:, None, :n_ctx])
  root = jnp.take(jnp.asarray(input_ids_row), anchor)
  ids = jnp.full((1, block_size), mask_token_id, jnp.int32).at[0, 0].set(root)
  p0 = jnp.take(positions_row, anchor, axis=1)                            # [3]
  pos = (p0[:, None, None] + jnp.arange(block_size)).astype(jnp.int32)    # [3, 1, Bk]
  mask = block_mask(jnp.reshape(anchor, (1,)), n_ctx, block_size)
  h = head(jnp.take(embed_w, ids, axis=0).astype(dtype), pos, ctx_k, ctx_v, mask)
  return matmul_t(h[0], lm_head_w, out_dtype=jnp.float32)
