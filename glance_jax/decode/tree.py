"""Draft-tree construction from per-depth draft marginals (DDTree, on device).

The block-diffusion head returns, in one pass, a log-marginal `log_q[d]` over
the vocabulary for each depth d = 1..L after the root. A draft *node* is a
prefix of ranks (r_1, ..., r_d) into the per-depth top-K lists; it stands for
the token path (top_ids[0, r_1], ..., top_ids[d-1, r_d]) and its plug-in score
is sum_j log_q[j, top_ids[j, r_j]], the log of the product of marginals. The
tree we verify is the set of the N highest-scoring prefixes (DDTree, Ringel &
Romano, arXiv 2604.12989): under a factorised draft it maximises the expected
accepted length among N-node trees.

Algorithm (best-first enumeration with fixed shapes):

  Give every prefix a single *predecessor*: (r_1..r_{d-1}, r_d - 1) if r_d > 0
  (its previous sibling), else (r_1..r_{d-1}) (its parent; the root for d = 1).
  These edges form a spanning tree over all prefixes whose root is (0,). Along
  each edge the score cannot increase: a sibling step swaps log_q[d, r] for
  log_q[d, r + 1] <= log_q[d, r] (top-K lists are sorted), and a child step
  adds a log-probability <= 0. Every prefix has at most two successors: its
  next sibling and its first child.

  Popping the best frontier entry, emitting it, and pushing its successors
  therefore emits prefixes in non-increasing score order, and after n pops
  the emitted set is a top-n set: every unemitted prefix has an ancestor (in
  the predecessor tree) on the frontier, which scores at least as much as it,
  and the popped entry was the frontier's best. The same argument gives
  prefix-closure for free -- a parent is a predecessor-chain ancestor, so it
  is emitted earlier -- which also makes `parents[i] < i`.

  Exactness needs the rows of `log_q` to be log-probabilities (<= 0); for
  unnormalised logits an extension can outscore its prefix.

On device: each pop removes one frontier entry and adds at most two, so after
n pops at most n + 1 entries are live. The frontier is a fixed array of N + 1
slots (score, parent score, depth, rank, parent, active). Step i reuses the
popped slot for the next sibling and writes the first child into slot i + 1,
which has never been used. `lax.fori_loop` runs N steps, each an O(N)
argmax, so building is O(N^2) work and N sequential steps; that is cheap for
N <= a few hundred. Ties go to the lowest frontier slot, so the result is
deterministic. The ancestor mask row of node i is its parent's row plus
itself, filled in the same loop.

Scores are accumulated left to right (parent score + log_q of the last
token), so they equal a sequential float32 sum along the path exactly.

K = min(N, V) ranks per depth lose nothing: a node of rank r at depth d has r
siblings and d - 1 ancestors that score at least as much, so it can only be
in a top-N set if r + d <= N, i.e. r < N.

When fewer than N prefixes exist (sum_{d<=L} K^d < N), the tail is padding:
`valid` False, parent -1, depth 0, token 0, score -inf, and the mask row sees
only the root and itself. Consumers (the verify walk) must ignore those rows.
"""

from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from glance_jax.decode import tree_enumerated
from glance_jax.qwen3_vl.engine import greedy_tokens


@flax.struct.dataclass
class Tree:
  """A draft tree of N nodes below a root (the pending, already-chosen token).

  Node i in 0..N-1 is row/column i + 1 of `ancestor_mask`; row/column 0 is the
  root. Nodes are in emission order (scores non-increasing), so every parent
  precedes its children.
  """

  tokens: jax.Array  # [N] int32, token id of each node.
  parents: jax.Array  # [N] int32, node index of the parent, -1 = root.
  depths: jax.Array  # [N] int32, 1..L (root is depth 0; padding is 0).
  scores: jax.Array  # [N] float32, sum of log-marginals along the path.
  valid: jax.Array  # [N] bool, False only for padding.
  ancestor_mask: jax.Array  # [N+1, N+1] bool, [i, j] = j is i or an ancestor.

  @property
  def num_nodes(self) -> int:
    return self.tokens.shape[-1]


