"""ngram's cost gate: a round verifies the n-gram proposal only when it is expected to pay.

Per round, the width w (NGRAM_WIDTHS plus the depth) maximising (1 + E[A](w)) / t_ngram(w) over the
live rows: a row's proposal (length k, from a suffix match of length n) is expected to accept
sum_{i <= min(w, k)} q^i tokens, q = the row's running per-token acceptance of its past proposals
from matches of length n (decayed counts, a prior of 1/2; ngram_update). So a round verifies draft
rows only when they are expected to pay for their rows, else it is an AR step (w = 0: no match, or
matches that have not been accepted).

The loop: a lax.switch in the loop body costs about one more AR step per round on XLA:CPU
(measured: an ngram round forced to width 0 through the switch 0.58 ms, without it 0.25 ms, AR
0.23 ms; docs/rounds.md), so the rounds that verify nothing run in an inner while_loop of plain
AR steps (plus the lookup that decides when to leave it), and the switch is paid once per run of
AR steps or verify round. While no proposal could pay (ngram_can_pay), the counts, which change
only on verify rounds, stay as they are: the rest of the generation is plain AR steps, with no
lookup at all.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp

from glance_jax.decode.drafters.ngram import MAX_NGRAM, match_lengths
from glance_jax.decode.policies.base import WidthPolicy


@dataclasses.dataclass(frozen=True)
class NgramGate(WidthPolicy):
  widths: tuple[int, ...] = (0, 15)
  cost: tuple[float, ...] = (1.0, 1.0)   # t_ngram(w) / t_AR per width
  max_ngram: int = MAX_NGRAM

  def __post_init__(self):
    if len(self.cost) != len(self.widths) or self.widths[0] != 0:
      raise ValueError(f"ngram's gate needs widths starting at 0 and one round cost per width, got widths "
                       f"{self.widths} and costs {self.cost}")

  def check(self, drafter) -> None:
    super().check(drafter)
    if drafter.score_kind != "match" or not drafter.stateless:
      raise ValueError(f"ngram's cost gate needs a stateless drafter scoring nodes by match length, got "
                       f"{drafter.name!r}")

  def init(self, batch: int, rounds: int) -> jax.Array:
    return ngram_prior(batch, self.max_ngram)

  def choice(self, loop, st) -> jax.Array:
    """The width index the next round would choose (its lookup's proposal)."""
    proposal, _ = loop.propose(st)
    n, k = match_lengths(proposal)
    return ngram_width(st.policy, n, k, ~st.done, self.widths, self.cost)

  def run(self, loop, st):
    ar_step = functools.partial(loop.round, proposal=None, w=0)
    depth = max(self.widths)

    def ar_run(s):
      ar_to_end = functools.partial(jax.lax.while_loop, loop.running, ar_step)
      look = functools.partial(jax.lax.while_loop, lambda x: loop.running(x) & (self.choice(loop, x) == 0), ar_step)
      return jax.lax.cond(ngram_can_pay(s.policy, ~s.done, depth, self.widths, self.cost), look, ar_to_end, s)

    def verify(w, s):
      proposal, s = loop.propose(s)
      return loop.round(s, proposal, w)

    branches = [ar_run] + [functools.partial(verify, w) for w in self.widths[1:]]
    return jax.lax.while_loop(loop.running, lambda s: jax.lax.switch(self.choice(loop, s), branches, s), st)

  def update(self, state, proposal, res, w: int, live, r):
    if proposal is None or w == 0:
      return state
    n, k = match_lengths(proposal)
    return ngram_update(state, n, k, jnp.int32(w), res.accepted, live)

  def records(self, state) -> dict:
    return {}


NGRAM_PRIOR = (1.0, 2.0)      # (accepted, trials) a row starts with, per match length: q = 1/2
NGRAM_DECAY = 0.9             # weight of the past per update: the estimate follows the text


def ngram_prior(batch: int, max_ngram: int) -> jax.Array:
  """float32 [B, max_ngram, 2]: (accepted, trials) per match length n = 1..max_ngram."""
  return jnp.broadcast_to(jnp.asarray(NGRAM_PRIOR, jnp.float32), (batch, max_ngram, 2))


def ngram_width(stats: jax.Array, match_n: jax.Array, k: jax.Array, live: jax.Array,
                widths: tuple[int, ...], cost: tuple[float, ...]) -> jax.Array:
  """Index into widths maximising sum_rows (1 + E[A](w)) / t(w) for n-gram proposals.

  stats [B, M, 2] (ngram_prior); match_n int32 [B] (0 = no proposal); k int32 [B] proposal lengths."""
  m = stats.shape[1]
  row = jnp.take_along_axis(stats, jnp.clip(match_n - 1, 0, m - 1)[:, None, None], axis=1)[:, 0]  # [B, 2]
  q = jnp.where(match_n > 0, row[:, 0] / jnp.maximum(row[:, 1], 1e-6), 0.0)
  i = jnp.arange(1, max(widths) + 1)                                      # [D]
  terms = jnp.where(i[None] <= k[:, None], q[:, None] ** i[None], 0.0)    # [B, D]
  cum = jnp.pad(jnp.cumsum(terms, axis=1), ((0, 0), (1, 0)))              # cum[:, w] = E[A](w)
  ea = cum[:, jnp.asarray(widths)]                                        # [B, nw]
  tokens = jnp.sum(jnp.where(live[:, None], 1.0 + ea, 0.0), axis=0)
  return jnp.argmax(tokens / jnp.asarray(cost, jnp.float32)).astype(jnp.int32)


def ngram_can_pay(stats: jax.Array, live: jax.Array, depth: int, widths: tuple[int, ...],
                  cost: tuple[float, ...]) -> jax.Array:
  """bool []: could any proposal pay this round? The choice with every live row holding a full-depth
  proposal from its best match length (E[A] grows with q and k, so this bounds every real lookup).
  The counts change only on verify rounds, so while it is False every round is an AR step."""
  q = stats[..., 0] / jnp.maximum(stats[..., 1], 1e-6)                  # [B, M]
  best_n = (jnp.argmax(q, axis=1) + 1).astype(jnp.int32)
  k = jnp.full(live.shape, depth, jnp.int32)
  return ngram_width(stats, best_n, k, live, widths, cost) != 0


@functools.lru_cache(maxsize=64)
def ngram_pays_at_prior(depth: int, widths: tuple[int, ...], cost: tuple[float, ...], max_ngram: int) -> bool:
  """Could any n-gram proposal pay before the first verify round (ngram_can_pay on ngram_prior)?
  The counts change only on verify rounds, so when this is False every round of the generation is
  an AR step: generate() then runs AR's own program instead of ngram's larger one (which costs 3-5%
  more per call on the testbed CPU for the same AR steps). Every row starts from the same prior, so
  one row decides for any batch. Cached: generate() asks on every call."""
  prior = ngram_prior(1, max_ngram)
  return bool(ngram_can_pay(prior, jnp.ones((1,), bool), depth, tuple(widths), tuple(cost)))


def ngram_update(stats: jax.Array, match_n: jax.Array, k: jax.Array, width: jax.Array, accepted: jax.Array,
                 live: jax.Array, decay: float = NGRAM_DECAY) -> jax.Array:
  """After a round that verified `width` rows: each live row with a proposal adds its accepted tokens
  and trials (accepted, plus the first rejected token when it stopped short of the verified
  proposal) to the counts of its match length (the geometric model's maximum-likelihood counts)."""
  m = stats.shape[1]
  k_eff = jnp.minimum(k, width)
  used = live & (match_n > 0) & (k_eff > 0)
  a = accepted.astype(jnp.float32)
  obs = jnp.stack([a, a + (accepted < k_eff)], axis=-1)                   # [B, 2]
  hit = used[:, None] & (jnp.arange(1, m + 1)[None] == match_n[:, None])  # [B, M]
  return jnp.where(hit[..., None], decay * stats + obs[:, None], stats)


