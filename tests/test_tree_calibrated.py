"""The tree builder under calibrated node scores (tree.build_tree_beam(calibration=(spine, off))):
the exact top N prefixes of the head's per-depth top-K tokens under a score that adds, per node,
a table entry by (depth, rank, parent on the head's top-1 path or not), checked by brute force."""

import itertools

import jax.numpy as jnp
import numpy as np
import pytest

from glance_jax.decode import tree as tree_lib


def _score(path_ranks, spine, off):
  s, on = np.float32(0.0), True
  for d, r in enumerate(path_ranks):
    s = np.float32(s + (spine if on else off)[d, r])
    on = on and r == 0
  return s


@pytest.mark.parametrize("depth_l,k,n,seed", [(3, 3, 10, 0), (4, 2, 9, 1), (3, 4, 20, 2), (2, 3, 12, 3), (4, 3, 40, 4)])
def test_calibrated_tree_is_the_brute_force_top_n(depth_l, k, n, seed):
  rng = np.random.default_rng(seed)
  lq = np.log(rng.dirichlet(np.ones(6), size=depth_l)).astype(np.float32)        # [L, V = 6]
  # tables that do not fall with the rank, and an off-path penalty: what a fitted table may look like
  spine = np.log(rng.uniform(0.05, 0.95, (depth_l, k))).astype(np.float32)
  off = np.log(rng.uniform(0.01, 0.5, (depth_l, k))).astype(np.float32)
  t = tree_lib.build_tree_beam(jnp.asarray(lq), num_nodes=n, top_k=k, calibration=(spine, off))
  order = np.argsort(-lq, axis=-1, kind="stable")[:, :k]                           # rank -> token
  every = [(p, _score(p, spine, off)) for d in range(1, depth_l + 1) for p in itertools.product(range(k), repeat=d)]
  every.sort(key=lambda x: -x[1])
  want = np.array([s for _, s in every[:n]], np.float32)
  got = np.asarray(t.scores)
  np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
  # each node's tokens are the head's tokens at its ranks, and its score is that path's table sum
  toks, parents = np.asarray(t.tokens), np.asarray(t.parents)
  for i in range(n):
    path, j = [], i
    while j >= 0:
      path.append(int(toks[j]))
      j = int(parents[j])
    path = path[::-1]
    ranks = tuple(int(np.flatnonzero(order[d] == tok)[0]) for d, tok in enumerate(path))
    assert _score(ranks, spine, off) == pytest.approx(got[i], abs=1e-6)
    assert parents[i] < i


def test_no_calibration_is_the_plain_builder_and_bad_tables_are_errors():
  rng = np.random.default_rng(5)
  lq = np.log(rng.dirichlet(np.ones(8), size=4)).astype(np.float32)
  a = tree_lib.build_tree_beam(jnp.asarray(lq), num_nodes=15)
  top = np.sort(lq, axis=-1)[:, ::-1][:, :8]
  b = tree_lib.build_tree_beam(jnp.asarray(lq), num_nodes=15, calibration=(top, top))
  np.testing.assert_array_equal(np.asarray(a.tokens), np.asarray(b.tokens))
  np.testing.assert_allclose(np.asarray(a.scores), np.asarray(b.scores), atol=1e-6)
  with pytest.raises(ValueError, match=r"calibration tables must be \[L, K\] = \(4, 8\)"):
    tree_lib.build_tree_beam(jnp.asarray(lq), num_nodes=15, calibration=(top[:, :3], top))