def tree_positions(depths: jax.Array, root_pos: jax.Array | int) -> jax.Array:
  """Positions of [root; nodes] for the verify pass: root_pos + depth.

  The root sits at depth 0, so the result has one more entry than `depths`
  (root first), matching the verify input [b, token_1..token_N]. Works on a
  leading batch (`depths` [..., N], `root_pos` [...]).
  """
  return jnp.asarray(root_pos)[..., None] + jnp.pad(
      depths, [(0, 0)] * (depths.ndim - 1) + [(1, 0)]
  )  # [..., N+1]


def ancestor_mask_from_parents(parents: jax.Array) -> jax.Array:
  """Builds the [N+1, N+1] ancestor mask (root = row/col 0) from parents.

  Row i + 1 = row(parents[i] + 1) | onehot(i + 1), so parents must satisfy
  parents[i] < i (-1 = root). Kept for drafters that build trees some other
  way; `build_tree` fills the same rows inside its own loop.
  """
  n = parents.shape[-1]
  mask = jnp.zeros((n + 1, n + 1), bool).at[0, 0].set(True)  # [N+1, N+1]
  cols = jnp.arange(n + 1)  # [N+1]

  def body(i, mask):
    row = mask[parents[i] + 1] | (cols == i + 1)  # [N+1]
    return mask.at[i + 1].set(row)

  return jax.lax.fori_loop(0, n, body, mask)


def _check_args(log_q: jax.Array, num_nodes: int, top_k: int | None) -> tuple[int, int, int, int]:
  if log_q.ndim != 2:
    raise ValueError(f'log_q must be [L, V], got shape {log_q.shape}.')
  depth_l, vocab = log_q.shape
  n = int(num_nodes)
  if n < 1:
    raise ValueError(f'num_nodes must be >= 1, got {num_nodes}.')
  k = min(n, vocab) if top_k is None else int(top_k)
  if not 1 <= k <= vocab:
    raise ValueError(f'top_k must be in [1, {vocab}], got {top_k}.')
  return depth_l, vocab, n, k


def build_tree(
    log_q: jax.Array, num_nodes: int = 63, top_k: int | None = None
) -> Tree:
  """Exact top-N prefixes of the per-depth top-K tokens, best first: by enumeration of the static
  candidate set when it is small (decode/tree_enumerated.py: no sequential loop; N = 15 at L = 15,
  not 31), else level-synchronously (`build_tree_beam`). Same arguments and result as
  `build_tree_beam`; the two agree on the node set and scores, and on the order wherever scores
  are distinct.
  """
  depth_l, _, n, k = _check_args(log_q, num_nodes, top_k)
  table = tree_enumerated.candidate_table(n, depth_l, k)
  if table is None:
    return build_tree_beam(log_q, num_nodes, top_k)
  top_lq, top_ids = jax.lax.top_k(log_q.astype(jnp.float32), k)  # [L, K]
  return Tree(**tree_enumerated.build_enumerated(top_lq, top_ids.astype(jnp.int32), n, table))


