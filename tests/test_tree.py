"""Tests for the on-device best-first draft-tree builder.

The main oracle is brute force: enumerate every prefix of every depth, sort
by score and keep the top N. For sizes where that is impossible we use a
heapq transcription of DDTree's host builder and a top-N certificate (every
prefix one step outside the tree scores no more than the worst tree node).

Compiles are the cost here, so the hypothesis test runs at one fixed log_q
shape ([4, 5]) and simulates smaller (L, V) by giving the unused depths and
tokens log-probability -1e4: with N <= #real prefixes they can never enter
the top N, and the brute force runs on the real sub-problem only.
"""

import heapq
import itertools

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from glance_jax.decode import tree as tree_lib
from glance_jax.decode import tree_enumerated

_build = jax.jit(tree_lib.build_tree, static_argnames=('num_nodes', 'top_k'))
_build_batched = jax.jit(
    lambda lq, num_nodes: jax.vmap(
        lambda row: tree_lib.build_tree(row, num_nodes=num_nodes))(lq),
    static_argnames=('num_nodes',),
)
_beam = jax.jit(tree_lib.build_tree_beam, static_argnames=('num_nodes', 'top_k'))
_old = jax.jit(tree_lib.build_tree_best_first, static_argnames=('num_nodes', 'top_k'))
# build_tree enumerates the static candidate set at these sizes; the level-synchronous beam is
# build_tree's path above tree_enumerated.MAX_CANDIDATES and is checked on the same problems
_BUILDERS = {'build_tree': _build, 'beam': _beam}
_chain = jax.jit(tree_lib.chain_tree)
_mask_from_parents = jax.jit(tree_lib.ancestor_mask_from_parents)

_MAX_L, _MAX_V = 4, 5  # Fixed shape of the hypothesis test.
_FAKE = -1e4  # Log-prob of simulated-away tokens and depths.


def _log_softmax(logits: np.ndarray) -> np.ndarray:
  """float32 log-softmax that is <= 0 exactly (what the builder assumes)."""
  logits = logits.astype(np.float32)
  z = logits - logits.max(-1, keepdims=True)
  lq = z - np.log(np.exp(z).sum(-1, keepdims=True))
  return np.minimum(lq, 0.0).astype(np.float32)


def _path_score(lq: np.ndarray, path: tuple[int, ...]) -> np.float32:
  """Sequential float32 sum, the same order the builder accumulates in."""
  s = np.float32(0.0)
  for d, t in enumerate(path):
    s = np.float32(s + lq[d, t])
  return s


def _brute_force(lq: np.ndarray, num_nodes: int, top_k: int | None = None):
  """Top-N (path, score) over all prefixes, restricted to top_k per depth."""
  depth_l, vocab = lq.shape
  if top_k is None:
    allowed = [list(range(vocab))] * depth_l
  else:
    allowed = [list(np.argsort(-lq[d], kind='stable')[:top_k])
               for d in range(depth_l)]
  scored = []
  for d in range(1, depth_l + 1):
    for path in itertools.product(*allowed[:d]):
      path = tuple(int(t) for t in path)
      scored.append((path, _path_score(lq, path)))
  scored.sort(key=lambda ps: -ps[1])  # Stable, but ties are arbitrary anyway.
  return scored[:num_nodes], scored[num_nodes:]


def _heap_reference(lq: np.ndarray, num_nodes: int, top_k: int):
  """DDTree's host heap builder (liranringel/ddtree), scores as in ours."""
  order = np.argsort(-lq, axis=-1, kind='stable')[:, :top_k]
  top_lq = np.take_along_axis(lq, order, -1)
  depth_l = lq.shape[0]
  heap = [(-top_lq[0, 0], 0, 1, 0, np.float32(0.0))]
  counter = 1
  scores = []
  while heap and len(scores) < num_nodes:
    neg, _, d, r, ps = heapq.heappop(heap)
    s = np.float32(-neg)
    scores.append(s)
    if r + 1 < top_k:
      heapq.heappush(heap, (-np.float32(ps + top_lq[d - 1, r + 1]), counter,
                            d, r + 1, ps))
      counter += 1
    if d < depth_l:
      heapq.heappush(heap, (-np.float32(s + top_lq[d, 0]), counter, d + 1, 0,
                            s))
      counter += 1
  return np.array(scores, np.float32)


