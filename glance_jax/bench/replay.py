"""Replayed acceptance: the real decode loop of any target, with an oracle drafter that makes every
round accept exactly a recorded accepted length (benchmarks/replay.py).

Why: the testbed target is small enough to be compute-bound on a CPU, so its measured speedup is
capped by arithmetic. Replaying the testbed's per-round accepted lengths (and, for glance-auto, its
per-round verify widths) on a larger, memory-bound target measures what that acceptance buys there,
with every round doing the real work: a head pass, the tree of the recorded method's width, one
verify pass of that width, walk and commit.

The oracle. The oracle drafter (bench/engine.py) pushes the head's marginals at draft slot d
of a round that starts with `count` emitted tokens onto oracle[count + d], so the drafted path (the
chain, or the top-scored path of the tree) is oracle[count : count + L]. With oracle = the target's
own greedy continuation (AR's tokens) every round accepts L. Round r starts at
c_r = 1 + sum_{i<r} (a_i + 1); making oracle[c_r + a_r] wrong (AR's token + 1 mod V) stops the walk
after exactly a_r accepted tokens, and the target's own token there is the round's bonus, so round
r + 1 starts at c_r + a_r + 1 and never drafts the corrupted position again. The tree's other nodes
(siblings with scores ~ -50) could by chance hold the right token at the failing depth; the replay
then accepts more than recorded, which `check` reports (it never changes the tokens: verify is
lossless whatever the draft).
"""

from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np

from glance_jax.config import read_json
from glance_jax.bench import engine
from glance_jax.decode import loop, methods, policies
from glance_jax.decode.drafters import block

# methods whose rounds can be replayed (the oracle needs a head)
REPLAYED = ("chain", "glance")


class ReplayMismatch(AssertionError):
  """A replay that did not reproduce its schedule, or whose tokens differ from AR's."""


# --- records ---------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Recorded:
  """One bench label's per-round records for one task: per prompt, accepted lengths a and widths w."""
  label: str
  method: str
  budget: int
  auto: bool
  accepted: tuple[np.ndarray, ...]   # per prompt: int [rounds]
  widths: tuple[np.ndarray, ...]     # per prompt: int [rounds], the verify width of each round

  @property
  def tau(self) -> float:
    a = np.concatenate(self.accepted)
    return float(np.mean(a + 1))


def read_records(path: str, labels: list[str] | None = None) -> dict[str, dict[str, Recorded]]:
  """task -> label -> Recorded, for the chain / glance labels of a `decode.py bench` JSON (every one
  whose per_prompt entries hold `accepted` and `widths`). Bad input: one ValueError naming the key."""
  data = read_json(path, what="bench report")
  tasks = data.get("tasks") if isinstance(data, dict) else None
  if not isinstance(tasks, dict) or not tasks:
    raise ValueError(f"{path}: key 'tasks' must map task -> results (a decode.py bench JSON)")
  out: dict[str, dict[str, Recorded]] = {}
  for task, t in tasks.items():
    out[task] = {}
    for label, m in (t.get("methods") or {}).items():
      if m.get("method") not in REPLAYED or (labels and label not in labels):
        continue
      where = f"{path}: tasks.{task}.methods.{label}.per_prompt"
      acc, wid = [], []
      for i, pp in enumerate(m.get("per_prompt") or []):
        if "accepted" not in pp or "widths" not in pp:
          raise ValueError(f"{where}[{i}]: no 'accepted' / 'widths' round records (re-run decode.py bench)")
        a, w = np.asarray(pp["accepted"], np.int64), np.asarray(pp["widths"], np.int64)
        if a.shape != w.shape or a.ndim != 1 or (a < 0).any() or (a > np.maximum(w, 0)).any():
          raise ValueError(f"{where}[{i}]: 'accepted' {a.tolist()} and 'widths' {w.tolist()} are not one "
                           "0 <= a <= w per round")
        acc.append(a)
        wid.append(w)
      if not acc:
        raise ValueError(f"{where}: no prompts")
      out[task][label] = Recorded(label, m["method"], int(m["budget"]), bool(m.get("auto", label == "glance-auto")),
                                  tuple(acc), tuple(wid))
  missing = [lb for lb in labels or () if not any(lb in v for v in out.values())]
  if missing:
    raise ValueError(f"{path}: no task holds method(s) {missing}")
  return out


# --- the schedule and the oracle -------------------------------------------------------------------

def schedule(rec: Recorded, start: int, max_new_tokens: int) -> tuple[np.ndarray, np.ndarray]:
  """The rounds a replayed prompt runs: prompt `start`'s recorded rounds, then the next prompts'
  (cyclically), until max_new_tokens tokens are emitted (the first comes from the prefill; each
  round emits a + 1, the last cut by max_new_tokens as in the real loop). -> (accepted, widths)."""
  acc, wid, count, p = [], [], 1, start
  while count < max_new_tokens:
    for a, w in zip(rec.accepted[p % len(rec.accepted)], rec.widths[p % len(rec.widths)]):
      if count >= max_new_tokens:
        break
      acc.append(int(a))
      wid.append(int(w))
      count += int(a) + 1
    p += 1
    if p - start > len(rec.accepted) and not acc:
      raise ValueError(f"{rec.label}: no rounds recorded")
  return np.asarray(acc, np.int64), np.asarray(wid, np.int64)


