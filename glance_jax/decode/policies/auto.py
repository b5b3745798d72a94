"""glance-auto: the verify width chosen per round from the draft's own scores and a round-cost table.

Per round, the width w among the compiled ones maximising the batch's expected tokens per unit of
round cost, sum_rows (1 + E[A](w)) / t(w): E[A](w) is the expected accepted length of the top-w
tree, the sum of exp(score) over its nodes under the factorised draft, mapped through a monotone
calibration fitted on recorded rounds (predicted -> observed); t(w) the measured round cost at
width w (policies/round_cost.py), the loop's whole round: draft, tree, verify, walk, commit.

The loop: a per-round lax.switch over the widths costs ~1.5 AR steps a round on the testbed CPU
(docs/rounds.md). So each round drafts the *next* round's tree at its end (the state's `ahead`),
the width that tree asks for is known before the round starts, and an inner while_loop runs
rounds at one static width for as long as the choice stays the same; the switch is paid only when
the width changes. With `scheduled`, round r verifies widths[schedule[min(r, R - 1)]] instead
(the state's `schedule`, set by the caller: bench/replay.py replays recorded widths), in the same
compiled loop.
"""

from __future__ import annotations

import dataclasses
import functools

import flax.struct
import jax
import jax.numpy as jnp

from glance_jax.decode.policies.base import Calibration, WidthPolicy, expected_accepted


@flax.struct.dataclass
class AutoState:
  calibration: Calibration
  schedule: jax.Array                # int32 [R]: indices into widths (scheduled), else [0]
  ahead: object = None               # the Proposal drafted for the current root (inside run)

  def record(self, *args):
    return self.replace(calibration=self.calibration.record(*args))

  @property
  def pred(self):
    return self.calibration.pred

  @property
  def obs(self):
    return self.calibration.obs


@dataclasses.dataclass(frozen=True)
class Auto(WidthPolicy):
  widths: tuple[int, ...] = (0, 15)
  cost: tuple[float, ...] = (1.0, 1.0)   # t(w) / t_AR per width
  calib: tuple = ()                      # (predicted, observed) knots, or one pair per width
  record_widths: tuple[int, ...] = ()
  scheduled: bool = False

  def __post_init__(self):
    if len(self.cost) != len(self.widths):
      raise ValueError(f"glance-auto needs one round cost per width {self.widths}, got {self.cost}")
    if self.scheduled and len(self.widths) < 2:
      raise ValueError(f"a width schedule needs glance-auto with more than one width, got widths {self.widths}")

  def check(self, drafter) -> None:
    super().check(drafter)
    if drafter.score_kind != "log_prob":
      raise ValueError(f"glance-auto needs a drafter scoring nodes by log probability, best first; "
                       f"{drafter.name!r} scores by {drafter.score_kind!r}")

  def init(self, batch: int, rounds: int) -> AutoState:
    return AutoState(Calibration.empty(batch, rounds, self.record_widths),
                     jnp.zeros((rounds if self.scheduled else 1,), jnp.int32))

  def choose(self, st) -> jax.Array:
    """Index into widths for the round about to run (its draft is st.policy.ahead)."""
    if self.scheduled:
      s = st.policy.schedule
      return s[jnp.minimum(st.rounds, s.shape[0] - 1)].astype(jnp.int32)
    return best_width(st.policy.ahead.scores, ~st.done, self.widths, self.cost, self.calib)

  def run(self, loop, st):
    def ahead(s):
      proposal, s = loop.propose(s)
      return s.replace(policy=s.policy.replace(ahead=proposal))

    def step(w, s):
      spent = s.policy.ahead
      s = loop.round(s, spent, w)
      # no draft after the last round (it would be wasted): the consumed draft stands in for it
      return jax.lax.cond(loop.running(s), ahead, lambda x: x.replace(policy=x.policy.replace(ahead=spent)), s)

    def run_at(i, s):
      return jax.lax.while_loop(lambda x: loop.running(x) & (self.choose(x) == i),
                                functools.partial(step, self.widths[i]), s)

    if len(self.widths) == 1:  # nothing to choose: a plain loop of rounds at that width
      return jax.lax.while_loop(loop.running, functools.partial(self.step, loop), st)
    runs = [functools.partial(run_at, i) for i in range(len(self.widths))]
    st = jax.lax.while_loop(loop.running, lambda s: jax.lax.switch(self.choose(s), runs, s), ahead(st))
    return st.replace(policy=st.policy.replace(ahead=None))

  def step(self, loop, st):
    proposal, st = loop.propose(st)
    return loop.round(st, proposal, self.widths[0])


def best_width(scores: jax.Array, live: jax.Array, widths: tuple[int, ...], cost: tuple[float, ...],
               calib: tuple = ()) -> jax.Array:
  """Index into widths maximising the batch's expected tokens per unit of round cost (int32 [])."""
  ea = expected_accepted(scores, widths, calib)                           # [B, nw]
  tokens = jnp.sum(jnp.where(live[:, None], 1.0 + ea, 0.0), axis=0)       # [nw]
  return jnp.argmax(tokens / jnp.asarray(cost, jnp.float32)).astype(jnp.int32)