def _to_numpy(tree: tree_lib.Tree) -> dict[str, np.ndarray]:
  return {k: np.asarray(v) for k, v in vars(tree).items()}


def _paths(t: dict[str, np.ndarray]) -> list[tuple[int, ...]]:
  """Token path of every node, via parent pointers."""
  paths = []
  for i in range(len(t['tokens'])):
    p = t['parents'][i]
    prefix = () if p < 0 else paths[p]
    paths.append(prefix + (int(t['tokens'][i]),))
  return paths


def _naive_mask(parents: np.ndarray) -> np.ndarray:
  n = len(parents)
  mask = np.zeros((n + 1, n + 1), bool)
  mask[:, 0] = True
  for i in range(n):
    j = i
    while j >= 0:
      mask[i + 1, j + 1] = True
      j = parents[j]
  return mask


def _check_structure(t: dict[str, np.ndarray], lq: np.ndarray) -> None:
  """Invariants every tree must satisfy, padding included."""
  n = len(t['tokens'])
  valid = t['valid']
  num_valid = int(valid.sum())
  assert valid[:num_valid].all() and not valid[num_valid:].any()
  for i in range(n):
    p = t['parents'][i]
    assert -1 <= p < i
    if not valid[i]:
      assert p == -1 and t['depths'][i] == 0 and t['scores'][i] == -np.inf
      continue
    assert p == -1 or valid[p]
    parent_depth = 0 if p < 0 else t['depths'][p]
    assert t['depths'][i] == parent_depth + 1
    parent_score = np.float32(0.0) if p < 0 else t['scores'][p]
    np.testing.assert_allclose(
        t['scores'][i],
        np.float32(parent_score + lq[t['depths'][i] - 1, t['tokens'][i]]),
        rtol=0, atol=1e-5)
  scores = t['scores'][:num_valid]
  assert (scores[1:] <= scores[:-1]).all(), 'not emitted best-first'
  paths = _paths(t)[:num_valid]
  assert len(set(paths)) == num_valid, 'duplicate nodes'
  path_set = set(paths)
  assert all(len(p) == 1 or p[:-1] in path_set for p in paths), 'not closed'
  np.testing.assert_array_equal(t['ancestor_mask'], _naive_mask(t['parents']))
  np.testing.assert_array_equal(
      np.asarray(_mask_from_parents(jnp.asarray(t['parents']))),
      t['ancestor_mask'])


def _check_top_n(t: dict[str, np.ndarray], lq: np.ndarray, top_k=None):
  """The valid nodes are exactly a top-N set of the brute-force ranking."""
  n = len(t['tokens'])
  best, rest = _brute_force(lq, n, top_k)
  num_valid = int(t['valid'].sum())
  assert num_valid == len(best)
  np.testing.assert_allclose(
      np.sort(t['scores'][:num_valid]), np.sort([s for _, s in best]),
      rtol=0, atol=1e-5)
  # Members may differ only through ties at the boundary.
  if not rest or best[-1][1] > rest[0][1] + 1e-5:
    assert set(_paths(t)[:num_valid]) == {p for p, _ in best}


def _check_certificate(t: dict[str, np.ndarray], lq: np.ndarray, top_k: int):
  """Top-N certificate for sizes brute force cannot reach.

  Every prefix outside the tree descends (via 'next sibling' / 'first child'
  steps, which never raise the score) from one whose predecessor is in the
  tree, so it suffices that those boundary prefixes score <= the minimum.
  """
  order = np.argsort(-lq, axis=-1, kind='stable')[:, :top_k]
  rank = {(d, int(tok)): r for d in range(lq.shape[0])
          for r, tok in enumerate(order[d])}
  paths = _paths(t)
  path_set = set(paths)
  worst = t['scores'].min()
  for path in paths:
    d = len(path)
    r = rank[(d - 1, path[-1])]
    boundary = []
    if r + 1 < top_k:
      boundary.append(path[:-1] + (int(order[d - 1, r + 1]),))
    if d < lq.shape[0]:
      boundary.append(path + (int(order[d, 0]),))
    for b in boundary:
      if b not in path_set:
        assert _path_score(lq, b) <= worst + 1e-5


