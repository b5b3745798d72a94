"""How many draft rows a round verifies: the static widths a loop compiles and the per-round choice.

Every round drafts at its widest width W, then verifies only the first w nodes for one w among a few
static widths (a `lax.switch`, chosen per round for the whole batch); w = 0 is a plain AR step (the
root alone, no walk). The first w nodes are always a valid draft: an n-gram proposal is a chain, and
the tree builder emits nodes in score order with every prefix prefix-closed (decode/tree.py), so the
first w nodes are the top-w tree. Whatever w is chosen, the target's own tokens are emitted
(lossless); only the speed changes.

  ngram   the smallest width that holds the longest proposal among the live rows; 0 when no row has a
          prompt-lookup match (an AR step: never slower than AR by more than the lookup).
  auto    (glance, `--budgets auto`) the width w maximising (1 + E[A](w)) / t(w): E[A](w) is the
          expected accepted length of the top-w tree, sum of exp(score) over its nodes under the
          factorised draft, mapped through a calibration measured on bench records (predicted ->
          observed accepted length); t(w) the measured round cost at width w (decode/round_cost.py).
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib

import jax
import jax.numpy as jnp

NGRAM_WIDTHS = (0, 3, 7)      # plus the draft depth
AUTO_WIDTHS = (0, 15, 31)     # plus the budget (the widest tree, default 63)


def ngram_widths(depth: int) -> tuple[int, ...]:
  return tuple(sorted({w for w in NGRAM_WIDTHS if w < depth} | {depth}))


def auto_widths(budget: int) -> tuple[int, ...]:
  return tuple(sorted({w for w in AUTO_WIDTHS if w < budget} | {budget}))


def smallest_width_holding(need: jax.Array, widths: tuple[int, ...]) -> jax.Array:
  """need int32 [] -> index of the smallest width >= need (the last when none is)."""
  w = jnp.asarray(widths, jnp.int32)
  return jnp.minimum(jnp.sum(w < need), len(widths) - 1).astype(jnp.int32)


def expected_accepted(scores: jax.Array, widths: tuple[int, ...], calib: tuple = ()) -> jax.Array:
  """scores float32 [B, W] (best first, -inf = padding) -> E[A] [B, len(widths)] for the top-w trees.

  calib: (predicted, observed) knot tuples of a monotone map (piecewise linear, flat outside), or ()
  for the raw factorised estimate."""
  p = jnp.exp(scores.astype(jnp.float32))                                 # [B, W], 0 for padding
  cum = jnp.pad(jnp.cumsum(p, axis=1), ((0, 0), (1, 0)))                  # [B, W + 1]: cum[:, w]
  raw = cum[:, jnp.asarray(widths)]                                       # [B, nw]
  if calib:
    xs, ys = (jnp.asarray(c, jnp.float32) for c in calib)
    raw = jnp.interp(raw, xs, ys)
  return jnp.where(jnp.asarray(widths)[None] == 0, 0.0, raw)


def best_width(scores: jax.Array, live: jax.Array, widths: tuple[int, ...], cost: tuple[float, ...],
               calib: tuple = ()) -> jax.Array:
  """Index into widths maximising the batch's expected tokens per unit of round cost (int32 [])."""
  ea = expected_accepted(scores, widths, calib)                           # [B, nw]
  tokens = jnp.sum(jnp.where(live[:, None], 1.0 + ea, 0.0), axis=0)       # [nw]
  return jnp.argmax(tokens / jnp.asarray(cost, jnp.float32)).astype(jnp.int32)


# --- the round-cost table (benchmarks/round_cost.py --cost-table) ---------------------------------

COST_SCHEMA = "glance-round-cost/1"
DEFAULT_TABLE = pathlib.Path(__file__).resolve().parent / "round_cost_default.json"


@dataclasses.dataclass(frozen=True)
class RoundCost:
  """t(w) / t_AR per verify width w of an auto round (draft + tree + verify of w rows + walk), for one
  device, target size, batch and context; calibration: (predicted, observed) E[A] knots."""
  widths: dict[int, float]
  calibration: tuple = ()
  meta: dict = dataclasses.field(default_factory=dict)
  path: str = "<built-in>"

  def costs(self, widths: tuple[int, ...]) -> tuple[float, ...]:
    missing = [w for w in widths if w not in self.widths]
    if missing:
      raise ValueError(f"{self.path}: round cost table has no width {missing} (has {sorted(self.widths)})")
    return tuple(float(self.widths[w]) for w in widths)

  def check_matches(self, expect: dict) -> list[str]:
    """One message per metadata key (size, device, batch, ...) where the table differs from `expect`."""
    return [f"{self.path}: round cost table was measured for {k} = {self.meta.get(k)!r}, this run has {v!r}"
            for k, v in expect.items() if k in self.meta and self.meta[k] != v]


def read_round_cost(path) -> RoundCost:
  """Reads and checks a cost table; any problem is one ValueError naming the file and the key."""
  path = str(path)
  try:
    data = json.loads(pathlib.Path(path).read_text())
  except FileNotFoundError:
    raise ValueError(f"--round-cost: no such file {path}") from None
  except json.JSONDecodeError as e:
    raise ValueError(f"--round-cost: {path} is not JSON ({e.msg} at line {e.lineno})") from None
  if not isinstance(data, dict) or data.get("schema") != COST_SCHEMA:
    raise ValueError(f"--round-cost: {path}: key 'schema' must be {COST_SCHEMA!r} "
                     f"(got {data.get('schema') if isinstance(data, dict) else type(data).__name__!r})")
  try:
    widths = {int(w): float(t) for w, t in data["t_over_ar"].items()}
  except (KeyError, AttributeError, TypeError, ValueError):
    raise ValueError(f"--round-cost: {path}: key 't_over_ar' must map width -> t(w) / t_AR") from None
  if 0 not in widths or any(not (t > 0 and math.isfinite(t)) for t in widths.values()):
    raise ValueError(f"--round-cost: {path}: 't_over_ar' needs width 0 and positive finite costs, got {widths}")
  calib = data.get("calibration") or {}
  xs, ys = calib.get("predicted", []), calib.get("observed", [])
  if len(xs) != len(ys) or any(b < a for a, b in zip(xs, xs[1:])) or any(b < a for a, b in zip(ys, ys[1:])):
    raise ValueError(f"--round-cost: {path}: 'calibration' must hold equal-length non-decreasing "
                     "'predicted' and 'observed' lists")
  knots = (tuple(map(float, xs)), tuple(map(float, ys))) if xs else ()
  return RoundCost(widths, knots, dict(data.get("meta") or {}), path)


def default_round_cost() -> RoundCost:
  return read_round_cost(DEFAULT_TABLE)
