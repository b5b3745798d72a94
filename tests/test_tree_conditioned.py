"""tree_conditioned.build_tree_conditioned: the exact top-N prefixes under per-node child
distributions (brute force over every prefix), and the product of marginals when the children do
not depend on the parent."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from glance_jax.decode import tree as tree_lib
from glance_jax.decode.tree_conditioned import build_tree_conditioned


def _paths(t):
  tok, par, ok = (np.asarray(x) for x in (t.tokens, t.parents, t.valid))
  out = []
  for i in range(len(tok)):
    if not ok[i]:
      continue
    path, j = [], i
    while j >= 0:
      path.append(int(tok[j]))
      j = int(par[j])
    out.append(tuple(reversed(path)))
  return out


def _table(seed, depth, vocab):
  """log p[d, parent token, on, child] (rows normalised) and the head's spine."""
  rng = np.random.default_rng(seed)
  logits = rng.normal(size=(depth, vocab, 2, vocab)) * 2.0
  lp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  return lp.astype(np.float32), rng.integers(vocab, size=depth).astype(np.int32)


def _brute(lp, spine, root, n):
  depth, vocab = lp.shape[0], lp.shape[-1]
  scored = []
  for d in range(1, depth + 1):
    for path in itertools.product(range(vocab), repeat=d):
      s, parent, on = 0.0, root, True
      for j, c in enumerate(path):
        s += float(lp[j, parent, 0 if on else 1, c])
        on = on and c == spine[j]
        parent = c
      scored.append((s, path))
  scored.sort(key=lambda x: -x[0])
  return scored[:n]


@pytest.mark.parametrize("seed,n,k", [(0, 10, None), (1, 25, None), (2, 40, None), (3, 12, 3)])
def test_exact_top_n_under_per_parent_children(seed, n, k):
  depth, vocab, root = 3, 4, 2
  lp, spine = _table(seed, depth, vocab)
  table = jnp.asarray(lp)
  fn = lambda d, toks, on: table[d, toks, jnp.where(on, 0, 1)]   # noqa: E731 [N, V]
  t = jax.jit(lambda: build_tree_conditioned(fn, jnp.asarray(spine), jnp.int32(root), n, top_k=k))()
  got = _paths(t)
  scores = np.asarray(t.scores)[np.asarray(t.valid)]
  assert np.all(np.diff(scores) <= 1e-6)                                 # best first
  assert all(p[:-1] in got[:i] or len(p) == 1 for i, p in enumerate(got))  # parents first
  if k is None:   # exact: the brute-force top n, scores included
    want = _brute(lp, spine, root, n)
    assert set(got) == {p for _, p in want}
    np.testing.assert_allclose(sorted(scores, reverse=True), [s for s, _ in want], rtol=1e-5, atol=1e-5)
  else:           # k children a parent: the brute-force top n among such prefixes
    ranks = np.argsort(-lp, axis=-1, kind="stable")
    allowed = lambda p: all(  # noqa: E731
        c in ranks[j, par, 0 if on else 1, :k] for j, (c, par, on) in enumerate(_walk(p, root, spine)))
    want = [x for x in _brute(lp, spine, root, 10_000) if allowed(x[1])][:n]
    assert set(got) == {p for _, p in want}


def _walk(path, root, spine):
  parent, on = root, True
  for j, c in enumerate(path):
    yield c, parent, on
    on = on and c == spine[j]
    parent = c


def test_parent_free_children_give_the_product_of_marginals_tree():
  rng = np.random.default_rng(5)
  log_q = jax.nn.log_softmax(jnp.asarray(rng.normal(size=(6, 20)) * 3, jnp.float32), -1)
  fn = lambda d, toks, on: jnp.broadcast_to(log_q[d], (toks.shape[0], log_q.shape[1]))   # noqa: E731
  spine = jnp.argmax(log_q, -1).astype(jnp.int32)
  t = build_tree_conditioned(fn, spine, jnp.int32(0), 31)
  ref = tree_lib.build_tree_beam(log_q, 31)
  assert set(_paths(t)) == set(_paths(ref))
  np.testing.assert_allclose(np.asarray(t.scores), np.asarray(ref.scores), rtol=1e-6)
  np.testing.assert_array_equal(np.asarray(t.ancestor_mask), np.asarray(ref.ancestor_mask))


@pytest.mark.parametrize("seed,n", [(6, 12), (7, 30)])
def test_exact_top_n_when_children_read_the_path(seed, n):
  """With path_embed each parent also sees the bag of its strict ancestors (one-hot here, so the bag
  counts each token on the path above the parent, root included): brute force over every prefix."""
  depth, vocab, root = 3, 4, 1
  lp, spine = _table(seed, depth, vocab)
  mix = np.random.default_rng(seed + 100).normal(size=(vocab, vocab)).astype(np.float32) * 2.0

  def child_lp(d, parent, on, bag):                                       # numpy, one parent
    z = lp[d, parent, 0 if on else 1] + bag @ mix
    return z - np.log(np.exp(z - z.max()).sum()) - z.max()

  scored = []
  for d in range(1, depth + 1):
    for path in itertools.product(range(vocab), repeat=d):
      s, parent, on, bag = 0.0, root, True, np.zeros(vocab, np.float32)
      for j, c in enumerate(path):
        s += float(child_lp(j, parent, on, bag)[c])
        bag = bag + np.eye(vocab, dtype=np.float32)[parent]
        on = on and c == spine[j]
        parent = c
      scored.append((s, path))
  scored.sort(key=lambda x: -x[0])
  want = scored[:n]

  table, w = jnp.asarray(lp), jnp.asarray(mix)
  emb = lambda d, toks: jax.nn.one_hot(toks, vocab, dtype=jnp.float32)   # noqa: E731 [N, V]
  fn = lambda d, toks, on, bag: jax.nn.log_softmax(table[d, toks, jnp.where(on, 0, 1)] + bag @ w, -1)  # noqa: E731
  t = jax.jit(lambda: build_tree_conditioned(fn, jnp.asarray(spine), jnp.int32(root), n, path_embed=emb))()
  got = _paths(t)
  assert set(got) == {p for _, p in want}
  scores = np.asarray(t.scores)[np.asarray(t.valid)]
  np.testing.assert_allclose(sorted(scores, reverse=True), [s for s, _ in want], rtol=1e-5, atol=1e-5)
