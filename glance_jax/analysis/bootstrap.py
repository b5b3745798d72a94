"""Paired bootstrap intervals for benchmark comparisons.

Every method decodes the same prompts, and a prompt's difficulty (its length, its entropy) moves
all methods' times together. Resampling prompts with the same indices for both methods keeps that
pairing, so the interval reflects the spread of the ratio, not the spread of prompt difficulty.
Intervals are percentile intervals of the resampled statistic; the point is the full-sample value.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

import numpy as np

_CHUNK_ELEMS = 1 << 22  # resampled indices held at once (bounds memory for many prompts)


def _paired(x: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
  x = np.asarray(x, dtype=np.float64).ravel()
  y = np.asarray(y, dtype=np.float64).ravel()
  if x.shape != y.shape:
    raise ValueError(f"paired samples differ in length: {x.size} vs {y.size}")
  if x.size < 2:
    raise ValueError("need at least 2 paired observations")
  if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
    raise ValueError("non-finite values")
  return x, y


def _boot_means(rng: np.random.Generator, x: np.ndarray, y: np.ndarray, n_boot: int
                ) -> tuple[np.ndarray, np.ndarray]:
  """Means of x and y over n_boot resamples of the prompt indices, shared by x and y."""
  n = x.size
  mx, my = np.empty(n_boot), np.empty(n_boot)
  step = max(1, _CHUNK_ELEMS // n)
  for s in range(0, n_boot, step):
    idx = rng.integers(0, n, size=(min(step, n_boot - s), n))
    mx[s:s + idx.shape[0]] = x[idx].mean(1)
    my[s:s + idx.shape[0]] = y[idx].mean(1)
  return mx, my


def _interval(stats: np.ndarray, alpha: float) -> tuple[float, float]:
  if not 0 < alpha < 1:
    raise ValueError(f"alpha must be in (0, 1), got {alpha}")
  lo, hi = np.quantile(stats, [alpha / 2, 1 - alpha / 2])
  return float(lo), float(hi)


def paired_bootstrap_ratio(base_times: Any, method_times: Any, *, n_boot: int = 2000,
                           alpha: float = 0.05, seed: int = 0) -> tuple[float, float, float]:
  """Speedup sum(base) / sum(method) over prompts (= ratio of mean times), with its paired
  percentile (1 - alpha) interval: (point, lo, hi). Times must be > 0."""
  b, m = _paired(base_times, method_times)
  if np.any(b <= 0) or np.any(m <= 0):
    raise ValueError("times must be > 0")
  mb, mm = _boot_means(np.random.default_rng(seed), b, m, n_boot)
  return (float(b.sum() / m.sum()), *_interval(mb / mm, alpha))


def paired_bootstrap_diff(x: Any, y: Any, *, n_boot: int = 2000, alpha: float = 0.05,
                          seed: int = 0) -> tuple[float, float, float]:
  """mean(x) - mean(y) over paired observations, with its paired percentile interval."""
  x, y = _paired(x, y)
  mx, my = _boot_means(np.random.default_rng(seed), x, y, n_boot)
  return (float(x.mean() - y.mean()), *_interval(mx - my, alpha))


def paired_bootstrap_ratio_of_ratios(num_x: Any, den_x: Any, num_y: Any, den_y: Any, *,
                                     n_boot: int = 2000, alpha: float = 0.05, seed: int = 0
                                     ) -> tuple[float, float, float]:
  """(sum num_x / sum den_x) / (sum num_y / sum den_y) over prompts, with its paired percentile
  interval (all four arrays resampled with the same prompt indices). E.g. the tree-over-chain tau
  ratio: num = a prompt's sum of (a + 1) over its rounds, den = its rounds, x = tree, y = chain.
  Denominator sums must be > 0; resamples whose sums are 0 are left out of the interval."""
  nx, dx = _paired(num_x, den_x)
  ny, dy = _paired(num_y, den_y)
  if nx.size != ny.size:
    raise ValueError(f"paired samples differ in length: {nx.size} vs {ny.size}")
  if dx.sum() <= 0 or dy.sum() <= 0 or nx.sum() <= 0 or ny.sum() <= 0:
    raise ValueError("sums must be > 0")
  # Two generators from one seed draw the same index matrices: x's and y's resamples are paired.
  mnx, mdx = _boot_means(np.random.default_rng(seed), nx, dx, n_boot)
  mny, mdy = _boot_means(np.random.default_rng(seed), ny, dy, n_boot)
  with np.errstate(divide="ignore", invalid="ignore"):
    stats = (mnx / mdx) / (mny / mdy)
  stats = stats[np.isfinite(stats)]
  point = float((nx.sum() / dx.sum()) / (ny.sum() / dy.sum()))
  return (point, *_interval(stats, alpha)) if stats.size else (point, math.nan, math.nan)


def geometric_mean(values: Any) -> float:
  """exp(mean(log v)): the summary of per-task speedups that treats 2x and 0.5x symmetrically."""
  v = np.asarray(values, dtype=np.float64).ravel()
  if v.size == 0 or np.any(~np.isfinite(v)) or np.any(v <= 0):
    raise ValueError("geometric_mean needs a non-empty array of finite values > 0")
  return float(np.exp(np.mean(np.log(v))))


def bootstrap_geomean_ratio(pairs_by_task: Mapping[str, Sequence[Any]], *, n_boot: int = 2000,
                            alpha: float = 0.05, seed: int = 0) -> tuple[float, float, float]:
  """Geometric mean over tasks of the per-task speedup sum(base) / sum(method), with a percentile
  interval from resampling prompts within each task (tasks independent, each task paired).

  pairs_by_task: task -> (base_times, method_times). The tasks themselves are fixed, not
  resampled: the interval is for this benchmark suite."""
  if not pairs_by_task:
    raise ValueError("no tasks")
  rng = np.random.default_rng(seed)
  log_point = 0.0
  log_boot = np.zeros(n_boot)
  for base, method in pairs_by_task.values():
    b, m = _paired(base, method)
    if np.any(b <= 0) or np.any(m <= 0):
      raise ValueError("times must be > 0")
    mb, mm = _boot_means(rng, b, m, n_boot)
    log_point += math.log(b.sum() / m.sum())
    log_boot += np.log(mb / mm)
  k = len(pairs_by_task)
  return (math.exp(log_point / k), *_interval(np.exp(log_boot / k), alpha))


def compare_methods(times_by_method: Mapping[str, Any], method: str, base: str = "ar", *,
                    n_boot: int = 2000, alpha: float = 0.05, seed: int = 0,
                    ratio: Callable[..., tuple[float, float, float]] = paired_bootstrap_ratio
                    ) -> dict[str, Any]:
  """Speedup of `method` against `base` and against the best other method (lowest total time
  among all methods but `method`; may be `base`), each with a paired bootstrap interval.

  The best other method is chosen on the full sample and then held fixed, as a results table
  does; the interval does not account for that choice."""
  if method not in times_by_method or base not in times_by_method:
    raise ValueError(f"need times for {method!r} and {base!r}; have {sorted(times_by_method)}")
  others = {k: float(np.sum(v)) for k, v in times_by_method.items() if k != method}
  best = min(others, key=others.get)
  out: dict[str, Any] = {}
  for key, other in (("vs_base", base), ("vs_best_other", best)):
    point, lo, hi = ratio(times_by_method[other], times_by_method[method], n_boot=n_boot,
                          alpha=alpha, seed=seed)
    out[key] = {"other": other, "speedup": point, "lo": lo, "hi": hi}
  return out
