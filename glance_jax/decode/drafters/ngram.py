"""`ngram`: prompt lookup. No draft pass: the proposal is what followed the most recent earlier
occurrence of the longest suffix n-gram (n = max_ngram..1) of the committed tokens and the root,
a chain of up to `depth` tokens, cut to the tokens already known. Its node scores are the length
n of that match (what the cost gate's acceptance estimate is indexed by), -inf where no node."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from glance_jax.decode.drafter import Drafter, Proposal
from glance_jax.decode.verify import DraftTree, chain_from_tokens

DEFAULT_DEPTH = 15      # the block head's draft depth (block 16): the chain's longest proposal
MAX_NGRAM = 3


@dataclasses.dataclass(frozen=True)
class NGram(Drafter):
  name = "ngram"
  score_kind = "match"
  stateless = True
  depth: int = DEFAULT_DEPTH
  max_ngram: int = MAX_NGRAM

  @property
  def num_nodes(self) -> int:
    return self.depth

  @property
  def max_depth(self) -> int:
    return self.depth

  def propose(self, params, target, state, st):
    tree, n = ngram_lookup(st.history, st.cache.length + 1, self.depth, self.max_ngram)
    scores = jnp.where(tree.valid, n[:, None].astype(jnp.float32), -jnp.inf)
    return Proposal(tree, scores), state


def ngram_lookup(history: jax.Array, length: jax.Array, depth: int, max_ngram: int = MAX_NGRAM
                 ) -> tuple[DraftTree, jax.Array]:
  """history int32 [B, H] holds tokens 0..length-1 (the last is the root) -> (the chain proposal,
  the length n of the matched suffix n-gram int32 [B], 0 = no match)."""
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


def match_lengths(proposal: Proposal) -> tuple[jax.Array, jax.Array]:
  """An ngram proposal -> (match length n int32 [B], 0 = none; proposal length k int32 [B])."""
  finite = jnp.isfinite(proposal.scores)
  n = jnp.max(jnp.where(finite, proposal.scores, 0.0), axis=1, initial=0.0).astype(jnp.int32)
  return n, jnp.sum(finite, axis=1).astype(jnp.int32)


def build(target, head=None, budget: int = DEFAULT_DEPTH):
  """A chain of up to min(budget, 15) tokens (no weights)."""
  return NGram(depth=min(int(budget), DEFAULT_DEPTH)), ()
