"""`eagle3` / `eagle3-chain`: the EAGLE-3 head drafts an EAGLE-2 dynamic tree in S sequential passes.

Draft context slot t holds (the target's 3 tapped features of token t, token t + 1) and predicts
token t + 2; slot t of the draft cache is slot t of the target's. A round (root at target slot L):
  1. extend  one head pass over the rows committed last round (pending: features of each committed
             row paired with the next token; the last pair's token is the root), which fills context
             slots up to L - 1; its last row's top-K (log-prob over the draft vocabulary) are the
             depth-1 nodes and the first frontier; all K enter the pool.
  2. levels  S - 1 passes of K rows, one row per frontier node (depth l, the row pairs (h of its
             parent's pass, its own token) at position L + l - 1), each attending to the context
             (slots < L) and to its own ancestors' rows among the tree's scratch slots [L, L + (S-1)K)
             (level l's rows sit at L + (l-1)K + i); each node's top-K children with cumulative
             log-prob all enter the pool; the best K of them are the next frontier.
  3. select  the top N - 1 of the K + (S-1)K^2 pool entries, best first (score desc, then pool index:
             entries are pool-ordered by level and a child scores <= its parent, so a parent always
             precedes its children and every prefix of the node list is a tree).
The scratch rows are simply overwritten next round (the context length is the rollback).

Letters: B rows, Sc draft cache slots (the target's + (S-1)K scratch), C = S + 1 commit rows, F = 3
taps x target width, D head width, K top-k, M = (S-1)K scratch rows, P pool, Vd draft vocabulary.
"""

from __future__ import annotations

import dataclasses

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from glance_jax import sharding as shd
from glance_jax.decode.drafter import Drafter, Prefill, Proposal
from glance_jax.decode.drafters.block import text_positions
from glance_jax.decode.verify import DraftTree
from glance_jax.eagle3.model import Eagle3Cache, causal_mask, draft_to_target, init_cache
from glance_jax.static_args import FlatState, Hashed, as_tree

PRESETS = {"eagle3": (8, 8, 32),          # (S levels, K top-k, N verified incl. the root): the paper's SGLang arm
           "eagle3-chain": (3, 1, 4)}     # the released config: a chain of 3


@flax.struct.dataclass
class Eagle3State:
  cache: Eagle3Cache        # per midlayer [B, Sc, K, hd]: slots < ctx_len are the context
  ctx_len: jax.Array        # int32 [B]: context rows in the cache
  pending: jax.Array        # [B, C, F]: features of the rows committed last round, not yet fed
  pending_tok: jax.Array    # int32 [B, C]: the token after each of those rows (target ids)
  n_pending: jax.Array      # int32 [B]