def oracle_tokens(reference: np.ndarray, accepted: np.ndarray, vocab_size: int, depth: int) -> np.ndarray:
  """AR's continuation (int [>= max_new_tokens + depth + 1], reference[0] = the prefill's token) with
  the token after each round's accepted prefix made wrong (module doc). -> int32 [len(reference)]."""
  ref = np.asarray(reference, np.int64)
  ends = 1 + np.cumsum(np.asarray(accepted) + 1) - 1      # c_r + a_r for every round r
  need = int(ends[-1]) + 1 if len(ends) else 1
  if len(ref) < max(need, depth + 1):
    raise ValueError(f"reference continuation has {len(ref)} tokens; the schedule needs {need}")
  out = ref.copy()
  full = np.asarray(accepted) >= depth                   # a = L: the path is all right, nothing to break
  out[ends[~full]] = (ref[ends[~full]] + 1) % vocab_size
  return out.astype(np.int32)


# --- running one replay ----------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Spec:
  """What one timed configuration runs: ar, or a head method at a budget (auto: recorded widths)."""
  label: str
  method: str
  budget: int
  auto: bool = False


@dataclasses.dataclass(frozen=True)
class Replayed:
  """What one timed configuration compiles: the drafter (the oracle drafter for head methods), its
  policy (glance-auto: scheduled, every width of auto_widths(budget)), the loop's static knobs."""
  drafter: object
  policy: object
  cfg: loop.LoopConfig

  def slots_needed(self, prompt_len: int) -> int:
    return loop.slots_needed(self.drafter, self.cfg, prompt_len)


def loop_config(target, head, spec: Spec, max_new_tokens: int, cost: tuple[float, ...] = ()) -> Replayed:
  """generate()'s drafter and policy for this spec, the oracle drafter for head methods (no stop)."""
  cfg = loop.LoopConfig(max_new_tokens=max_new_tokens)
  if spec.method == "ar":
    p = methods.plan(target, "ar")
    return Replayed(p.drafter, p.policy, cfg)
  if spec.method not in REPLAYED:
    raise ValueError(f"cannot replay method {spec.method!r} (replayed: {REPLAYED})")
  if spec.auto:
    widths = policies.auto_widths(spec.budget)
    if len(cost) != len(widths):
      cost = (1.0,) * len(widths)  # never read: the replay picks each width
    drafter = block.bind(head, target, spec.budget)
    policy = policies.Auto(widths, tuple(cost), (), methods.recorded_widths(spec.budget), scheduled=True)
  else:
    p = methods.plan(target, spec.method, head=head, budget=spec.budget)
    drafter, policy = p.drafter, p.policy
  return Replayed(engine.oracle_drafter(drafter), policy, cfg)


def prepare(target, inputs):
  """One prompt's device arrays (made once, outside the timed calls): (Prompt, rope_delta)."""
  return target.prompt(inputs), jnp.asarray(inputs.rope_delta, jnp.int32)


def run(target, head, p, rc: Replayed, max_length: int, oracle: np.ndarray | None = None,
        widths: np.ndarray | None = None) -> tuple[float, float, np.ndarray, np.ndarray, np.ndarray]:
  """Prefill + the decode loop, batch 1, no stop token, timed end to end (until the tokens are on the
  host) and the loop alone (the prefill is waited for first). widths (auto): the verify width of
  every round. -> (seconds end to end, seconds of the loop, tokens, accepted, widths)."""
  prompt, rope_delta = p
  tgd, tparams = target.jit_graphdef, target.flat_params  # as generate passes them (static_args)
  stops = jnp.asarray([-1], jnp.int32)
  dparams = ()
  if rc.drafter.name != "ar":
    pad = rc.cfg.max_new_tokens + rc.drafter.block_size
    orc = np.zeros((1, pad), np.int32) if oracle is None else np.asarray(oracle, np.int32)[None]
    dparams = (head.flat_params, jnp.asarray(np.pad(orc, ((0, 0), (0, max(pad - orc.shape[1], 0))))))
  t0 = time.perf_counter()
  st = loop.prefill(tgd, tparams, rc.drafter, dparams, rc.policy, prompt, rope_delta, stops, jax.random.key(0),
                    cfg=rc.cfg, max_length=max_length)
  if getattr(rc.policy, "scheduled", False):
    # padded to max_new_tokens (>= rounds): one compiled loop whatever the schedule's length
    ws = rc.policy.widths
    idx = np.full(rc.cfg.max_new_tokens, ws.index(int(widths[-1])), np.int32)
    idx[: len(widths)] = [ws.index(int(w)) for w in widths]
    st = st.replace(policy=st.policy.replace(schedule=jnp.asarray(idx)))
  st = jax.block_until_ready(st)
  t1 = time.perf_counter()
  # glance-auto: the policy's own loop, each round's width read from the recorded schedule
  st = loop.decode_rounds(tgd, tparams, rc.drafter, dparams, rc.policy, st, stops, cfg=rc.cfg)
  out, count = np.asarray(st.out[0]), int(st.count[0])
  t2 = time.perf_counter()
  n = int(st.rounds)
  return t2 - t0, t2 - t1, out[:count], np.asarray(st.accepted[0, :n]), np.asarray(st.width[:n])


def check(label: str, tokens, accepted, widths, ar_tokens, want_accepted, want_widths=None) -> None:
  """Raises ReplayMismatch unless tokens == AR's and every round accepted (and verified) as scheduled."""
  if not np.array_equal(tokens, ar_tokens):
    first = int(np.argmax(tokens[: len(ar_tokens)] != ar_tokens[: len(tokens)])) if len(tokens) == len(ar_tokens) else -1
    raise ReplayMismatch(f"{label}: tokens differ from AR's (first at {first}; lengths {len(tokens)} / {len(ar_tokens)})")
  if not np.array_equal(accepted, want_accepted):
    raise ReplayMismatch(f"{label}: accepted lengths {accepted.tolist()} != recorded {np.asarray(want_accepted).tolist()}")
  if want_widths is not None and not np.array_equal(widths, want_widths):
    raise ReplayMismatch(f"{label}: verify widths {widths.tolist()} != recorded {np.asarray(want_widths).tolist()}")