@st.composite
def _small_problem(draw):
  depth_l = draw(st.integers(1, _MAX_L))
  vocab = draw(st.integers(2, _MAX_V))
  num_prefixes = sum(vocab**d for d in range(1, depth_l + 1))
  num_nodes = draw(st.integers(1, min(num_prefixes, 12)))
  # Small integer logits make exact ties common; floats exercise the rest.
  elems = st.one_of(
      st.integers(0, 2).map(float),
      st.floats(-5.0, 5.0, allow_nan=False, width=32),
  )
  ties = draw(st.booleans())
  flat = draw(st.lists(
      st.integers(0, 2).map(float) if ties else elems,
      min_size=depth_l * vocab, max_size=depth_l * vocab))
  lq = _log_softmax(np.array(flat, np.float32).reshape(depth_l, vocab))
  return lq, num_nodes


@settings(max_examples=60, deadline=None)
@given(_small_problem())
def test_matches_brute_force(problem):
  lq, num_nodes = problem
  depth_l, vocab = lq.shape
  padded = np.full((_MAX_L, _MAX_V), _FAKE, np.float32)
  padded[:depth_l, :vocab] = lq
  old = _to_numpy(_old(jnp.asarray(padded), num_nodes=num_nodes))
  for build in _BUILDERS.values():
    t = _to_numpy(build(jnp.asarray(padded), num_nodes=num_nodes))
    assert t['valid'].all()
    assert (t['tokens'] < vocab).all() and (t['depths'] <= depth_l).all()
    _check_structure(t, padded)
    _check_top_n(t, lq)
    _check_same_as_best_first(t, old, lq)


def _check_same_as_best_first(t, old, lq):
  """The level-synchronous builder against the previous best-first one: the same scores in the
  same order, the same node set unless the N-th score is tied outside the tree, and the same node
  at every position whose score is distinct from its neighbours'."""
  np.testing.assert_array_equal(t['scores'], old['scores'])
  np.testing.assert_array_equal(t['valid'], old['valid'])
  n = len(t['tokens'])
  _, rest = _brute_force(lq, n)
  paths, old_paths = _paths(t), _paths(old)
  if not rest or t['scores'][-1] > rest[0][1]:
    assert set(paths) == set(old_paths)
  s = t['scores']
  for i in range(n):
    if (i == 0 or s[i] != s[i - 1]) and (i == n - 1 or s[i] != s[i + 1]):
      assert paths[i] == old_paths[i], i


@pytest.mark.parametrize('builder', list(_BUILDERS))
@pytest.mark.parametrize('depth_l,vocab', [(1, 2), (1, 3), (2, 2), (2, 3),
                                           (3, 2)])
def test_exact_shapes_and_padding(depth_l, vocab, builder):
  """Real (unpadded) shapes, N below, at and above the number of prefixes."""
  rng = np.random.default_rng(depth_l * 10 + vocab)
  lq = _log_softmax(rng.normal(size=(depth_l, vocab)) * 2)
  num_prefixes = sum(vocab**d for d in range(1, depth_l + 1))
  for num_nodes in sorted({1, max(1, num_prefixes - 1), num_prefixes,
                           num_prefixes + 3}):
    t = _to_numpy(_BUILDERS[builder](jnp.asarray(lq), num_nodes=num_nodes))
    assert int(t['valid'].sum()) == min(num_nodes, num_prefixes)
    _check_structure(t, lq)
    _check_top_n(t, lq)
    # Padding rows see only the root and themselves.
    for i in np.flatnonzero(~t['valid']):
      expected = np.zeros(num_nodes + 1, bool)
      expected[[0, i + 1]] = True
      np.testing.assert_array_equal(t['ancestor_mask'][i + 1], expected)


