"""Width policies: how many of the drafted nodes each round verifies, and how the rounds are run.

Every round drafts at the drafter's width N and verifies the first w nodes for one static w among
the policy's `widths`; w = 0 verifies the root alone (a plain AR step, no walk). The first w nodes
are always a valid draft (a chain's prefix, or the top-w tree of a score-ordered build), so
whatever w is chosen the target's own tokens are emitted (lossless); only the speed changes.

A policy is a frozen dataclass (static), with a state pytree of its own in LoopState.policy, and:
  widths               the static widths it compiles (each <= drafter.num_nodes)
  check(drafter)       a ValueError when the policy cannot drive this drafter
  init(batch, rounds)  its state: choice statistics and per-round records
  run(loop, st)        every round of the generation (decode/loop.py Rounds: running, propose,
                       round): the loop structure is the policy's, the round is the engine's
  update(state, proposal, res, w, live, r)
                       after round r verified w nodes (w static; proposal None when the round
                       did not draft)
  records(state)       host arrays for GenerationResult (the calibration data), {} when none

  Fixed(w)     one width, no choice (glance-N, chain, ar): a plain while_loop of rounds
  Holding(ws)  the smallest width holding every live row's proposal, chosen per round
  Auto         glance-auto (policies/auto.py)
  NgramGate    ngram's cost gate (policies/ngram_gate.py)

Fixed and Auto can record, per round and recorded width w, the raw E[A] of the top-w tree and the
accepted length the top-w tree would have had: glance-auto's calibration data (bench/calibrate.py).
"""

from __future__ import annotations

import dataclasses
import functools

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np


class WidthPolicy:
  """Base: one width, nothing recorded."""
  widths: tuple[int, ...] = (0,)
  record_widths: tuple[int, ...] = ()

  def check(self, drafter) -> None:
    if max(self.widths) > drafter.num_nodes:
      raise ValueError(f"{type(self).__name__}: widths {self.widths} exceed the drafter's {drafter.num_nodes} nodes")

  def init(self, batch: int, rounds: int):
    return Calibration.empty(batch, rounds, self.record_widths)

  def run(self, loop, st):
    return jax.lax.while_loop(loop.running, functools.partial(self.step, loop), st)

  def step(self, loop, st):
    raise NotImplementedError

  def update(self, state, proposal, res, w: int, live, r):
    if not self.record_widths:
      return state
    return state.record(proposal.scores, res, w, live, r, self.record_widths)

  def records(self, state) -> dict:
    if not self.record_widths:
      return {}
    return {"predicted": np.asarray(state.pred), "observed": np.asarray(state.obs)}


@dataclasses.dataclass(frozen=True)
class Fixed(WidthPolicy):
  width: int = 0
  record_widths: tuple[int, ...] = ()

  @property
  def widths(self) -> tuple[int, ...]:
    return (self.width,)

  def step(self, loop, st):
    proposal, st = loop.propose(st)
    return loop.round(st, proposal, self.width)


@dataclasses.dataclass(frozen=True)
class Holding(WidthPolicy):
  """Per round, the smallest of `widths` that holds every live row's proposal (a lax.switch over
  the widths; a chain drafter's proposals are prefixes of valid nodes)."""
  widths: tuple[int, ...] = (0,)

  def step(self, loop, st):
    proposal, st = loop.propose(st)
    need = jnp.max(jnp.where(~st.done, jnp.sum(proposal.tree.valid, axis=1), 0))
    branches = [functools.partial(loop.round, w=w, uniform=True) for w in self.widths]
    return jax.lax.switch(smallest_width_holding(need, self.widths), branches, st, proposal)


def smallest_width_holding(need: jax.Array, widths: tuple[int, ...]) -> jax.Array:
  """need int32 [] -> index of the smallest width >= need (the last when none is)."""
  w = jnp.asarray(widths, jnp.int32)
  return jnp.minimum(jnp.sum(w < need), len(widths) - 1).astype(jnp.int32)



# --- the calibration records ---------------------------------------------------------------------

@flax.struct.dataclass
class Calibration:
  """Per round r and recorded width w: the raw E[A] of the top-w tree and the accepted length the
  top-w tree would have had (-1: w above the verified width, or the row was done)."""
  pred: jax.Array           # float32 [B, R, P]
  obs: jax.Array            # int32 [B, R, P]

  @classmethod
  def empty(cls, batch: int, rounds: int, widths: tuple[int, ...]) -> "Calibration":
    p = len(widths)
    return cls(jnp.zeros((batch, rounds, p), jnp.float32), jnp.full((batch, rounds, p), -1, jnp.int32))

  def record(self, scores, res, w: int, live, r, widths: tuple[int, ...]) -> "Calibration":
    pred, obs = calibration_record(scores, res.accepted, res.commit_rows, jnp.int32(w), widths)
    return self.replace(pred=self.pred.at[:, r].set(pred),
                        obs=self.obs.at[:, r].set(jnp.where(live[:, None], obs, -1)))


def calibration_record(scores: jax.Array, accepted: jax.Array, commit_rows: jax.Array, width: jax.Array,
                       widths: tuple[int, ...]) -> tuple[jax.Array, jax.Array]:
  """One round's calibration data: (raw E[A] of the top-w tree [B, P], the accepted length the top-w
  tree would have had [B, P], -1 for w above the verified width) for w in `widths`.

  The walk's path in the top-w tree is the verified path cut at its first node outside the top w
  (a parent precedes its children, so path node indices increase): A(w) = path nodes with index < w.
  commit_rows [B, C]: verify rows of the path (root first; row i = node i - 1)."""
  pred = expected_accepted(scores, widths)
  c = commit_rows.shape[1]
  on_path = jnp.arange(1, c)[None] <= accepted[:, None]                   # [B, C - 1]
  node = commit_rows[:, 1:] - 1                                           # [B, C - 1]
  w = jnp.asarray(widths, jnp.int32)
  obs = jnp.sum(on_path[:, :, None] & (node[:, :, None] < w[None, None]), axis=1).astype(jnp.int32)
  return pred, jnp.where(w[None] <= width, obs, -1)


def expected_accepted(scores: jax.Array, widths: tuple[int, ...], calib: tuple = ()) -> jax.Array:
  """scores float32 [B, W] (best first, -inf = padding) -> E[A] [B, len(widths)] for the top-w trees.

  calib: (predicted, observed) knot tuples of a monotone map (piecewise linear, flat outside) for
  every width; or one such pair per width (RoundCost.knots; () = raw for that width); or () for
  the raw factorised estimate."""
  p = jnp.exp(scores.astype(jnp.float32))                                 # [B, W], 0 for padding
  cum = jnp.pad(jnp.cumsum(p, axis=1), ((0, 0), (1, 0)))                  # [B, W + 1]: cum[:, w]
  raw = cum[:, jnp.asarray(widths)]                                       # [B, nw]
  if calib and _is_knots(calib):
    calib = (calib,) * len(widths)
  if calib:
    cols = [jnp.interp(raw[:, i], *(jnp.asarray(c, jnp.float32) for c in k)) if k else raw[:, i]
            for i, k in enumerate(calib)]
    raw = jnp.stack(cols, axis=1)
  return jnp.where(jnp.asarray(widths)[None] == 0, 0.0, raw)


def _is_knots(calib: tuple) -> bool:
  """(xs, ys) of floats (one map for every width), not a tuple of per-width pairs."""
  return len(calib) == 2 and len(calib[0]) > 0 and not isinstance(calib[0][0], tuple)