@dataclasses.dataclass(frozen=True)
class Eagle3Drafter(Drafter):
  name = "eagle3"
  graphdef: Hashed          # the Eagle3Head's graphdef
  levels: int               # S: draft passes a round, the tree's depth
  top_k: int                # K
  num_verify: int           # N: verified tokens including the root
  taps: tuple[int, ...]     # the 3 tapped target layers (low, mid, high), as fc reads them
  mesh: object = None       # the draft cache's layout (kv heads on tensor, rows on data)

  def __post_init__(self):
    s, k, n = self.levels, self.top_k, self.num_verify
    if s < 1 or k < 1 or not 2 <= n <= pool_size(s, k) + 1:
      raise ValueError(f"eagle3: need S >= 1, K >= 1, 2 <= N <= K + (S-1)K^2 + 1, got S={s} K={k} N={n}")

  @property
  def num_nodes(self) -> int:
    return self.num_verify - 1

  @property
  def max_depth(self) -> int:
    return min(self.levels, self.num_nodes)

  @property
  def tap_layers(self) -> tuple[int, ...]:
    return self.taps

  @property
  def passes(self) -> int:
    return self.levels

  @property
  def scratch(self) -> int:
    return (self.levels - 1) * self.top_k

  def _head(self, params):
    return nnx.merge(self.graphdef.value, as_tree(params[0]))

  def _pin(self, cache: Eagle3Cache) -> Eagle3Cache:
    return Eagle3Cache(k=shd.pin_kv(cache.k, self.mesh), v=shd.pin_kv(cache.v, self.mesh))

  def init(self, params, target, prefill: Prefill) -> Eagle3State:
    """The head over the prompt: row t = (taps of token t, token t + 1), the last row's token being
    the first root. That last row is fed again by the first extend (so it can start the tree)."""
    head = self._head(params)
    taps, ids, lengths = prefill.taps, prefill.prompt.input_ids, prefill.lengths   # [B, P, F], [B, P]
    b, p, f = taps.shape
    rows = jnp.arange(b)
    nxt = jnp.pad(ids[:, 1:], ((0, 0), (0, 1))).at[rows, lengths - 1].set(prefill.first).astype(jnp.int32)
    slots = prefill.max_length + self.scratch
    cache = init_cache(head.cfg, b, slots, head.fc.weight[...].dtype)
    zero = jnp.zeros((b,), jnp.int32)
    _, _, cache = head(head.project(taps), head.embed(nxt, target.embed_weight), prefill.prompt.positions,
                       cache, zero, causal_mask(zero, p, slots))
    c = self.max_depth + 1
    pending = jnp.zeros((b, c, f), taps.dtype).at[:, 0].set(taps[rows, lengths - 1])
    pending_tok = jnp.zeros((b, c), jnp.int32).at[:, 0].set(prefill.first)
    # the last prompt token is text (a chat template's assistant header), so its position is
    # (P - 1) + rope_delta, what the extend pass gives it
    return Eagle3State(cache=self._pin(cache), ctx_len=lengths - 1, pending=pending, pending_tok=pending_tok,
                       n_pending=jnp.ones((b,), jnp.int32))

  def propose(self, params, target, state: Eagle3State, st):
    head, d2t = self._head(params), params[1]
    b, c = state.pending_tok.shape
    slots = state.cache.k[0].shape[1]
    rows = jnp.arange(b)
    # (1) extend: the pending rows at context slots [ctx_len, ctx_len + n_pending), causal
    pos = text_positions(state.ctx_len + st.rope_delta, jnp.arange(c))
    # (a fixed C = S + 1 rows: those past n_pending write junk past the context, never attended to)
    embeds = head.embed(state.pending_tok, target.embed_weight)
    logits, h, cache = head(head.project(state.pending), embeds, pos, state.cache, state.ctx_len,
                            causal_mask(state.ctx_len, c, slots))
    last = jnp.maximum(state.n_pending - 1, 0)                          # a done row (n_pending 0): unused
    base = state.ctx_len + state.n_pending                                # [B]: the root's slot L
    root_lp = jax.nn.log_softmax(logits[rows, last], axis=-1)             # [B, Vd]

    # (2) the tree levels: frontier rows at scratch slots base + (l-1)K + i
    k, m = self.top_k, self.scratch

    def expand(cache, level, ids, g, anc):
      """ids [B, K] draft ids at depth `level`, g [B, K, D], anc bool [B, K, M] -> (lp [B,K,Vd], h, cache)."""
      rel = jnp.arange(slots)[None, None, :] - base[:, None, None]        # [B, 1, Sc]
      scr = jnp.take_along_axis(anc, jnp.broadcast_to(jnp.clip(rel, 0, m - 1), (b, k, slots)), axis=2)
      mask = (rel < 0) | ((rel < m) & scr)                                # context + own ancestors + self
      pos = text_positions(base + level - 1 + st.rope_delta, jnp.zeros((k,), jnp.int32))
      lg, hh, cache = head(g, head.embed(draft_to_target(ids, d2t), target.embed_weight), pos, cache,
                           base + (level - 1) * k, mask)
      return jax.nn.log_softmax(lg, axis=-1), hh, cache

    t, scores, cache = grow_tree(root_lp, h[rows, last], expand, cache, levels=self.levels, top_k=k,
                                 num_nodes=self.num_nodes)
    tree = t.replace(tokens=draft_to_target(t.tokens, d2t).astype(jnp.int32))
    return Proposal(tree, scores), state.replace(cache=self._pin(cache), ctx_len=base,
                                                 n_pending=jnp.zeros_like(state.n_pending))

  def commit(self, params, target, state, st, res, feats, live):
    # committed row j (root first) is followed by new_tokens[j] (the next accepted token, or the bonus)
    return state.replace(pending=feats, pending_tok=res.new_tokens, n_pending=jnp.where(live, res.accepted + 1, 0))