def build_tree_beam(
    log_q: jax.Array, num_nodes: int = 63, top_k: int | None = None, calibration=None
) -> Tree:
  """Exact top-N prefixes of the per-depth top-K tokens, best first (level-synchronous).

  Depth by depth: the N best paths of length d are among the N x K one-token extensions of the N
  best paths of length d - 1 (a path outranks none of its extensions, so any better length-(d-1)
  path than a beam path's parent is itself better than the beam path), so each depth is one top-N
  over N x K candidates. The result is the first N of the L x N beam entries in one global order
  (score desc, then depth asc, then beam position asc; `lax.top_k` keeps the lower index first on
  ties and the [L, N] array is depth-major). A parent always precedes its children in that order
  (score >= and shallower), so every prefix of the output is prefix-closed: the first n nodes are
  the top-n tree for every n (what `--budgets auto` relies on), and parents[i] < i.

  L - 1 sequential steps (a `lax.scan`) instead of N pops. Ranking uses a key that is the score for
  real prefixes (clamped at the lowest finite float, so -inf log-probs still rank above padding)
  and -inf for beam slots that hold no prefix; scores are stored unclamped.

  Args:
    log_q: [L, V] float log-marginals of the draft at depths 1..L (rows must
      be log-probabilities). Use `jax.vmap` for a batch.
    num_nodes: N, the static number of tree nodes (root excluded).
    top_k: K, the static number of ranks kept per depth; defaults to
      min(N, V), which is exact (see module docstring). Smaller K restricts
      the tree to the K best tokens per depth (K = 1 gives the argmax chain).
    calibration: None (a node adds its token's log q), or (spine, off), each [L, K] float <= 0,
      or a function of the sorted top-K log q [L, K] returning them: a node of rank r at depth d
      adds spine[d - 1, r] when its parent is on the head's top-1 path (the root is), else
      off[d - 1, r] (head/tree_calibration.py fits them). The tokens are still
      the head's top-K per depth; only the scores change. Every (beam slot, rank) pair is a
      candidate then (the (i + 1)(r + 1) <= N pruning needs increments that fall with the rank
      whatever the parent), which keeps the top N exact under any table.

  Returns:
    A `Tree` with N nodes in non-increasing score order.
  """
  depth_l, _, n, k = _check_args(log_q, num_nodes, top_k)
  top_lq, top_ids = jax.lax.top_k(log_q.astype(jnp.float32), k)  # [L, K]
  top_ids = top_ids.astype(jnp.int32)
  neg_inf = jnp.float32(-jnp.inf)
  if calibration is None:
    inc_spine = inc_off = top_lq
  else:
    tables = calibration(top_lq) if callable(calibration) else calibration
    inc_spine, inc_off = (jnp.asarray(c, jnp.float32) for c in tables)
    if inc_spine.shape != (depth_l, k) or inc_off.shape != (depth_l, k):
      raise ValueError(f"calibration tables must be [L, K] = {(depth_l, k)}, got {inc_spine.shape} and {inc_off.shape}")

  # The root as a beam of one real slot; depth 1 is its extension like every other depth. (Scanning
  # over the whole top_k output, never slicing it with a constant index, keeps XLA:CPU from
  # rewriting the TopK into a full sort of every [V] row, ~70x slower at V = 32000.)
  root = (jnp.full((n,), neg_inf).at[0].set(0.0), jnp.arange(n) == 0, jnp.zeros((n,), jnp.int32),
          jnp.full((n,), -1, jnp.int32), jnp.arange(n) == 0)

  # Candidate (slot i, rank r) is outranked by the (i + 1)(r + 1) - 1 candidates (i' <= i, r' <= r)
  # (beam sorted, ranks sorted, and all of them earlier in parent-major order), so only pairs with
  # (i + 1)(r + 1) <= N can make the top N: ~N ln N candidates instead of N x K.
  pairs = np.array([(i, r) for i in range(n) for r in range(k)
                    if calibration is not None or (i + 1) * (r + 1) <= n], np.int32)
  cand_slot, cand_rank = jnp.asarray(pairs[:, 0]), jnp.asarray(pairs[:, 1])  # [P], parent-major

  def extend(carry, depth_row):
    score, real, _, _, spine = carry  # [N] each
    spine_row, off_row, ids_row = depth_row  # [K]
    on = spine[cand_slot]  # [P]: the candidate's parent is on the top-1 path
    cand = score[cand_slot] + jnp.where(on, spine_row[cand_rank], off_row[cand_rank])  # [P]
    cand_real = real[cand_slot]  # [P]
    _, idx = jax.lax.top_k(rank_key(cand, cand_real), n)  # [N]
    beam = (cand[idx], cand_real[idx], ids_row[cand_rank[idx]], cand_slot[idx],
            on[idx] & (cand_rank[idx] == 0))
    return beam, beam[:4]

  _, beams = jax.lax.scan(extend, root, (inc_spine, inc_off, top_ids))  # each [L, N]
  return select_tree(*beams)


def rank_key(score: jax.Array, real: jax.Array) -> jax.Array:
  """The beam builders' ranking key: the score for real prefixes (clamped at the lowest finite
  float, so -inf log-probs still rank above padding), -inf for slots that hold no prefix."""
  lowest = jnp.float32(jnp.finfo(jnp.float32).min)
  return jnp.where(real, jnp.maximum(score, lowest), jnp.float32(-jnp.inf))


