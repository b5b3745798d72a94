"""The exact top-N draft tree without a sequential loop, for small N (decode/tree.py dispatches here).

Every prefix that can be in a top-N set is listed ahead of time in a static table per (N, L, K);
one gather and a left-to-right sum score them all, one top_k takes the N best. On XLA:CPU the
level-synchronous builder's L-step scan cost ~6 us of loop overhead per step on top of its ops:
~130 us of a ~1.6 ms testbed round at N = 15 (a glance round then cost ~3% more than a chain round
at the same tau; the top_k of the head's marginals is shared by both builders).

Which prefixes can be selected. A prefix with ranks (r_1..r_d) scores no more than each prefix
(q_1..q_d') with d' <= d and q_j <= r_j (a lower rank scores at least as much at every depth, and
a shorter prefix drops terms <= 0). There are sum_{d'<=d} prod_{j<=d'} (r_j + 1) of those, itself
included, and the builders' order (score desc, depth asc, then beam order, in which such a prefix
comes first on a tie) puts all the others ahead of it. So a prefix whose count exceeds N is never
selected: 321 candidates remain at N = 15, L = 15; 3223 at N = 31; 28496 at N = 63 (from N = 31
the scan's few ops per step over ~N ln N candidates are cheaper than scoring them all on a CPU).

Order: score desc, then depth asc, then the rank vector in lexicographic order (the table's order,
which top_k keeps on ties). That is the level-synchronous builder's order wherever scores are
distinct; on exact ties between same-depth prefixes whose parents score differently it may differ
(the beam orders them by their parents' scores), as it may between any two exact builders.
Scores are summed left to right, parent score plus the last log-probability, so they are the same
floats as the other builders'.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

# above this the scan is cheaper on XLA:CPU (one build inside a jitted loop, V = 512, L = 15: N = 15
# 20 us enumerated vs 30 us scan; N = 31 (3223 candidates) 64 vs 46 us; N = 63 (28496) 268 vs 109 us)
MAX_CANDIDATES = 1024


@functools.lru_cache(maxsize=64)
def candidate_table(n: int, depth_l: int, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
  """Static candidates sorted by (depth, rank vector): ranks int32 [C, L] (0 past the depth), depth
  int32 [C], ancestors int32 [C, L] (column j: the index of the length-(j + 1) prefix, the last one
  the candidate itself; -1 past the depth). None when there are more than MAX_CANDIDATES."""
  found = []
  stack = [((), 0, 1)]   # (ranks, count of prefixes scoring at least as much, product so far)
  while stack:
    ranks, count, prod = stack.pop()
    if len(ranks) == depth_l:
      continue
    for r in range(k):
      p = prod * (r + 1)
      if count + p > n:
        break
      found.append(ranks + (r,))
      if len(found) > MAX_CANDIDATES:
        return None
      stack.append((ranks + (r,), count + p, p))
  found.sort(key=lambda t: (len(t), t))
  index = {t: i for i, t in enumerate(found)}
  ranks = np.zeros((len(found), depth_l), np.int32)
  depth = np.zeros((len(found),), np.int32)
  anc = np.full((len(found), depth_l), -1, np.int32)
  for i, t in enumerate(found):
    ranks[i, : len(t)] = t
    depth[i] = len(t)
    anc[i, : len(t)] = [index[t[: j + 1]] for j in range(len(t))]
  return ranks, depth, anc


def build_enumerated(top_lq: jax.Array, top_ids: jax.Array, n: int, table) -> dict[str, jax.Array]:
  """top_lq / top_ids [L, K]: each depth's K best log-probabilities and tokens (sorted); table:
  candidate_table(n, L, K). -> the Tree fields (decode/tree.py) of the top-n prefixes, best first."""
  ranks, depth, anc = (jnp.asarray(x) for x in table)
  depth_l = top_lq.shape[0]
  c = ranks.shape[0]
  neg_inf = jnp.float32(-jnp.inf)
  vals = top_lq[jnp.arange(depth_l)[None, :], ranks]                     # [C, L]
  score = vals[:, 0]
  for j in range(1, depth_l):  # left to right: the same float sums as parent score + last term
    score = jnp.where(depth > j, score + vals[:, j], score)
  # real prefixes rank above the padding (fewer than n prefixes exist) even at -inf
  key = jnp.maximum(score, jnp.finfo(jnp.float32).min)
  if c < n:
    key = jnp.concatenate([key, jnp.full((n - c,), neg_inf)])
  _, sel = jax.lax.top_k(key, n)                                          # [n], ties: lower index
  ok = sel < c
  at = jnp.minimum(sel, c - 1)
  d = jnp.where(ok, depth[at], 0)                                         # [n]
  # output position of each candidate (-1: not selected); index c collects the padding
  pos = jnp.full((c + 1,), -1, jnp.int32).at[jnp.where(ok, sel, c)].set(jnp.arange(n, dtype=jnp.int32))
  anc_pos = jnp.where(anc[at] >= 0, pos[jnp.maximum(anc[at], 0)], -1)    # [n, L]
  anc_pos = jnp.where(ok[:, None], anc_pos, -1)
  parents = jnp.where(d > 1, jnp.take_along_axis(anc_pos, jnp.maximum(d - 2, 0)[:, None], axis=1)[:, 0], -1)
  last = jnp.maximum(d - 1, 0)
  tokens = top_ids[last, jnp.take_along_axis(ranks[at], last[:, None], axis=1)[:, 0]]
  cols = jnp.arange(n + 1)
  rows = jnp.any(anc_pos[:, :, None] + 1 == cols[None, None, :], axis=1)  # [n, n + 1]: ancestors
  rows = rows.at[:, 0].set(True) | (cols[None] == jnp.arange(1, n + 1)[:, None])
  return dict(tokens=jnp.where(ok, tokens, 0), parents=parents.astype(jnp.int32), depths=d.astype(jnp.int32),
              scores=jnp.where(ok, score[at], neg_inf), valid=ok,
              ancestor_mask=jnp.concatenate([(cols == 0)[None], rows], 0))
