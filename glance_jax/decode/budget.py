"""How many draft rows a round verifies: the static widths a loop compiles and the per-round choice.

Every round drafts at its widest width W, then verifies only the first w nodes for one w among a few
static widths (a `lax.switch`, chosen per round for the whole batch); w = 0 is a plain AR step (the
root alone, no walk). The first w nodes are always a valid draft: an n-gram proposal is a chain, and
the tree builder emits nodes in score order with every prefix prefix-closed (decode/tree.py), so the
first w nodes are the top-w tree. Whatever w is chosen, the target's own tokens are emitted
(lossless); only the speed changes.

  ngram   the width w maximising (1 + E[A](w)) / t_ngram(w) over the live rows: a row's proposal
          (length k, from a suffix match of length n) is expected to accept sum_{i <= min(w, k)} q^i
          tokens, q = the row's running per-token acceptance of its past n-gram-length-n proposals
          (decayed counts, a prior of 1/2; ngram_update). So a round verifies draft rows only when
          they are expected to pay for their rows, else it is an AR step (w = 0: no match, or matches
          that have not been accepted). Without a cost table (LoopConfig(cost=()), tests): the
          smallest width holding the longest proposal.
  auto    (glance, `--budgets auto`) the width w maximising (1 + E[A](w)) / t(w): E[A](w) is the
          expected accepted length of the top-w tree, sum of exp(score) over its nodes under the
          factorised draft, mapped through a calibration measured on bench records (predicted ->
          observed accepted length); t(w) the measured round cost at width w (decode/calibrate.py),
          the loop's whole round: draft, the tree the loop builds, verify, walk, commit.
          The widths it compiles come from the cost table (RoundCost.auto_set): its 'auto_set' key,
          written by decode/calibrate.py after replaying this policy on calibration rounds for
          every subset of the paying widths, each timed in its own loop (a wider tree is paid for
          in every round, used or not); without that key, the widths at which a round could beat an
          AR step at all (1 + min(w, L) tokens > t(w) AR steps). The tree built per round is the
          widest compiled width, so a width that never pays is never drafted or built.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import pathlib

import jax
import jax.numpy as jnp
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


def smallest_width_holding(need: jax.Array, widths: tuple[int, ...]) -> jax.Array:
  """need int32 [] -> index of the smallest width >= need (the last when none is)."""
  w = jnp.asarray(widths, jnp.int32)
  return jnp.minimum(jnp.sum(w < need), len(widths) - 1).astype(jnp.int32)


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


def best_width(scores: jax.Array, live: jax.Array, widths: tuple[int, ...], cost: tuple[float, ...],
               calib: tuple = ()) -> jax.Array:
  """Index into widths maximising the batch's expected tokens per unit of round cost (int32 [])."""
  ea = expected_accepted(scores, widths, calib)                           # [B, nw]
  tokens = jnp.sum(jnp.where(live[:, None], 1.0 + ea, 0.0), axis=0)       # [nw]
  return jnp.argmax(tokens / jnp.asarray(cost, jnp.float32)).astype(jnp.int32)


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
  # measurement only (decode/calibrate.py): glance-auto compiles auto_set's widths plus this one and
  # always chooses it, so its cost is timed in the loop the policy really runs (same tree width)
  force: int | None = None
  per_width: dict = dataclasses.field(default_factory=dict)  # w -> (predicted, observed) knots
  # table key 'auto_set': the widths glance-auto compiles, chosen by decode/calibrate.py replaying the
  # policy on calibration rounds (choose_auto_set); () = the paying rule (paying_widths)
  compiled: tuple[int, ...] = ()
  # table key 'auto_plain_ar': the replay found no compiled set that beats plain AR at this table's
  # batch, so glance-auto runs the AR loop (no head pass, no verify rows): generate() reads it
  plain_ar: bool = False

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
  return RoundCost(widths, knots, dict(data.get("meta") or {}), path, ngram, per_width=per_width,
                   compiled=tuple(compiled), plain_ar=plain_ar)


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
  bench charges to the method). On the testbed the replay compiles width 15 at batch 1 and 2 and
  says no width beats AR at batch 4 and 8 (`auto_plain_ar`: glance-auto runs the AR loop there)."""
  return _read_default(DEFAULT_TABLES[max(b for b in DEFAULT_TABLES if b <= max(int(batch), 1))])


@functools.lru_cache(maxsize=None)
def _read_default(path: pathlib.Path) -> RoundCost:
  return read_round_cost(path)