def select_tree(b_score: jax.Array, b_real: jax.Array, b_tok: jax.Array, b_par: jax.Array) -> Tree:
  """A level-synchronous builder's beams, each [L, N] (score, holds a prefix, token, parent's slot
  in the previous depth's beam) -> the first N of the L x N entries in one global order (score desc,
  then depth asc, then beam position asc), as a `Tree` with parents and ancestor mask."""
  depth_l, n = b_score.shape
  neg_inf = jnp.float32(-jnp.inf)
  flat_score = b_score.reshape(-1)  # [L*N], depth-major
  flat_real = b_real.reshape(-1)
  _, sel = jax.lax.top_k(rank_key(flat_score, flat_real), n)  # [N] flat beam index per node
  ok = flat_real[sel]
  depth0 = sel // n  # 0-based depth
  # Output position of every selected beam entry; the parent of node i is at depth0 - 1 in the beam.
  where = jnp.full((depth_l * n,), -1, jnp.int32).at[sel].set(jnp.arange(n, dtype=jnp.int32))
  par_flat = (depth0 - 1) * n + b_par.reshape(-1)[sel]
  parents = jnp.where(ok & (depth0 > 0), where[jnp.maximum(par_flat, 0)], -1)  # [N]
  # Ancestor mask: walk up the parent pointers L times, every step one column per row.
  cols = jnp.arange(n + 1)  # [N+1]
  node = jnp.where(ok, jnp.arange(n), -1)
  rows = jnp.zeros((n, n + 1), bool)
  for _ in range(depth_l):
    rows = rows | ((node[:, None] + 1 == cols[None]) & (node[:, None] >= 0))
    node = jnp.where(node >= 0, parents[jnp.maximum(node, 0)], -1)
  rows = rows.at[:, 0].set(True) | (cols[None] == jnp.arange(1, n + 1)[:, None])
  mask = jnp.concatenate([(cols == 0)[None], rows], 0)  # [N+1, N+1]
  return Tree(
      tokens=jnp.where(ok, b_tok.reshape(-1)[sel], 0),
      parents=parents,
      depths=jnp.where(ok, depth0 + 1, 0).astype(jnp.int32),
      scores=jnp.where(ok, flat_score[sel], neg_inf),
      valid=ok,
      ancestor_mask=mask,
  )


