"""EAGLE-3's training objective: training-time test (TTT), the draft unrolled on its own outputs.

Follows SpecForge's `OnlineEagle3Model` (sgl-project/SpecForge@a6b6b02,
`specforge/core/eagle3.py`) and EAGLE's `traineagle3/cnets.py` (SafeAILab/EAGLE@cb7e084), restated:

- Row t of step 0 pairs (g_0[t] = fc(features of token t), token t + 1) and predicts token t + 2,
  at rope position pos(t). Step k >= 1: the same rows, each fed its own step k - 1 output h (before
  the final norm) as g, with token t + 1 + k (teacher forced), at position pos(t) + k, predicting
  token t + 2 + k. So step k of row t is exactly the k-th draft step of a chain grown from row t at
  decode time: the decode-time draft of (feature of committed token t, its successor) and then k
  of its own steps (tests/test_eagle3_train.py checks that equality through the head's KV cache).
- Attention at step k: row t sees step 0's keys at rows <= t (its causal context) and, of steps
  1..k, only its own row (the "diagonal": the chain's own ancestors), never another row's steps.
  The K/V of every step go to one cache of k_steps x S slots; step k's rows are written at
  [k S, (k + 1) S) and the mask below picks their keys.
- Target of step k at row t: the target's distribution at position t + 1 + k (its logits there
  predict token t + 2 + k) renormalised over the draft vocabulary: softmax of the final hidden
  state against the lm_head rows of the draft tokens only. Soft cross-entropy against it;
  loss = sum_k decay^k loss_k (decay 0.8), loss_k the mean over supervised rows.
- Supervised at step k: token t + 2 + k is a response token inside the row and the target's argmax
  there is in the draft vocabulary (SpecForge drops the others). On regenerated rows (the target's
  own greedy answers, what the trainers use) that argmax IS the next token, so the check reads
  t2d[ids[t + 2 + k]] and the full-vocabulary logits are never formed.

Letters: B rows, S seq_len, Kt unrolled steps, D head width, Dt target width, Vd draft vocab.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from glance_jax.eagle3.model import Eagle3Cache, Eagle3Head
from glance_jax.qwen3_vl.layers import matmul_t
from glance_jax.train.batch import TrainBatch

TTT_STEPS = 7      # unrolled steps (SpecForge's ttt_length, EAGLE-3's recipe)
TTT_DECAY = 0.8    # step k weighs decay^k


def shifted(x: jax.Array, k: int, fill=0) -> jax.Array:
  """x [B, S, ...] -> x[:, k:] right-padded back to S with `fill`."""
  pad = [(0, 0), (0, k)] + [(0, 0)] * (x.ndim - 2)
  return jnp.pad(x[:, k:], pad, constant_values=fill)


def ttt_mask(valid: jax.Array, step: int, steps: int) -> jax.Array:
  """valid bool [B, S] (real tokens) -> bool [B, S, steps * S]: step `step`'s rows over the cache.

  Row t sees step 0's slots s <= t that hold real tokens, and slot j S + t of steps j = 1..step."""
  b, s = valid.shape
  row = jnp.arange(s)
  causal = (row[None, :] <= row[:, None])[None] & valid[:, None, :]            # [B, S, S]
  diag = jnp.eye(s, dtype=bool)
  blocks = [causal] + [jnp.broadcast_to(diag, (b, s, s)) & (j <= step) for j in range(1, steps)]
  return jnp.concatenate(blocks, axis=-1)


def target_distribution(final_hidden: jax.Array, draft_rows: jax.Array) -> jax.Array:
  """final_hidden [B, S, Dt] (the target's normed last hidden state), draft_rows [Vd, Dt] (its
  lm_head rows of the draft tokens) -> probabilities fp32 [B, S, Vd]: the target's next-token
  distribution renormalised over the draft vocabulary."""
  return jax.nn.softmax(matmul_t(final_hidden, draft_rows, out_dtype=jnp.float32), axis=-1)


def unroll(head: Eagle3Head, embed_w: jax.Array, feats: jax.Array, batch: TrainBatch,
           steps: int = TTT_STEPS) -> list[jax.Array]:
  """The TTT forward: per step k, the draft logits fp32 [B, S, Vd] of every row (module docstring).
  feats [B, S, 3 Dt]: the head's taps concatenated; embed_w [V, D]: the target's frozen embedding
  (unused when the head has its own)."""
  if steps < 1:
    raise ValueError(f"steps must be >= 1, got {steps}")
  b, s = batch.input_ids.shape
  if feats.shape[:2] != (b, s):
    raise ValueError(f"features {feats.shape} do not cover the batch {batch.input_ids.shape}")
  dtype = head.fc.weight[...].dtype
  shape = (b, steps * s, head.cfg.num_key_value_heads, head.cfg.head_dim)
  cache = Eagle3Cache(k=tuple(jnp.zeros(shape, dtype) for _ in head.layers),
                      v=tuple(jnp.zeros(shape, dtype) for _ in head.layers))
  valid = batch.attention_mask.astype(bool)
  g = head.project(feats.astype(dtype))                                        # [B, S, D]
  out = []
  for k in range(steps):
    embeds = head.embed(shifted(batch.input_ids, 1 + k), embed_w).astype(dtype)  # token t + 1 + k
    logits, g, cache = head(g, embeds, batch.positions + k, cache, jnp.full((b,), k * s, jnp.int32),
                            ttt_mask(valid, k, steps))                          # g: the next step's input
    out.append(logits)
  return out


def ttt_loss(head: Eagle3Head, embed_w: jax.Array, feats: jax.Array, target_p: jax.Array,
             batch: TrainBatch, t2d: jax.Array, *, steps: int = TTT_STEPS,
             decay: float = TTT_DECAY) -> tuple[jax.Array, dict]:
  """-> (loss, metrics). target_p [B, S, Vd] (target_distribution), t2d bool [V] (target token ->
  in the draft vocabulary); the rest as `unroll`.

  Metrics per step k: loss_k, acc_k (draft argmax == the target's argmax over the draft vocabulary,
  on supervised rows), n_k (supervised rows); acc = acc_0."""
  if target_p.shape[:2] != batch.input_ids.shape:
    raise ValueError(f"target distribution {target_p.shape} does not cover the batch {batch.input_ids.shape}")
  ids, resp = batch.input_ids, batch.loss_mask.astype(bool)
  loss, metrics = jnp.float32(0.0), {}
  for k, logits in enumerate(unroll(head, embed_w, feats, batch, steps)):
    label = shifted(ids, 2 + k)                                                 # token t + 2 + k
    sup = shifted(resp, 2 + k, False) & jnp.take(t2d, label, axis=0)            # [B, S]
    p = shifted(target_p, 1 + k)                                                # [B, S, Vd]
    ce = -jnp.sum(p * jax.nn.log_softmax(logits, axis=-1), axis=-1)             # [B, S]
    n = jnp.sum(sup)
    loss_k = jnp.sum(jnp.where(sup, ce, 0.0)) / jnp.maximum(n, 1)
    hit = (jnp.argmax(logits, -1) == jnp.argmax(p, -1)) & sup
    loss = loss + (decay ** k) * loss_k
    metrics.update({f"loss_{k}": loss_k, f"acc_{k}": jnp.sum(hit) / jnp.maximum(n, 1), f"n_{k}": n})
  metrics["acc"] = metrics["acc_0"]
  return loss, metrics