def test_restricted_top_k_matches_brute_force():
  rng = np.random.default_rng(0)
  lq = _log_softmax(rng.normal(size=(3, 5)) * 2)
  for top_k, num_nodes in [(2, 5), (2, 14), (2, 20), (3, 12)]:
    for build in _BUILDERS.values():
      t = _to_numpy(build(jnp.asarray(lq), num_nodes=num_nodes, top_k=top_k))
      _check_structure(t, lq)
      _check_top_n(t, lq, top_k=top_k)


@pytest.mark.parametrize('num_nodes,depth_l,vocab', [(15, 15, 1000), (31, 15, 200), (63, 15, 1000),
                                                     (300, 15, 50)])
def test_large(num_nodes, depth_l, vocab):
  rng = np.random.default_rng(num_nodes)
  lq = _log_softmax(rng.normal(size=(depth_l, vocab)) * 3)
  t = _to_numpy(_build(jnp.asarray(lq), num_nodes=num_nodes))
  assert t['valid'].all()
  _check_structure(t, lq)
  _check_certificate(t, lq, top_k=min(num_nodes, vocab))
  np.testing.assert_allclose(
      t['scores'], _heap_reference(lq, num_nodes, min(num_nodes, vocab)),
      rtol=0, atol=1e-5)
  old = _to_numpy(_old(jnp.asarray(lq), num_nodes=num_nodes))
  for key in ('tokens', 'parents', 'depths', 'scores', 'valid', 'ancestor_mask'):
    np.testing.assert_array_equal(t[key], old[key])  # continuous scores: no ties
  # The best node is the argmax chain's first token.
  assert t['tokens'][0] == lq[0].argmax() and t['parents'][0] == -1
  assert t['depths'].max() <= depth_l


def test_chain_tree():
  rng = np.random.default_rng(1)
  lq = _log_softmax(rng.normal(size=(15, 100)))
  t = _to_numpy(_chain(jnp.asarray(lq)))
  np.testing.assert_array_equal(t['tokens'], lq.argmax(-1))
  np.testing.assert_array_equal(t['parents'], np.arange(15) - 1)
  np.testing.assert_array_equal(t['depths'], np.arange(1, 16))
  assert t['valid'].all()
  np.testing.assert_allclose(t['scores'], np.cumsum(lq.max(-1)), atol=1e-5)
  _check_structure(t, lq)
  # K = 1 best-first is the same chain.
  k1 = _to_numpy(_build(jnp.asarray(lq), num_nodes=15, top_k=1))
  for key in ('tokens', 'parents', 'depths', 'valid', 'ancestor_mask'):
    np.testing.assert_array_equal(k1[key], t[key])
  np.testing.assert_allclose(k1['scores'], t['scores'], atol=1e-5)


def test_k1_longer_than_chain_pads():
  lq = _log_softmax(np.random.default_rng(2).normal(size=(4, 7)))
  t = _to_numpy(_build(jnp.asarray(lq), num_nodes=6, top_k=1))
  np.testing.assert_array_equal(t['valid'], [1, 1, 1, 1, 0, 0])
  np.testing.assert_array_equal(t['tokens'][:4], lq.argmax(-1))
  np.testing.assert_array_equal(t['parents'], [-1, 0, 1, 2, -1, -1])
  _check_structure(t, lq)


def test_single_node():
  lq = _log_softmax(np.random.default_rng(3).normal(size=(15, 32)))
  t = _to_numpy(_build(jnp.asarray(lq), num_nodes=1))
  assert t['tokens'].tolist() == [lq[0].argmax()]
  assert t['parents'].tolist() == [-1] and t['depths'].tolist() == [1]
  np.testing.assert_allclose(t['scores'], [lq[0].max()])
  np.testing.assert_array_equal(t['ancestor_mask'], [[1, 0], [1, 1]])


