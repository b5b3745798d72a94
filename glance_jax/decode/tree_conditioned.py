"""The exact top-N draft tree when every node has its own child distribution (a parent-conditioned
correction of the head's marginals: head/parent_correction.py).

Under the product of marginals all nodes of a depth share one child list, the head's top-K there
(decode/tree.py). Here the children of a node depend on the node's token and on whether its path is
the head's top-1 path, so each frontier node expands its OWN top-k children under its corrected
distribution. Level-synchronous, with static shapes, like tree.build_tree_beam:

  depth d: the beam holds the N best prefixes of length d - 1 (the root alone at d = 1); each of its
  N slots asks `child_log_probs` for its children's log-probabilities [N, V], keeps its own top k,
  and the N best of the N x k extensions are the next beam.

Exact for the global top N under the path score (the sum of the corrected log-probabilities along
the path, each <= 0): a node in the global top N has its parent there too, and that parent is among
the N best prefixes of its own length, so it is in that depth's beam; and a node of child rank r
under its parent is outranked by its r elder siblings and its d - 1 ancestors, so r < N, which
k = min(N, V) covers. The final selection is tree.select_tree's, so the result has the same order
and the same prefix property (the first n nodes are the top-n tree for every n).

With `path_embed`, each beam slot also carries the summed embeddings of its node's strict ancestors
(the bag a path-reading correction asks for: [N, P], zero at the root) and passes it to
child_log_probs; a child's bag is its parent's plus the parent's own embedding. The path score is
still a sum of per-edge log-probabilities, so the argument above holds unchanged.

Cost a round: L calls of child_log_probs on N parents (the correction's N x V bias and a top-k over
each of its N rows), then N x k candidates a depth. Letters: N nodes, L depth, V vocab, k ranks.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

from glance_jax.decode.tree import Tree, rank_key, select_tree


def build_tree_conditioned(child_log_probs: Callable, spine: jax.Array, root: jax.Array, num_nodes: int,
                           top_k: int | None = None, path_embed: Callable | None = None) -> Tree:
  """The exact top-`num_nodes` tree under per-node child distributions.

  Args:
    child_log_probs: (d, parent_tokens int32 [N], parent_on bool [N]) -> float32 [N, V], the
      log-probabilities (rows <= 0) of each parent's children at depth d + 1 (d 0-based, traced).
      Rows of beam slots that hold no prefix are computed and ignored.
    spine: int32 [L], the head's top-1 token a depth (a node is "on" when its parent is and its
      token is spine[depth - 1]; the root is on).
    root: int32 [], the root's token (the parent of depth 1).
    num_nodes: N, static.
    top_k: children kept per parent, static; default min(N, V), which is exact.
    path_embed: optional (d, parent_tokens int32 [N]) -> float [N, P], the embedding of each
      parent's token at depth d (as child_log_probs reads it); then child_log_probs takes a fourth
      argument, the bag [N, P] of each parent's strict ancestors' embeddings.

  Returns:
    A `Tree` of N nodes, best first.
  """
  depth_l = spine.shape[0]
  n = int(num_nodes)
  if n < 1:
    raise ValueError(f"num_nodes must be >= 1, got {num_nodes}")
  slot0 = jnp.arange(n) == 0
  root_tok = jnp.broadcast_to(jnp.asarray(root, jnp.int32), (n,))
  bag0 = None
  if path_embed is not None:
    shape = jax.eval_shape(path_embed, jnp.int32(0), root_tok)             # [N, P]
    bag0 = jnp.zeros(shape.shape, shape.dtype)
  init = (jnp.where(slot0, 0.0, -jnp.inf).astype(jnp.float32), slot0, root_tok, slot0, bag0)

  def extend(carry, d):
    score, real, tok, on, bag = carry                                       # [N] each, bag [N, P]
    if path_embed is None:
      lp = child_log_probs(d, tok, on).astype(jnp.float32)                  # [N, V]
    else:
      lp = child_log_probs(d, tok, on, bag).astype(jnp.float32)
    k = min(n, lp.shape[-1]) if top_k is None else int(top_k)
    top_lp, top_id = jax.lax.top_k(lp, k)                                   # [N, k], parent-major below
    cand = (score[:, None] + top_lp).reshape(-1)                            # [N*k]
    cand_real = jnp.repeat(real, k)
    _, idx = jax.lax.top_k(rank_key(cand, cand_real), n)                    # [N]
    slot = (idx // k).astype(jnp.int32)
    new_tok = top_id.reshape(-1)[idx].astype(jnp.int32)
    new_bag = None if bag is None else (bag + path_embed(d, tok).astype(bag.dtype))[slot]
    beam = (cand[idx], cand_real[idx], new_tok, on[slot] & (new_tok == spine[d]), new_bag)
    return beam, (beam[0], beam[1], new_tok, slot)

  _, beams = jax.lax.scan(extend, init, jnp.arange(depth_l, dtype=jnp.int32))   # each [L, N]
  return select_tree(*beams)