def pool_size(levels: int, top_k: int) -> int:
  return top_k + (levels - 1) * top_k * top_k


def grow_tree(root_lp, root_h, expand, carry, *, levels: int, top_k: int, num_nodes: int):
  """The EAGLE-2 dynamic tree, in draft ids.

  root_lp float32 [B, Vd]: log-probs of the root's children; root_h [B, D]: the g input of the
  depth-1 nodes; expand(carry, level, ids [B, K], g [B, K, D], anc bool [B, K, M]) -> (lp [B, K, Vd]
  the children's log-probs, h [B, K, D] their g input, carry), for the frontier at depth `level`
  (traced int32, 1..S-1); anc[b, i, l' K + j] = frontier node i's ancestor (or itself) is level
  l' + 1's row j. -> (DraftTree of `num_nodes` nodes in draft ids, scores float32 [B, N], carry).
  """
  b, _ = root_lp.shape
  k, s, m = top_k, levels, (levels - 1) * top_k
  score, ids = jax.lax.top_k(root_lp.astype(jnp.float32), k)              # [B, K]
  ids = ids.astype(jnp.int32)
  # per frontier node: path [B, K, S] = the pool index of its ancestor at each depth (itself included,
  # -1 below it), anc [B, K, M] = the scratch rows it attends to (its ancestors' and its own)
  path = jnp.full((b, k, s), -1, jnp.int32).at[:, :, 0].set(jnp.arange(k))
  anc = jnp.broadcast_to(jnp.arange(m)[None, :] == jnp.arange(k)[:, None], (b, k, m))
  g = jnp.broadcast_to(root_h[:, None], (b, k) + root_h.shape[1:])
  level1 = (score, ids, jnp.full((b, k), -1, jnp.int32), path)

  def level(carry_front, lvl):
    carry, (ids, g, score, pidx, path, anc) = carry_front
    lp, h, carry = expand(carry, lvl, ids, g, anc)
    clp, cid = jax.lax.top_k(lp.astype(jnp.float32), k)                   # [B, K, K]
    cscore = (score[:, :, None] + clp).reshape(b, k * k)                  # parent-major
    cpool = k + (lvl - 1) * k * k + jnp.arange(k * k, dtype=jnp.int32)
    par = jnp.repeat(jnp.arange(k), k)                                    # [K^2]: parent frontier slot
    cpath = path[:, par].at[:, :, lvl].set(jnp.broadcast_to(cpool, (b, k * k)))
    cid = cid.reshape(b, k * k).astype(jnp.int32)
    nscore, sel = jax.lax.top_k(cscore, k)                                # ties: the earlier entry
    p_of = sel // k
    take = lambda x: jnp.take_along_axis(x, sel.reshape((b, k) + (1,) * (x.ndim - 2)), axis=1)  # noqa: E731
    # the next frontier (depth lvl + 1): its parent's ancestor slots plus its own row lvl K + i, and
    # its parent's h as its g (at the last level it is built and dropped)
    own = jnp.arange(m)[None, None] == (lvl * k + jnp.arange(k))[None, :, None]                  # [1, K, M]
    nanc = jnp.take_along_axis(anc, p_of[:, :, None], axis=1) | own
    front = (take(cid), jnp.take_along_axis(h, p_of[:, :, None], axis=1), nscore, cpool[sel], take(cpath), nanc)
    return (carry, front), (cscore, cid, pidx[:, par], cpath)

  pools = [level1]
  if s > 1:
    front = (ids, g, score, jnp.broadcast_to(jnp.arange(k, dtype=jnp.int32), (b, k)), path, anc)
    (carry, _), ys = jax.lax.scan(level, (carry, front), jnp.arange(1, s, dtype=jnp.int32))
    pools.append(tuple(jnp.moveaxis(y, 0, 1).reshape((b, (s - 1) * k * k) + y.shape[3:]) for y in ys))
  p_score, p_ids, p_parent, p_path = (jnp.concatenate(x, axis=1) for x in zip(*pools))   # [B, P(, S)]
  depth = jnp.asarray(np.repeat(np.arange(1, s + 1), [k] + [k * k] * (s - 1)), jnp.int32)

  # (3) the best N - 1, best first; ties to the lower pool index (lax.top_k), so parents first
  scores, sel = jax.lax.top_k(p_score, num_nodes)                         # [B, N]
  rows = jnp.arange(b)[:, None]
  inv = jnp.full(p_score.shape, -1, jnp.int32).at[rows, sel].set(jnp.arange(num_nodes, dtype=jnp.int32))
  node_path = p_path[rows, sel]                                           # [B, N, S] pool indices
  node_anc = jnp.where(node_path >= 0, inv[rows[:, :, None], jnp.maximum(node_path, 0)], -1)
  on = jnp.any(node_anc[:, :, :, None] == jnp.arange(num_nodes)[None, None, None], axis=2)   # [B, N, N]
  mask = jnp.ones((b, num_nodes + 1, num_nodes + 1), bool).at[:, 1:, 1:].set(on).at[:, 0, 1:].set(False)
  parent = p_parent[rows, sel]                                            # pool index, -1 = the root
  parent = jnp.where(parent >= 0, inv[rows, jnp.maximum(parent, 0)], -1)
  tree = DraftTree(tokens=p_ids[rows, sel], parents=parent, depths=depth[sel], valid=jnp.ones((b, num_nodes), bool),
                   ancestor_mask=mask)
  return tree, scores, carry