def build_tree_best_first(
    log_q: jax.Array, num_nodes: int = 63, top_k: int | None = None
) -> Tree:
  """The previous builder (N sequential pops of a frontier, module docstring): kept as the
  reference `build_tree` is tested against and for the before / after round split.

  Same arguments and result as `build_tree`.
  """
  depth_l, _, n, k = _check_args(log_q, num_nodes, top_k)

  top_lq, top_ids = jax.lax.top_k(log_q.astype(jnp.float32), k)  # [L, K]
  top_ids = top_ids.astype(jnp.int32)
  neg_inf = jnp.float32(-jnp.inf)
  f = n + 1  # Frontier slots: at most i + 1 live entries after i pops.

  # Frontier, one entry per slot. `pscore` is the parent's score, so that
  # sibling scores are pscore + log_q (no subtract-then-add rounding).
  frontier = dict(
      # max(log_q[0]) == top_lq[0, 0]. Slicing top_k's output with a constant index instead lets
      # XLA:CPU rewrite the TopK call into a full sort of every [V] row (~70x slower at V = 32000).
      score=jnp.full((f,), neg_inf).at[0].set(jnp.max(log_q[0].astype(jnp.float32))),  # [F]
      pscore=jnp.zeros((f,), jnp.float32),  # [F]
      depth=jnp.zeros((f,), jnp.int32).at[0].set(1),  # [F]
      rank=jnp.zeros((f,), jnp.int32),  # [F]
      parent=jnp.full((f,), -1, jnp.int32),  # [F]
      active=jnp.zeros((f,), bool).at[0].set(True),  # [F]
  )
  out = dict(
      tokens=jnp.zeros((n,), jnp.int32),
      parents=jnp.full((n,), -1, jnp.int32),
      depths=jnp.zeros((n,), jnp.int32),
      scores=jnp.full((n,), neg_inf),
      valid=jnp.zeros((n,), bool),
      mask=jnp.zeros((n + 1, n + 1), bool).at[0, 0].set(True),
  )
  cols = jnp.arange(n + 1)  # [N+1]

  def step(i, carry):
    fr, out = carry
    # Best live slot; ties (and -inf scores) go to the lowest live slot.
    masked = jnp.where(fr['active'], fr['score'], neg_inf)  # [F]
    best = jnp.max(masked)
    slot = jnp.argmax(fr['active'] & (masked == best))
    ok = fr['active'][slot]  # False once every prefix has been emitted.
    d, r = fr['depth'][slot], fr['rank'][slot]
    s, ps, par = fr['score'][slot], fr['pscore'][slot], fr['parent'][slot]

    # Emit node i (padding if `ok` is False).
    row = out['mask'][jnp.where(ok, par, -1) + 1] | (cols == i + 1)  # [N+1]
    out = dict(
        tokens=out['tokens'].at[i].set(
            jnp.where(ok, top_ids[jnp.maximum(d - 1, 0), r], 0)),
        parents=out['parents'].at[i].set(jnp.where(ok, par, -1)),
        depths=out['depths'].at[i].set(jnp.where(ok, d, 0)),
        scores=out['scores'].at[i].set(jnp.where(ok, s, neg_inf)),
        valid=out['valid'].at[i].set(ok),
        mask=out['mask'].at[i + 1].set(row),
    )

    # Popped slot <- next sibling (same parent, rank + 1).
    sib_ok = ok & (r + 1 < k)
    sib_score = ps + top_lq[jnp.maximum(d - 1, 0), jnp.minimum(r + 1, k - 1)]
    fr = dict(
        fr,
        score=fr['score'].at[slot].set(jnp.where(sib_ok, sib_score, neg_inf)),
        rank=fr['rank'].at[slot].set(r + 1),
        active=fr['active'].at[slot].set(sib_ok),
    )
    # Slot i + 1 (never used before) <- first child (depth + 1, rank 0).
    child_ok = ok & (d < depth_l)
    child_score = s + top_lq[jnp.minimum(d, depth_l - 1), 0]
    fr = dict(
        score=fr['score'].at[i + 1].set(jnp.where(child_ok, child_score,
                                                  neg_inf)),
        pscore=fr['pscore'].at[i + 1].set(s),
        depth=fr['depth'].at[i + 1].set(d + 1),
        rank=fr['rank'].at[i + 1].set(0),
        parent=fr['parent'].at[i + 1].set(i),
        active=fr['active'].at[i + 1].set(child_ok),
    )
    return fr, out

  _, out = jax.lax.fori_loop(0, n, step, (frontier, out))
  return Tree(
      tokens=out['tokens'],
      parents=out['parents'],
      depths=out['depths'],
      scores=out['scores'],
      valid=out['valid'],
      ancestor_mask=out['mask'],
  )


def chain_tree(log_q: jax.Array) -> Tree:
  """The width-1 tree (argmax token per depth), N = L, in `Tree` format.

  This is the DFlash chain baseline: node i is depth i + 1 with parent i - 1,
  so the same verify/walk code serves chains and trees. Equal to
  `build_tree(log_q, num_nodes=L, top_k=1)` but without the loop.
  """
  if log_q.ndim != 2:
    raise ValueError(f'log_q must be [L, V], got shape {log_q.shape}.')
  depth_l = log_q.shape[0]
  log_q = log_q.astype(jnp.float32)
  # = jnp.argmax (first index of the maximum), as two plain reductions: XLA:CPU's variadic argmax
  # reduce took ~47 us of a ~1.5 ms testbed round here ([15, 512])
  tokens = greedy_tokens(log_q)  # [L]
  best = jnp.take_along_axis(log_q, tokens[:, None], axis=-1)[:, 0]  # [L]
  idx = jnp.arange(depth_l, dtype=jnp.int32)  # [L]
  return Tree(
      tokens=tokens,
      parents=idx - 1,
      depths=idx + 1,
      scores=jnp.cumsum(best),
      valid=jnp.ones((depth_l,), bool),
      ancestor_mask=jnp.tril(jnp.ones((depth_l + 1, depth_l + 1), bool)),
  )
