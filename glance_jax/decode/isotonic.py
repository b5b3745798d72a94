"""The isotonic (monotone) calibration map of E[A]: pool-adjacent-violators and its piecewise-linear
application (decode/calibrate.py fits it; the loop applies the knots with jnp.interp)."""

from __future__ import annotations

import numpy as np


def pav(x, y) -> tuple[tuple[float, ...], tuple[float, ...]]:
  """Isotonic (non-decreasing) least-squares fit of y on x by pool-adjacent-violators.

  -> knots (xs, ys): each pooled block's mean x and mean y, both non-decreasing; a piecewise-linear
  interpolation through them (flat outside) is the calibration map."""
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  if x.shape != y.shape or x.ndim != 1 or x.size == 0:
    raise ValueError(f"pav needs equal-length non-empty 1-d x and y, got {x.shape} and {y.shape}")
  ux, inv = np.unique(x, return_inverse=True)              # ties in x are one point (weighted)
  w = np.bincount(inv).astype(np.float64)
  sy = np.bincount(inv, weights=y)
  blocks: list[list[float]] = []                           # [sum w, sum w*x, sum y]
  for xi, wi, syi in zip(ux, w, sy):
    blocks.append([wi, wi * xi, syi])
    while len(blocks) > 1 and blocks[-2][2] / blocks[-2][0] > blocks[-1][2] / blocks[-1][0]:
      last = blocks.pop()
      blocks[-1] = [a + b for a, b in zip(blocks[-1], last)]
  xs = tuple(float(b[1] / b[0]) for b in blocks)
  ys = tuple(float(b[2] / b[0]) for b in blocks)
  return xs, ys


def apply(knots, pred) -> np.ndarray:
  pred = np.asarray(pred, np.float64)
  return np.interp(pred, knots[0], knots[1]) if knots else pred
