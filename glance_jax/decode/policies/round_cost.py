"""Round-cost tables: t(w) / t_AR per verify width, measured on one device, target, batch and context.

glance-auto and ngram's cost gate (decode/policies) choose widths with them; bench/calibrate.py
measures them in the real loop and fits the E[A] calibration stored beside them. The built-in
tables (this folder's round_cost_default*.json) were measured on the testbed's CPU, one per batch.

Width sets: ngram compiles NGRAM_WIDTHS plus its depth; glance-auto chooses among AUTO_WIDTHS plus
its budget (the widest tree), and compiles the table's 'auto_set' (chosen by bench/calibrate.py
replaying the policy on calibration rounds for every subset of the paying widths), else the widths
at which a round could beat an AR step at all (1 + min(w, L) tokens > t(w) AR steps).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import pathlib

import numpy as np

from glance_jax.config import read_json

NGRAM_WIDTHS = (0, 3, 7)      # plus the draft depth
AUTO_WIDTHS = (0, 15, 31)     # plus the budget (the widest tree, default 63)


def ngram_widths(depth: int) -> tuple[int, ...]:
  return tuple(sorted({w for w in NGRAM_WIDTHS if w < depth} | {depth}))


def auto_widths(budget: int) -> tuple[int, ...]:
  """Every width glance-auto may compile at this budget (the cost table picks among them: auto_set)."""
  return tuple(sorted({w for w in AUTO_WIDTHS if w < budget} | {budget}))


def paying_widths(cost: dict[int, float], depth: int) -> tuple[int, ...]:
  """The widths at which a round could beat an AR step at all: even a round accepting everything
  emits at most 1 + min(w, depth) tokens (the bonus plus the tree's deepest path), and it costs
  t(w) AR steps. cost: width -> t(w) / t_AR. When none can (a table forcing one width, or a target
  where drafting never pays), the width whose best case is best, alone."""
  best = {w: (1 + min(w, depth)) / t for w, t in cost.items()}
  keep = tuple(sorted(w for w, b in best.items() if b >= 1.0))
  return keep or (max(best, key=lambda w: (best[w], -w)),)


# --- the round-cost table (benchmarks/round_cost.py --cost-table) ---------------------------------

COST_SCHEMA = "glance-round-cost/1"
FORCE_COST = 1e6              # RoundCost.force: the cost of every width but the forced one
DEFAULT_TABLE = pathlib.Path(__file__).resolve().parent / "round_cost_default.json"
# built-in tables by the batch they were measured at (testbed shapes, CPU); a call at batch B reads the
# one measured at the largest batch <= B
DEFAULT_TABLES = {1: DEFAULT_TABLE, **{b: DEFAULT_TABLE.with_name(f"round_cost_default_b{b}.json") for b in (2, 4, 8)}}


@dataclasses.dataclass(frozen=True)
class RoundCost:
  """t(w) / t_AR per verify width w of an auto round (draft + tree + verify of w rows + walk), for one
  device, target size, batch and context; calibration: (predicted, observed) E[A] knots."""
  widths: dict[int, float]
  calibration: tuple = ()
  meta: dict = dataclasses.field(default_factory=dict)
  path: str = "<built-in>"
  ngram: dict[int, float] = dataclasses.field(default_factory=dict)   # ngram rounds: t(w) / t_AR
  # measurement only (bench/calibrate.py): glance-auto compiles auto_set's widths plus this one and
  # always chooses it, so its cost is timed in the loop the policy really runs (same tree width)
  force: int | None = None
  per_width: dict = dataclasses.field(default_factory=dict)  # w -> (predicted, observed) knots
  # table key 'auto_set': the widths glance-auto compiles, chosen by bench/calibrate.py replaying the
  # policy on calibration rounds (choose_auto_set); () = the paying rule (paying_widths)
  compiled: tuple[int, ...] = ()
  # table key 'auto_plain_ar': the replay found no compiled set that beats plain AR at this table's
  # batch, so glance-auto runs the AR loop (no head pass, no verify rows): generate() reads it
  plain_ar: bool = False
  # table key 'auto_pause' (default false): glance-auto pauses drafting where its rounds stop paying
  # (policies/auto.py, "The pause"; on the testbed it cost more than it saved: docs/rounds.md);
  # false: it drafts every round, as the replay of auto_set assumes
  pause: bool = False

  def knots(self, widths: tuple[int, ...]) -> tuple:
    """One calibration map per width (for LoopConfig.calib): the width's own fit where the table has
    one, else the pooled one, else () (raw E[A])."""
    if not self.per_width:
      return self.calibration
    return tuple(self.per_width.get(w, self.calibration) for w in widths)

  def auto_set(self, budget: int, depth: int) -> tuple[int, ...]:
    """The widths glance-auto compiles at this budget: the table's 'auto_set' (chosen by replaying the
    policy on calibration rounds), else those of auto_widths(budget) that could pay by this table
    (paying_widths); plus `force`. The loop builds a tree of the widest one."""
    allowed = auto_widths(budget)
    missing = [w for w in allowed if w not in self.widths]
    if missing:
      raise ValueError(f"{self.path}: round cost table key 't_over_ar' has no width {missing} "
                       f"(has {sorted(self.widths)})")
    keep = {w for w in self.compiled if w in allowed}
    if self.compiled and not keep:  # chosen for a larger budget: the paying rule at this one, said aloud
      import warnings
      warnings.warn(f"{self.path}: round cost table key 'auto_set' {list(self.compiled)} has no width that "
                    f"budget {budget} allows ({list(allowed)}); compiling the widths that could pay instead",
                    stacklevel=2)
    if not keep:
      keep = set(paying_widths({w: self.widths[w] for w in allowed}, depth))
    if self.force is not None:
      if self.force not in allowed:
        raise ValueError(f"forced width {self.force} is not one of {allowed}")
      keep.add(self.force)
    return tuple(sorted(keep))

  def costs(self, widths: tuple[int, ...], method: str = "glance") -> tuple[float, ...]:
    """t(w) / t_AR per width. ngram: a width inside the measured range (a budget below the draft
    depth compiles e.g. width 1) is interpolated linearly between its measured neighbours. With
    `force` (glance): 1 for the forced width, FORCE_COST for the others."""
    if self.force is not None and method != "ngram":
      return tuple(1.0 if w == self.force else FORCE_COST for w in widths)
    table, key = (self.ngram, "ngram_t_over_ar") if method == "ngram" else (self.widths, "t_over_ar")
    if method == "ngram" and table:
      xs = sorted(table)
      table = {**{w: float(np.interp(w, xs, [table[x] for x in xs])) for w in widths if xs[0] <= w <= xs[-1]},
               **table}
    missing = [w for w in widths if w not in table]
    if missing:
      raise ValueError(f"{self.path}: round cost table key {key!r} has no width {missing} (has {sorted(table)})")
    return tuple(float(table[w]) for w in widths)

  def check_matches(self, expect: dict) -> list[str]:
    """One message per metadata key (size, device, batch, ...) where the table differs from `expect`."""
    return [f"{self.path}: round cost table was measured for {k} = {self.meta.get(k)!r}, this run has {v!r}"
            for k, v in expect.items() if k in self.meta and self.meta[k] != v]


def read_round_cost(path) -> RoundCost:
  """Reads and checks a cost table; any problem is one ValueError naming the file and the key."""
  path = str(path)
  data = read_json(path, what="--round-cost table")
  if not isinstance(data, dict) or data.get("schema") != COST_SCHEMA:
    raise ValueError(f"--round-cost: {path}: key 'schema' must be {COST_SCHEMA!r} "
                     f"(got {data.get('schema') if isinstance(data, dict) else type(data).__name__!r})")
  widths = _width_map(data, "t_over_ar", path)
  ngram = _width_map(data, "ngram_t_over_ar", path) if "ngram_t_over_ar" in data else {}
  calib = data.get("calibration") or {}
  xs, ys = calib.get("predicted", []), calib.get("observed", [])
  knots = _knots(xs, ys, path, "calibration")
  per_width = {}
  for w, kw in (calib.get("per_width") or {}).items():
    try:
      per_width[int(w)] = _knots(kw["predicted"], kw["observed"], path, f"calibration.per_width.{w}")
    except (KeyError, TypeError, ValueError) as e:
      if isinstance(e, ValueError) and str(e).startswith("--round-cost"):
        raise
      raise ValueError(f"--round-cost: {path}: 'calibration.per_width.{w}' must hold 'predicted' and "
                       "'observed' lists") from None
  compiled = data.get("auto_set") or []
  if not (isinstance(compiled, list) and all(isinstance(w, int) and w in widths for w in compiled)
          and compiled == sorted(set(compiled))):
    raise ValueError(f"--round-cost: {path}: key 'auto_set' must be an increasing list of widths of "
                     f"'t_over_ar' {sorted(widths)}, got {compiled!r}")
  plain_ar = data.get("auto_plain_ar", False)
  if not isinstance(plain_ar, bool):
    raise ValueError(f"--round-cost: {path}: key 'auto_plain_ar' must be true or false, got {plain_ar!r}")
  pause = data.get("auto_pause", False)
  if not isinstance(pause, bool):
    raise ValueError(f"--round-cost: {path}: key 'auto_pause' must be true or false, got {pause!r}")
  return RoundCost(widths, knots, dict(data.get("meta") or {}), path, ngram, per_width=per_width,
                   compiled=tuple(compiled), plain_ar=plain_ar, pause=pause)


def _knots(xs, ys, path: str, key: str) -> tuple:
  if len(xs) != len(ys) or any(b < a for a, b in zip(xs, xs[1:])) or any(b < a for a, b in zip(ys, ys[1:])):
    raise ValueError(f"--round-cost: {path}: '{key}' must hold equal-length non-decreasing "
                     "'predicted' and 'observed' lists")
  return (tuple(map(float, xs)), tuple(map(float, ys))) if xs else ()


def _width_map(data: dict, key: str, path: str) -> dict[int, float]:
  try:
    widths = {int(w): float(t) for w, t in data[key].items()}
  except (KeyError, AttributeError, TypeError, ValueError):
    raise ValueError(f"--round-cost: {path}: key {key!r} must map width -> t(w) / t_AR") from None
  if 0 not in widths or any(not (t > 0 and math.isfinite(t)) for t in widths.values()):
    raise ValueError(f"--round-cost: {path}: {key!r} needs width 0 and positive finite costs, got {widths}")
  return widths


def default_round_cost(batch: int = 1) -> RoundCost:
  """The built-in table measured at the largest batch <= `batch` (DEFAULT_TABLES), read once per
  process (generate() asks for it on every ngram and auto call, and a file read per call is time the
  bench charges to the method). They were measured on the testbed's in-cache target (a compute-bound
  CPU, meta["host"]), where the replay of the shipped head's rounds finds no width that beats AR at
  any batch (`auto_plain_ar`: glance-auto runs the AR loop); a memory-bound device (an accelerator
  at batch 1) wants its own table: `--round-cost device` (bench/device_cost.py) or a measured file."""
  return _read_default(DEFAULT_TABLES[max(b for b in DEFAULT_TABLES if b <= max(int(batch), 1))])


@functools.lru_cache(maxsize=None)
def _read_default(path: pathlib.Path) -> RoundCost:
  return read_round_cost(path)