def test_vmap_matches_per_row():
  rng = np.random.default_rng(4)
  lq = jnp.asarray(_log_softmax(rng.normal(size=(3, 15, 200)) * 2))
  batched = _build_batched(lq, num_nodes=31)
  for b in range(3):
    single = _build(lq[b], num_nodes=31)
    for x, y in zip(jax.tree.leaves(batched), jax.tree.leaves(single)):
      np.testing.assert_array_equal(np.asarray(x[b]), np.asarray(y))
  # The rows really differ (otherwise the test proves little).
  assert not np.array_equal(batched.tokens[0], batched.tokens[1])


def test_masked_vocab_gives_finite_nodes_first():
  """-inf log-probs (masked tokens) must not produce NaNs or jump the queue."""
  lq = _log_softmax(np.random.default_rng(5).normal(size=(2, 5)))
  lq[:, 2:] = -np.inf
  t = _to_numpy(_build(jnp.asarray(lq), num_nodes=10))
  assert not np.isnan(t['scores']).any()
  assert np.isfinite(t['scores'][:6]).all()  # 2 + 2*2 finite prefixes.
  assert (t['scores'][6:] == -np.inf).all()
  _check_structure(t, lq)
  _check_top_n(t, lq)


def test_tree_positions():
  depths = jnp.array([1, 2, 1, 3], jnp.int32)
  np.testing.assert_array_equal(
      tree_lib.tree_positions(depths, 10), [10, 11, 12, 11, 13])
  batched = tree_lib.tree_positions(jnp.stack([depths, depths]),
                                    jnp.array([0, 5]))
  np.testing.assert_array_equal(batched[1], [5, 6, 7, 6, 8])


def test_bad_arguments():
  lq = jnp.zeros((3, 4))
  with pytest.raises(ValueError):
    tree_lib.build_tree(lq, num_nodes=0)
  with pytest.raises(ValueError):
    tree_lib.build_tree(lq, num_nodes=4, top_k=5)
  with pytest.raises(ValueError):
    tree_lib.build_tree(lq[0], num_nodes=4)


def test_every_prefix_is_the_top_n_tree():
  """The first n nodes of the N-node tree are the n-node tree (what the per-round budget uses)."""
  lq = jnp.asarray(_log_softmax(np.random.default_rng(6).normal(size=(15, 64)) * 2))
  big = _to_numpy(_build(lq, num_nodes=63))
  for n in (1, 15, 31):
    small = _to_numpy(_build(lq, num_nodes=n))
    for key in ('tokens', 'parents', 'depths', 'scores', 'valid'):
      np.testing.assert_array_equal(small[key], big[key][:n])
    np.testing.assert_array_equal(small['ancestor_mask'], big['ancestor_mask'][:n + 1, :n + 1])


def test_candidate_table():
  """The static candidates of the enumerated builder: every prefix that can be in a top-N set."""
  ranks, depth, anc = tree_enumerated.candidate_table(15, 15, 15)
  assert len(depth) == 321 and depth.max() == 15                   # the chain reaches depth 15
  assert tree_enumerated.candidate_table(31, 15, 31) is None        # 3223 > MAX_CANDIDATES: the scan
  order = [tuple(r[:d]) for r, d in zip(ranks.tolist(), depth.tolist())]
  assert order == sorted(order, key=lambda t: (len(t), t))          # top_k's tie order
  for i, (r, d) in enumerate(zip(ranks, depth)):
    assert anc[i, d - 1] == i and (anc[i, d:] == -1).all()
    assert all(order[anc[i, j]] == tuple(r[: j + 1]) for j in range(d))
  # brute force on a small problem: the exact top-N prefixes are all candidates
  lq = _log_softmax(np.random.default_rng(3).normal(size=(4, 5)) * 2)
  for n in (3, 8, 12):
    best, _ = _brute_force(lq, n)
    ranks_of = {(d, int(tok)): r for d in range(4) for r, tok in enumerate(np.argsort(-lq[d], kind='stable'))}
    table = tree_enumerated.candidate_table(n, 4, min(n, 5))
    cands = {tuple(r[:d]) for r, d in zip(table[0].tolist(), table[1].tolist())}
    assert {tuple(ranks_of[(j, tok)] for j, tok in enumerate(p)) for p, _ in best} <= cands