def bind(head, target, levels: int, top_k: int, num_verify: int) -> tuple[Eagle3Drafter, tuple]:
  """The drafter of a loaded head (eagle3.Eagle3Checkpoint: cfg, graphdef, params, d2t, t2d) for
  `target` (checked to fit) -> (drafter, params = (head params, d2t int32)). Tokens are embedded
  by the head's own embed_tokens when it has one, else by the target's (read in the loop)."""
  d = drafter_for(head.cfg, head.graphdef, target.config, levels, top_k, num_verify, getattr(target, "mesh", None))
  return d, (FlatState.of(head.params), jnp.asarray(head.d2t, jnp.int32))


def drafter_for(cfg, graphdef, target_config, levels: int, top_k: int, num_verify: int, mesh=None) -> Eagle3Drafter:
  """The drafter alone (no weights: what `bind` and the ahead-of-time compiles share), its head's
  config checked against the target's."""
  cfg.check_target(target_config)
  if top_k > cfg.draft_vocab_size:
    raise ValueError(f"eagle3: top-k {top_k} exceeds the draft vocabulary of {cfg.draft_vocab_size}")
  taps = tuple(cfg.layer_ids_for(target_config.text.num_hidden_layers))
  return Eagle3Drafter(graphdef=Hashed(graphdef), levels=int(levels), top_k=int(top_k), num_verify=int(num_verify),
                       taps=taps, mesh=mesh)


def build(target, head=None, budget=None, preset: str = "eagle3"):
  """A preset's drafter (PRESETS: S / K / N fixed; the budget is not used)."""
  if head is None or not hasattr(head, "d2t"):  # e.g. a block head (head.Head) handed by a CLI
    raise ValueError(f"method {preset!r} needs an EAGLE-3 head (eagle3.load_eagle3), got {type(head).__name__}")
  return bind(head, target, *PRESETS[preset])
