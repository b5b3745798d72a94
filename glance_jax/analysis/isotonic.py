"""Isotonic (monotone) least-squares regression by pool-adjacent-violators, once for the library.

Two users: the entropy law's descriptive fit (analysis/entropy_law.py: accepted length against
root entropy, non-increasing, weighted by decile counts) and glance-auto's E[A] calibration
(bench/calibrate.py: observed accepted length against the predicted one, non-decreasing; the decode
loop applies the knots with jnp.interp).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _pool(x: Any, y: Any, weights: Any, decreasing: bool):
  """-> (unique x [U], group of each input [n], per block: (sum w, sum w*x, fitted value, #groups)).
  Tied x are one point (their weights summed) before pooling."""
  x = np.asarray(x, dtype=np.float64).ravel()
  y = np.asarray(y, dtype=np.float64).ravel()
  w = np.ones_like(y) if weights is None else np.asarray(weights, dtype=np.float64).ravel()
  if not (x.shape == y.shape == w.shape):
    raise ValueError(f"x, y and weights must have equal length, got {x.shape}, {y.shape}, {w.shape}")
  if np.any(w <= 0):
    raise ValueError("weights must be > 0")
  ux, group = np.unique(x, return_inverse=True)
  gw = np.bincount(group, w, ux.size)
  gy = np.bincount(group, w * y, ux.size) / gw
  sign = -1.0 if decreasing else 1.0
  blocks: list[list[float]] = []                           # [sum w, sum w*x, sum w*sign*y, groups]
  for xi, wi, yi in zip(ux, gw, sign * gy):
    blocks.append([wi, wi * xi, wi * yi, 1])
    while len(blocks) > 1 and blocks[-2][2] / blocks[-2][0] > blocks[-1][2] / blocks[-1][0]:
      last = blocks.pop()                                  # order violated: pool the last two
      blocks[-1] = [a + b for a, b in zip(blocks[-1], last)]
  return ux, group, [(b[0], b[1], sign * b[2] / b[0], b[3]) for b in blocks]


def isotonic_fit(x: Any, y: Any, weights: Any = None, decreasing: bool = True) -> np.ndarray:
  """Weighted least-squares monotone fit of y on x; fitted values in the input order. Tied x share
  one fitted value. Weights must be > 0."""
  if np.asarray(y).size == 0:
    return np.asarray(y, np.float64).ravel().copy()
  _, group, blocks = _pool(x, y, weights, decreasing)
  fitted = np.repeat([b[2] for b in blocks], [b[3] for b in blocks])
  return fitted[group]


def pav(x, y) -> tuple[tuple[float, ...], tuple[float, ...]]:
  """Non-decreasing fit of y on x -> knots (xs, ys): each pooled block's mean x and mean y, both
  non-decreasing; the piecewise-linear interpolation through them (flat outside) is the map."""
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  if x.shape != y.shape or x.ndim != 1 or x.size == 0:
    raise ValueError(f"pav needs equal-length non-empty 1-d x and y, got {x.shape} and {y.shape}")
  _, _, blocks = _pool(x, y, None, decreasing=False)
  return tuple(float(b[1] / b[0]) for b in blocks), tuple(float(b[2]) for b in blocks)


def apply(knots, pred) -> np.ndarray:
  """The calibration map of `pav`'s knots at `pred` (identity for empty knots)."""
  pred = np.asarray(pred, np.float64)
  return np.interp(pred, knots[0], knots[1]) if knots else pred
