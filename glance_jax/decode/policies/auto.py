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

The pause (`pause` > 0): E[A] and t(w) are predictions; where the rounds a row really runs stop
paying, every further draft is a loss, even a width-0 round's (it drafts the next tree). So each
row keeps `gain`, an average of what its drafted rounds earned, (1 + A) / t(w) tokens per AR step
(halved weight per round), and when the live rows' mean falls below 1 (a plain AR step earns 1)
the loop runs `pause` plain AR steps with no draft at all, then one drafted round decides again
(the gain restarts at 1, so that round alone decides). A probe that does not pay doubles the
next pause (up to PAUSE_MAX); a drafted stretch longer than one round resets it. Lossless either
way: AR steps and verify rounds both emit the target's own tokens. Off unless the cost table says
`"auto_pause": true` (on the testbed it cost more than it saved: docs/rounds.md).
"""

from __future__ import annotations

import dataclasses
import functools

import flax.struct
import jax
import jax.numpy as jnp

from glance_jax.decode.policies.base import Calibration, WidthPolicy, expected_accepted

PAUSE = 8            # AR steps of a generation's first pause (glance-auto's default)
PAUSE_MAX = 64       # a pause doubles after each probe that does not pay, up to this
GAIN_START = 2.0     # a row's gain before its first round: two losing rounds pause it, not one
GAIN_KEEP = 0.5      # the weight a row's gain keeps per drafted round (the new round gets the rest)


@flax.struct.dataclass
class AutoState:
  calibration: Calibration
  schedule: jax.Array                # int32 [R]: indices into widths (scheduled), else [0]
  gain: jax.Array                    # float32 [B]: what a row's drafted rounds earned, tokens per AR step
  streak: jax.Array                  # int32 []: drafted rounds since the last pause
  pause: jax.Array                   # int32 []: AR steps the next pause runs
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
  pause: int = 0                         # AR steps of a first pause; 0 = never pause (module doc)

  def __post_init__(self):
    if len(self.cost) != len(self.widths):
      raise ValueError(f"glance-auto needs one round cost per width {self.widths}, got {self.cost}")
    if self.scheduled and len(self.widths) < 2:
      raise ValueError(f"a width schedule needs glance-auto with more than one width, got widths {self.widths}")
    if self.pause < 0 or (self.pause and self.scheduled):
      raise ValueError(f"glance-auto's pause must be >= 0 and off (0) with a width schedule, got {self.pause}")

  def check(self, drafter) -> None:
    super().check(drafter)
    if drafter.score_kind != "log_prob":
      raise ValueError(f"glance-auto needs a drafter scoring nodes by log probability, best first; "
                       f"{drafter.name!r} scores by {drafter.score_kind!r}")

  def init(self, batch: int, rounds: int) -> AutoState:
    return AutoState(Calibration.empty(batch, rounds, self.record_widths),
                     jnp.zeros((rounds if self.scheduled else 1,), jnp.int32),
                     jnp.full((batch,), GAIN_START, jnp.float32), jnp.int32(0), jnp.int32(max(self.pause, 1)))

  def update(self, state: AutoState, proposal, res, w: int, live, r) -> AutoState:
    if proposal is None:   # a pause's AR step: nothing drafted, nothing to record or weigh
      return state
    state = super().update(state, proposal, res, w, live, r)   # the calibration records
    earned = (1.0 + res.accepted.astype(jnp.float32)) / self.cost[self.widths.index(w)]
    return state.replace(gain=jnp.where(live, GAIN_KEEP * state.gain + (1.0 - GAIN_KEEP) * earned, state.gain),
                         streak=state.streak + 1)

  def pays(self, st) -> jax.Array:
    """Do the live rows' drafted rounds still earn more than an AR step (bool [])? Always without a pause."""
    if not self.pause:
      return jnp.bool_(True)
    live = ~st.done
    return jnp.sum(jnp.where(live, st.policy.gain, 0.0)) >= jnp.sum(live)

  def choose(self, st) -> jax.Array:
    """Index into widths for the round about to run (its draft is st.policy.ahead)."""
    if self.scheduled:
      s = st.policy.schedule
      return s[jnp.minimum(st.rounds, s.shape[0] - 1)].astype(jnp.int32)
    return best_width(st.policy.ahead.scores, ~st.done, self.widths, self.cost, self.calib)

  def run(self, loop, st):
    if not self.pause:
      return self._drafting(loop, st, loop.running)
    drafting = lambda x: loop.running(x) & self.pays(x)   # noqa: E731

    def phase(s):   # drafted rounds while they pay, then a pause (when the answer is not done)
      s = self._drafting(loop, s, drafting)
      return jax.lax.cond(loop.running(s), functools.partial(self._pause, loop), lambda x: x, s)

    return jax.lax.while_loop(loop.running, phase, st)

  def _drafting(self, loop, st, going):
    """Drafted rounds while going(state): the per-width inner loops (module doc)."""
    def ahead(s):
      proposal, s = loop.propose(s)
      return s.replace(policy=s.policy.replace(ahead=proposal))

    def step(w, s):
      spent = s.policy.ahead
      s = loop.round(s, spent, w)
      # no draft after the last round (it would be wasted): the consumed draft stands in for it
      return jax.lax.cond(going(s), ahead, lambda x: x.replace(policy=x.policy.replace(ahead=spent)), s)

    def run_at(i, s):
      return jax.lax.while_loop(lambda x: going(x) & (self.choose(x) == i),
                                functools.partial(step, self.widths[i]), s)

    if len(self.widths) == 1:  # nothing to choose: a plain loop of rounds at that width
      return jax.lax.while_loop(going, functools.partial(self.step, loop), st)
    runs = [functools.partial(run_at, i) for i in range(len(self.widths))]
    st = jax.lax.while_loop(going, lambda s: jax.lax.switch(self.choose(s), runs, s), ahead(st))
    return st.replace(policy=st.policy.replace(ahead=None))

  def _pause(self, loop, st):
    """`pause` plain AR steps (no draft), then a fresh gain of 1 so that one drafted round decides."""
    pol = st.policy
    # a probe that did not pay (one drafted round since the last pause) doubles the pause
    n = jnp.where(pol.streak <= 1, jnp.minimum(2 * pol.pause, PAUSE_MAX), self.pause).astype(jnp.int32)
    st, _ = jax.lax.while_loop(lambda c: loop.running(c[0]) & (c[1] < n),
                               lambda c: (loop.round(c[0], None, 0), c[1] + 1), (st, jnp.int32(0)))
    live = ~st.done
    gain = jnp.where(live, 1.0, st.policy.gain)
    return st.replace(policy=st.policy.replace(gain=gain, streak=jnp.int32(0), pause=n))

  def step(self, loop, st):
    proposal, st = loop.propose(st)
    return loop.round(st, proposal, self.widths[0])


def best_width(scores: jax.Array, live: jax.Array, widths: tuple[int, ...], cost: tuple[float, ...],
               calib: tuple = ()) -> jax.Array:
  """Index into widths maximising the batch's expected tokens per unit of round cost (int32 [])."""
  ea = expected_accepted(scores, widths, calib)                           # [B, nw]
  tokens = jnp.sum(jnp.where(live[:, None], 1.0 + ea, 0.0), axis=0)       # [nw]
  return jnp.argmax(tokens / jnp.asarray(cost, jnp.float32)).astype(jnp.int32)


