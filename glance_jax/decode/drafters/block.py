"""`glance` and `chain`: the block head drafts a whole block in one forward pass.

The head (head/model.py, DFlash architecture) reads the target's tapped features of the committed
tokens through its own context cache (K/V per head layer, computed once per committed token) and
returns, in one pass over the block [root, MASK x L], log-marginals q_j over the vocabulary for
offsets j = 1..L (L = block_size - 1), through the target's own embedding and lm_head.
  glance  the N prefixes with the highest plug-in score sum_j log q_j(y_j), best first (decode/tree.py)
  chain   the argmax at each offset: a width-1 tree of depth min(N, L)

State: the context cache and the features of the rows committed last round, which are projected
into the cache at the start of the next draft (so the round that ends a generation pays nothing).

With a draft vocabulary (head/draft_vocab.py; Head.with_draft_vocab) or calibrated node scores
(head/tree_calibration.py; Head.with_calibrated_scores) the params are (head params, DraftVocab or
None, (spine, off) tables or None). A vocabulary: the marginals are over its K tokens (logits
against its gathered [K, D] lm_head rows, not the target's [V, D]), the tree is built over them and
its tokens mapped back to target ids. Calibrated scores: the tree keeps the head's top-K tokens a
depth but ranks prefixes by the tables' acceptance by (depth, rank, parent on the top-1 path).

Letters: B rows, S context slots (= the target cache's), C = max_depth + 1 commit rows, F = taps x
target width, L draft depth, V vocab.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import flax.struct
import jax
import jax.numpy as jnp
from flax import nnx

from glance_jax import sharding as shd
from glance_jax.decode import tree as tree_lib
from glance_jax.decode.drafter import Drafter, Prefill, Proposal
from glance_jax.decode.verify import DraftTree
from glance_jax.head.model import block_mask
from glance_jax.qwen3_vl.cache import write_rows
from glance_jax.qwen3_vl.engine import greedy_tokens
from glance_jax.qwen3_vl.layers import matmul_t
from glance_jax.static_args import Hashed, as_tree


@flax.struct.dataclass
class BlockState:
  k: tuple                  # per head layer [B, S, K, hd]: context K/V of committed tokens
  v: tuple
  ctx_len: jax.Array        # int32 [B]: committed rows already in k / v
  pending: jax.Array        # [B, C, F]: features of last round's committed rows, not yet projected
  n_pending: jax.Array      # int32 [B]


def text_positions(start: jax.Array, offsets: jax.Array) -> jax.Array:
  """start [B] + offsets [B, T] or [T] -> int32 [3, B, T] (generated text: equal on all axes)."""
  pos = start[:, None] + offsets
  return jnp.broadcast_to(pos[None], (3,) + pos.shape).astype(jnp.int32)


@dataclasses.dataclass(frozen=True)
class BlockDrafter(Drafter):
  """A block head bound for decoding: its graphdef (hashed once) and decoding knobs."""
  name = "glance"
  chain: ClassVar[bool] = False
  graphdef: Hashed
  block_size: int
  taps: tuple[int, ...]
  mask_token_id: int
  budget: int               # N: tree nodes (glance) / chain length cap (chain)
  mesh: object = None       # the context cache's layout (kv heads on tensor, rows on data)
  draft_vocab: int = 0      # K: drafts over a DraftVocab of K tokens; 0 = all V
  calibrated: bool = False  # the tree ranks prefixes by calibrated node scores, not log marginals
  correction: Hashed | None = None   # a parent correction's graphdef: each node's own children

  @property
  def depth(self) -> int:
    return self.block_size - 1

  @property
  def num_nodes(self) -> int:
    return min(self.budget, self.depth) if self.chain else self.budget

  @property
  def max_depth(self) -> int:
    return min(self.budget, self.depth)

  @property
  def tap_layers(self) -> tuple[int, ...]:
    return self.taps

  @property
  def passes(self) -> int:
    return 1

  @property
  def _extras(self) -> bool:
    return bool(self.draft_vocab or self.calibrated or self.correction is not None)

  def _split(self, params):
    """params -> (the head's params, its DraftVocab or None, its (spine, off) tables or None, its
    parent correction's params or None)."""
    return tuple(params) if self._extras else (params, None, None, None)

  def _head(self, params):
    return nnx.merge(self.graphdef.value, as_tree(self._split(params)[0]))

  def _pin(self, kv: tuple) -> tuple:
    return shd.pin_kv(kv, self.mesh)

  def init(self, params, target, prefill: Prefill) -> BlockState:
    head = self._head(params)
    ctx = head.project_context(prefill.taps)
    k, v = head.context_kv(ctx, prefill.prompt.positions)               # per layer [B, s, K, hd]
    s = prefill.taps.shape[1]
    pad = lambda x: jnp.pad(x, ((0, 0), (0, prefill.max_length - s), (0, 0), (0, 0)))  # noqa: E731
    b, _, f = prefill.taps.shape
    return BlockState(k=self._pin(tuple(map(pad, k))), v=self._pin(tuple(map(pad, v))), ctx_len=prefill.lengths,
                      pending=jnp.zeros((b, self.max_depth + 1, f), prefill.taps.dtype),
                      n_pending=jnp.zeros((b,), jnp.int32))

  def marginals(self, params, target, state: BlockState, st) -> tuple[jax.Array, BlockState]:
    """One head pass -> (log q [B, L, V] (K: over the draft vocabulary), state with last round's
    features projected)."""
    _, logits, state = self.draft_pass(params, target, state, st)
    return jax.nn.log_softmax(logits, axis=-1), state

  def draft_pass(self, params, target, state: BlockState, st):
    """One head pass -> (hidden [B, L, D] at the drafted offsets, logits fp32 [B, L, V] (K: over the
    draft vocabulary), state with last round's features projected)."""
    head = self._head(params)
    b, c = st.root.shape[0], state.pending.shape[1]
    ctx = head.project_context(state.pending)                             # [B, C, H]
    k, v = head.context_kv(ctx, text_positions(state.ctx_len + st.rope_delta, jnp.arange(c)))
    head_k = self._pin(tuple(write_rows(buf, x, state.ctx_len) for buf, x in zip(state.k, k)))
    head_v = self._pin(tuple(write_rows(buf, x, state.ctx_len) for buf, x in zip(state.v, v)))
    ctx_len = state.ctx_len + state.n_pending
    block = jnp.concatenate([st.root[:, None], jnp.full((b, self.depth), self.mask_token_id, jnp.int32)], 1)
    pos = text_positions(st.cache.length + st.rope_delta, jnp.arange(self.block_size))
    hidden = head(target.embed(block), pos, head_k, head_v,
                  block_mask(ctx_len, head_k[0].shape[1], self.block_size))  # [B, block, H]
    vocab = self._split(params)[1]
    logits = (target.logits(hidden[:, 1:]) if vocab is None                # [B, L, V]
              else matmul_t(hidden[:, 1:], vocab.rows, out_dtype=jnp.float32))   # [B, L, K]
    return hidden[:, 1:], logits, state.replace(k=head_k, v=head_v, ctx_len=ctx_len,
                                                n_pending=jnp.zeros_like(state.n_pending))

  def tree(self, log_q: jax.Array, calibration=None) -> Proposal:
    return head_tree(log_q, self.budget, chain=self.chain, calibration=calibration)

  def propose(self, params, target, state, st):
    if self.correction is not None:
      hidden, logits, state = self.draft_pass(params, target, state, st)
      return self.target_ids(params, self.corrected_tree(params, target, hidden, logits, st.root)), state
    log_q, state = self.marginals(params, target, state, st)
    return self.target_ids(params, self.tree(log_q, self._split(params)[2])), state

  def corrected_tree(self, params, target, hidden, logits, root) -> Proposal:
    """hidden [B, L, D], logits [B, L, V] (K), root int32 [B] -> the exact top-`budget` tree whose
    nodes expand their own children under the parent correction (decode/tree_conditioned.py)."""
    from glance_jax.decode.tree_conditioned import build_tree_conditioned
    _, vocab, _, cparams = self._split(params)
    corr = nnx.merge(self.correction.value, as_tree(cparams))
    rows = None if vocab is None else jnp.take(corr.out[...], vocab.ids, axis=0)   # [K, r]
    to_target = (lambda t: t) if vocab is None else (lambda t: jnp.take(vocab.ids, t, axis=0))  # noqa: E731

    def one(h, z, r):                                                     # [L, D], [L, V], []
      def parent_emb(d, tok):                                             # [N] -> [N, D]
        return target.embed(jnp.where(d == 0, r, to_target(tok)))        # the root is a target id

      def children(d, tok, on, bag=None):                                 # [N] each, bag [N, D] -> [N, V]
        b = corr.bias(parent_emb(d, tok), jnp.broadcast_to(h[d], (tok.shape[0], h.shape[-1])),
                      jnp.broadcast_to(d, tok.shape), on, rows, path_emb=bag)
        return jax.nn.log_softmax(z[d][None] + b, axis=-1)
      return build_tree_conditioned(children, greedy_tokens(z), jnp.int32(0), self.budget,
                                    path_embed=parent_emb if corr.cfg.path else None)

    t = jax.vmap(one)(hidden, logits, root)
    return Proposal(DraftTree(t.tokens, t.parents, t.depths, t.valid, t.ancestor_mask), t.scores)

  def target_ids(self, params, prop: Proposal) -> Proposal:
    """A proposal built over the draft vocabulary with its tokens as target ids (as it is without one)."""
    vocab = self._split(params)[1]
    if vocab is None:
      return prop
    return prop.replace(tree=prop.tree.replace(tokens=jnp.take(vocab.ids, prop.tree.tokens, axis=0)))

  def commit(self, params, target, state, st, res, feats, live):
    return state.replace(pending=feats, n_pending=jnp.where(live, res.accepted + 1, 0))


def head_tree(log_q: jax.Array, budget: int, *, chain: bool = False, calibration=None) -> Proposal:
  """log q [B, L, V] -> the chain of min(budget, L) argmax tokens or the top-`budget` tree, with its
  nodes' log plug-in scores [B, N] (best first for the tree; -inf = padding). calibration: the
  drafter's tables (head/tree_calibration.TreeCalibration.tables): the tree's scores are theirs
  (tree.build_tree_beam), by rank or by each node's own marginal."""
  if chain:
    t = jax.vmap(tree_lib.chain_tree)(log_q[:, : min(budget, log_q.shape[1])])
  elif calibration is not None:
    from glance_jax.head.tree_calibration import increments
    per_node = lambda top_lq: increments(top_lq, calibration)   # noqa: E731 (the builder's own top-K)
    t = jax.vmap(lambda lq: tree_lib.build_tree_beam(lq, num_nodes=budget, calibration=per_node))(log_q)
  else:
    t = jax.vmap(lambda lq: tree_lib.build_tree(lq, num_nodes=budget))(log_q)
  return Proposal(DraftTree(t.tokens, t.parents, t.depths, t.valid, t.ancestor_mask), t.scores)


def bind(head, target, budget: int, *, chain: bool = False) -> BlockDrafter:
  """The drafter of a loaded head (head.Head) for `target` (checked to fit)."""
  head.config.check_target(target.config)
  cls = ChainDrafter if chain else BlockDrafter
  vocab = getattr(head, "draft_vocab", None)
  parent = None if chain else getattr(head, "parent", None)
  return cls(graphdef=head.jit_graphdef, block_size=head.config.block_size,
             taps=tuple(head.config.target_layer_ids), mask_token_id=head.config.mask_token_id,
             budget=int(budget), mesh=getattr(target, "mesh", None),
             draft_vocab=0 if vocab is None else vocab.size,
             calibrated=getattr(head, "scores", None) is not None and not chain and parent is None,
             correction=None if parent is None else Hashed(parent.graphdef))


def drafter_params(head, budget: int, *, chain: bool = False):
  """What a bound head's drafter takes as params: its flat params, or (flat params, DraftVocab or
  None, (spine, off) tables for a budget-`budget` tree or None, parent correction params or None)
  with a vocabulary, calibration or parent correction (which takes the place of calibration)."""
  vocab = getattr(head, "draft_vocab", None)
  parent = None if chain else getattr(head, "parent", None)
  scores = None if chain or parent is not None else getattr(head, "scores", None)
  if vocab is None and scores is None and parent is None:
    return head.flat_params
  tables = None
  if scores is not None:
    v = vocab.size if vocab is not None else head.config.vocab_size
    tables = tuple(jnp.asarray(x) for x in scores.tables(min(int(budget), v)))
  return (head.flat_params, vocab, tables, None if parent is None else parent.params)


@dataclasses.dataclass(frozen=True)
class ChainDrafter(BlockDrafter):
  """The head's argmax at each offset: the tree of width 1."""
  name = "chain"
  chain = True


def _need_head(head, method: str):
  if head is None:
    raise ValueError(f"method {method!r} needs a head (--head)")
  return head


def build(target, head=None, budget: int = 63):
  return bind(_need_head(head, "glance"), target, budget), drafter_params(head, budget)


def build_chain(target, head=None, budget: int = 15):
  return bind(_need_head(head, "chain"), target, budget, chain=True), drafter_params(head, budget, chain=True)
