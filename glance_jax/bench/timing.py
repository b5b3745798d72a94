"""Timing and report plumbing every benchmark shares: interleaved medians, per-iteration phase
timing inside one jitted program, the command line as run, and the JSON report's end.

Ratios are only ever taken between figures measured in the same run; repeats are interleaved across
the things compared and the median is reported (the machines these run on are shared and noisy).
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np


def median(xs) -> float:
  return float(statistics.median(xs)) if xs else float("nan")


def interleaved_ms(fns: dict, x, repeats: int) -> dict:
  """Median ms of each fn(x) (one warm-up call each first), the fns interleaved in every repeat."""
  for f in fns.values():
    jax.block_until_ready(f(x))
  times = {k: [] for k in fns}
  for _ in range(repeats):
    for k, f in fns.items():
      t0 = time.perf_counter()
      jax.block_until_ready(f(x))
      times[k].append(time.perf_counter() - t0)
  return {k: 1e3 * median(v) for k, v in times.items()}


def interleaved(jobs: list, repeats: int, seed: int):
  """Every job once per repeat, in a fresh random order each repeat, so a slow phase of a shared
  machine hits every job alike."""
  rng = np.random.default_rng(seed)
  for _ in range(repeats):
    for idx in rng.permutation(len(jobs)):
      yield jobs[idx]


def barrier(i, tree):
  """Ties `tree` to the loop counter: XLA cannot hoist work on it out of the fori_loop."""
  _, tree = jax.lax.optimization_barrier((i, tree))
  return tree


class PhaseTimer:
  """A phase: a jitted fori_loop over `reps` (a traced count, so one compile serves 0 and R).

  call() -> seconds per iteration = (T(R iterations) - T(0 iterations)) / R: the call's dispatch
  and argument handling cancel out.
  """

  def __init__(self, fn, args, carry, reps):
    # committed like the outputs it will be replaced by, so that the second call does not recompile
    self.fn, self.args, self.carry, self.reps = fn, args, jax.device_put(carry, jax.devices()[0]), reps

  def _run(self, reps: int) -> float:
    r = jnp.int32(reps)
    t0 = time.perf_counter()
    self.carry = self.fn(*self.args, self.carry, reps=r)
    jax.block_until_ready(self.carry)
    return time.perf_counter() - t0

  def call(self) -> float:
    t_zero = self._run(0)
    t_full = self._run(self.reps)
    t_zero = min(t_zero, self._run(0))           # noise only ever adds time
    return max(t_full - t_zero, 0.0) / self.reps


def command_line(argv, script: str) -> list[str]:
  """The command as run (interpreter, script or -m module, arguments); when a benchmark's main() is
  called from Python with `argv`, the equivalent `python <script> argv...`."""
  if argv is not None:
    return ["python", script] + list(argv)
  spec = getattr(sys.modules.get("__main__"), "__spec__", None)
  head = ["-m", spec.name] if spec is not None else [sys.argv[0]]
  return [sys.executable] + head + sys.argv[1:]


def finish(report: dict, t0: float, json_path: str | None, note: str = "", label: str = "total") -> dict:
  """Stamps the wall time, prints it and writes the report as JSON (every benchmark's end; a partial
  report written on the way, as gpu_8b's glance rows before its rivals, passes its own label)."""
  report["seconds"] = time.perf_counter() - t0
  print(f"\n{label} {report['seconds']:.0f}s{note}")
  if json_path:
    with open(json_path, "w") as f:
      json.dump(report, f, indent=2, default=float)
  return report
