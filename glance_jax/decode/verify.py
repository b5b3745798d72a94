"""Verification of a draft tree in one target pass, the walk, and the commit.

Letters: B batch rows, N tree nodes, R = N + 1 verify rows (row 0 = the root, row i = node i-1),
L max depth, C = L + 1 commit rows (root + up to L accepted nodes), V vocab.
"""

from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp

from glance_jax.qwen3_vl.cache import KVCache, write_rows


@flax.struct.dataclass
class DraftTree:
  """What every drafter hands the verifier (node arrays, root excluded)."""
  tokens: jax.Array         # int32 [B, N]
  parents: jax.Array        # int32 [B, N], -1 = root
  depths: jax.Array         # int32 [B, N], 1..L (0 for padding)
  valid: jax.Array          # bool  [B, N]
  ancestor_mask: jax.Array  # bool  [B, R, R], row/col 0 = root


def empty_tree(batch: int) -> DraftTree:
  """No draft (ar, or a round that verifies the root alone)."""
  z = jnp.zeros((batch, 0), jnp.int32)
  return DraftTree(z, z, z, jnp.zeros((batch, 0), bool), jnp.ones((batch, 1, 1), bool))


def chain_from_tokens(tokens: jax.Array, valid: jax.Array) -> DraftTree:
  """tokens / valid [B, n] -> a width-1 tree (valid must be a prefix): node i's parent is node i-1."""
  b, n = tokens.shape
  parents = jnp.broadcast_to(jnp.arange(n, dtype=jnp.int32) - 1, (b, n))
  depths = jnp.broadcast_to(jnp.arange(1, n + 1, dtype=jnp.int32), (b, n))
  mask = jnp.broadcast_to(jnp.tril(jnp.ones((n + 1, n + 1), bool)), (b, n + 1, n + 1))
  return DraftTree(tokens.astype(jnp.int32), parents, depths, valid, mask)


def first_nodes(tree: DraftTree, w: int) -> DraftTree:
  """The first w nodes (static w) as a tree of their own: a chain's prefix, or the top-w tree of a
  score-ordered build_tree (every prefix of its nodes is prefix-closed)."""
  if w == tree.tokens.shape[1]:
    return tree
  return DraftTree(tree.tokens[:, :w], tree.parents[:, :w], tree.depths[:, :w], tree.valid[:, :w],
                   tree.ancestor_mask[:, : w + 1, : w + 1])


@flax.struct.dataclass
class WalkResult:
  accepted: jax.Array       # int32 [B]: A, accepted draft tokens
  commit_rows: jax.Array    # int32 [B, C]: verify rows committed (root first); entries > A unused
  new_tokens: jax.Array     # int32 [B, C]: the A accepted tokens then the bonus; entries > A unused
  bonus: jax.Array          # int32 [B]: the target's own token after the accepted path (next root)


def walk(tree: DraftTree, choice: jax.Array, max_depth: int) -> WalkResult:
  """choice int32 [B, R]: the target's token at each verify row (argmax or its own sample).

  Node i is accepted iff its parent is accepted (the root always is) and tokens[i] equals the
  target's choice at the parent's row. Siblings hold distinct tokens, so the accepted nodes form
  one path; its depth is A and the bonus is the choice at its last row.
  """
  b, n = tree.tokens.shape
  if n == 0 or max_depth == 0:
    # No draft (ar): the root is the only row and the target's token there is the bonus. Built
    # without zero-size arrays: the general path's zero-size gather padded and selected into
    # new_tokens aborts the TPU compiler (libtpu 0.0.42.1, "SmallVector unable to grow").
    bonus = choice[:, 0].astype(jnp.int32)
    return WalkResult(jnp.zeros((b,), jnp.int32), jnp.zeros((b, 1), jnp.int32), bonus[:, None], bonus)
  parent_row = tree.parents + 1                                           # [B, N], 0 = root row
  match = tree.valid & (tree.tokens == jnp.take_along_axis(choice, parent_row, axis=1))
  # accepted = every node on the path from the root matches: one [B, N, N] reduce over the ancestor
  # mask ([i, j]: node j is node i or one of its ancestors) instead of max_depth sequential sweeps
  # down the parent pointers (a loop of small ops, ~45 thunks a round on XLA:CPU)
  on_path = tree.ancestor_mask[:, 1:, 1:]                                 # [B, N, N]
  acc = jnp.all(~on_path | match[:, None, :], axis=2) & match             # [B, N]
  depth_acc = jnp.where(acc, tree.depths, 0)
  a = jnp.max(depth_acc, axis=1, initial=0).astype(jnp.int32)            # [B]
  d = jnp.arange(1, max_depth + 1)                                        # [L]
  at_depth = acc[:, None, :] & (tree.depths[:, None, :] == d[None, :, None])   # [B, L, N]
  # the accepted node at each depth (at most one: siblings hold distinct tokens), row 1 where none
  # (those entries lie past A and are unused); a sum instead of XLA:CPU's slower variadic argmax
  path_rows = jnp.sum(jnp.where(at_depth, jnp.arange(n, dtype=jnp.int32), 0), axis=2, dtype=jnp.int32) + 1
  commit_rows = jnp.concatenate([jnp.zeros((b, 1), jnp.int32), path_rows], axis=1)   # [B, C]
  last_row = jnp.take_along_axis(commit_rows, a[:, None], axis=1)[:, 0]
  bonus = jnp.take_along_axis(choice, last_row[:, None], axis=1)[:, 0]
  verify_tokens = jnp.concatenate([jnp.zeros((b, 1), jnp.int32), tree.tokens], axis=1)
  path_tokens = jnp.take_along_axis(verify_tokens, commit_rows[:, 1:], axis=1)      # [B, L]
  j = jnp.arange(max_depth + 1)[None]
  new_tokens = jnp.where(j == a[:, None], bonus[:, None],
                         jnp.pad(path_tokens, ((0, 0), (0, 1))))
  return WalkResult(a, commit_rows, new_tokens.astype(jnp.int32), bonus)


def commit_kv(cache: KVCache, commit_rows: jax.Array, advance: jax.Array) -> KVCache:
  """Moves the committed verify rows' K/V to contiguous slots after cache.length.

  The verify pass wrote row r at slot length + r; committed row j (root first) moves to
  slot length + j with a static-size gather of C rows. length advances by `advance` [B]
  (A + 1 for live rows, 0 for finished ones).
  """
  src = cache.length[:, None] + commit_rows                               # [B, C]

  def move(buf):
    rows = jnp.take_along_axis(buf, src[:, :, None, None], axis=1)        # [B, C, K, hd]
    return write_rows(buf, rows, cache.length)

  return KVCache(k=tuple(move(k) for k in cache.k), v=tuple(move(v) for v in cache.v),
                 length=cache.length + advance)
