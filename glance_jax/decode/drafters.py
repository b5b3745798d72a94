"""Drafters: each turns the decode state into a DraftTree with a static number of nodes N.

  ar      N = 0: the verify pass is a plain one-token decode step.
  ngram   prompt lookup over prompt + output so far; a chain of up to `depth` tokens, no draft pass.
  chain   the block head, argmax at each offset: a width-1 tree of depth `depth`.
  glance  the block head, the N best prefixes by plug-in score (decode/tree.py).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from glance_jax.decode import tree as tree_lib
from glance_jax.decode.verify import DraftTree


def chain_mask(n: int) -> jax.Array:
  """[n+1, n+1] causal mask: a chain's ancestors are its predecessors."""
  return jnp.tril(jnp.ones((n + 1, n + 1), bool))


def empty_tree(batch: int) -> DraftTree:
  z = jnp.zeros((batch, 0), jnp.int32)
  return DraftTree(z, z, z, jnp.zeros((batch, 0), bool), jnp.ones((batch, 1, 1), bool))


def chain_from_tokens(tokens: jax.Array, valid: jax.Array) -> DraftTree:
  """tokens/valid [B, n] -> a width-1 tree (valid must be a prefix)."""
  b, n = tokens.shape
  parents = jnp.broadcast_to(jnp.arange(n, dtype=jnp.int32) - 1, (b, n))
  depths = jnp.broadcast_to(jnp.arange(1, n + 1, dtype=jnp.int32), (b, n))
  mask = jnp.broadcast_to(chain_mask(n), (b, n + 1, n + 1))
  return DraftTree(tokens.astype(jnp.int32), parents, depths, valid, mask)


def ngram_tree(history: jax.Array, length: jax.Array, depth: int, max_ngram: int = 3) -> DraftTree:
  """Prompt lookup. history int32 [B, H] holds tokens 0..length-1 (the last is the root).

  Finds the most recent earlier occurrence of the longest suffix n-gram (n = max_ngram..1) and
  proposes the tokens that followed it, truncated to those already known (< length).
  """
  return ngram_lookup(history, length, depth, max_ngram)[0]


def ngram_lookup(history: jax.Array, length: jax.Array, depth: int, max_ngram: int = 3
                 ) -> tuple[DraftTree, jax.Array]:
  """ngram_tree plus the length n of the matched suffix n-gram, int32 [B] (0 = no match)."""
  b, h = history.shape
  pos = jnp.arange(h)
  best_j = jnp.full((b,), -1, jnp.int32)
  best_n = jnp.zeros((b,), jnp.int32)
  for n in range(1, max_ngram + 1):  # longer n-grams override shorter ones when they match
    ok = (pos[None] >= n - 1) & (pos[None] < (length - 1)[:, None])        # candidate end j < last
    for k in range(n):
      tail = jnp.take_along_axis(history, jnp.clip(length - 1 - k, 0, h - 1)[:, None], axis=1)  # [B,1]
      shifted = jnp.roll(history, k, axis=1)                               # shifted[j] = history[j-k]
      ok = ok & (shifted == tail) & (pos[None] - k >= 0)
    ok = ok & (length - 1 >= n - 1)[:, None]
    j = jnp.max(jnp.where(ok, pos[None], -1), axis=1).astype(jnp.int32)
    best_j = jnp.where(j >= 0, j, best_j)
    best_n = jnp.where(j >= 0, n, best_n)
  src = best_j[:, None] + 1 + jnp.arange(depth)[None]                     # [B, depth]
  valid = (best_j[:, None] >= 0) & (src < length[:, None])
  tokens = jnp.take_along_axis(history, jnp.clip(src, 0, h - 1), axis=1)
  return chain_from_tokens(tokens, valid), jnp.where(valid[:, 0], best_n, 0)


def first_nodes(tree: DraftTree, w: int) -> DraftTree:
  """The first w nodes (static w) as a tree of their own: a chain's prefix, or the top-w tree of a
  score-ordered build_tree (every prefix of its nodes is prefix-closed)."""
  if w == tree.tokens.shape[1]:
    return tree
  return DraftTree(tree.tokens[:, :w], tree.parents[:, :w], tree.depths[:, :w], tree.valid[:, :w],
                   tree.ancestor_mask[:, : w + 1, : w + 1])


def head_tree(log_q: jax.Array, method: str, budget: int) -> DraftTree:
  """log_q [B, L, V] head log-marginals -> the chain (depth min(budget, L)) or the top-N tree."""
  return scored_head_tree(log_q, method, budget)[0]


def scored_head_tree(log_q: jax.Array, method: str, budget: int) -> tuple[DraftTree, jax.Array]:
  """head_tree plus the nodes' scores float32 [B, N] (best first for glance; -inf = padding)."""
  if method == "chain":
    t = jax.vmap(tree_lib.chain_tree)(log_q[:, : min(budget, log_q.shape[1])])
  else:
    t = jax.vmap(lambda lq: tree_lib.build_tree(lq, num_nodes=budget))(log_q)
  return DraftTree(t.tokens, t.parents, t.depths, t.valid, t.ancestor_mask), t.scores
