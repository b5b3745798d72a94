"""The verify walk against a host transcription of its rule, on trees from every drafter.

Rule (verify.walk): start at the root row; while some child node of the current row holds the
target's choice at that row, step to it. A = the depth reached, the bonus = the choice at the last
row, commit rows = the rows on the path (root first), new tokens = the path's tokens then the bonus.
Choices are drawn to agree with the draft most of the time so that walks go deep and stop anywhere.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from glance_jax.decode.drafters.block import head_tree
from glance_jax.decode.verify import chain_from_tokens, first_nodes, walk

_walk = jax.jit(walk, static_argnames=("max_depth",))


def _reference(tokens, parents, valid, choice):
  """One row: (A, commit rows, new tokens) by following matching children from the root."""
  row, path = 0, [0]
  while True:
    kids = [i for i in range(len(tokens)) if valid[i] and parents[i] + 1 == row and tokens[i] == choice[row]]
    assert len(kids) <= 1, "siblings must hold distinct tokens"
    if not kids:
      break
    row = kids[0] + 1
    path.append(row)
  a = len(path) - 1
  new = [int(tokens[r - 1]) for r in path[1:]] + [int(choice[row])]
  return a, path, new


def _choices(rng, tree, vocab, agree):
  """[B, R]: at each row, the token of one of its children with probability `agree`, else random."""
  tokens, parents, valid = (np.asarray(x) for x in (tree.tokens, tree.parents, tree.valid))
  b, n = tokens.shape
  choice = rng.integers(0, vocab, (b, n + 1))
  for i in range(b):
    for row in range(n + 1):
      kids = [j for j in range(n) if valid[i, j] and parents[i, j] + 1 == row]
      if kids and rng.random() < agree:
        choice[i, row] = tokens[i, rng.choice(kids)]
  return jnp.asarray(choice, jnp.int32)


def _check(tree, choice, depth):
  res = _walk(tree, choice, max_depth=depth)
  for i in range(tree.tokens.shape[0]):
    a, path, new = _reference(*(np.asarray(x)[i] for x in (tree.tokens, tree.parents, tree.valid, choice)))
    assert int(res.accepted[i]) == a
    assert np.asarray(res.commit_rows[i, : a + 1]).tolist() == path
    assert np.asarray(res.new_tokens[i, : a + 1]).tolist() == new
    assert int(res.bonus[i]) == new[-1]
  return np.asarray(res.accepted)


@pytest.mark.parametrize("method,budget", [("glance", 15), ("glance", 31), ("chain", 15)])
def test_walk_matches_reference_on_head_trees(method, budget):
  rng = np.random.default_rng(budget)
  b, depth, vocab = 6, 15, 5
  log_q = jax.nn.log_softmax(jnp.asarray(rng.normal(size=(b, depth, vocab)) * 3, jnp.float32), axis=-1)
  tree = head_tree(log_q, budget, chain=method == "chain").tree
  accepted = []
  for agree in (0.5, 0.9, 1.0):
    accepted.append(_check(tree, _choices(rng, tree, vocab, agree), depth))
    for w in (1, 3, 7):  # a width-w prefix of the score-ordered tree is a tree of its own
      sub = first_nodes(tree, w)
      _check(sub, _choices(rng, sub, vocab, agree), depth)
  accepted = np.concatenate(accepted)
  assert accepted.min() == 0 and accepted.max() >= 5     # shallow and deep walks both exercised


def test_walk_stops_at_an_invalid_tail():
  # ngram-style chains: proposals shorter than the chain leave invalid nodes that must never accept,
  # even where the choice equals their (padding) token
  rng = np.random.default_rng(0)
  b, n, vocab = 8, 7, 3
  tokens = jnp.asarray(rng.integers(0, vocab, (b, n)), jnp.int32)
  lengths = rng.integers(0, n + 1, b)
  valid = jnp.asarray(np.arange(n)[None] < lengths[:, None])
  tree = chain_from_tokens(tokens, valid)
  choice = jnp.concatenate([tokens, jnp.zeros((b, 1), jnp.int32)], axis=1)   # agrees everywhere
  accepted = _check(tree, choice, n)
  assert accepted.tolist() == lengths.tolist()
