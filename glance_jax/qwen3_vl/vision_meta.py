"""Host-side (numpy) tables the vision tower needs, derived from `grid_thw` alone.

Computing these on the host keeps the jitted tower free of data-dependent shapes: it only sees
arrays of length N (patches). Every table is in the processor's 2x2 merge-block order (as the processor emits patches, not raster order):
for each image, for t, for each merged (row, col) block in raster order, its 2x2 patches.
"""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class VisionMeta:
  pos_index: np.ndarray    # int32 [N, 4]: the 4 bilinear taps into the flattened side x side table
  pos_weight: np.ndarray   # float32 [N, 4]: their weights (align_corners=True)
  rows_cols: np.ndarray    # int32 [N, 2]: unmerged patch (row, col) for the 2-D rope
  segment: np.ndarray      # int32 [N]: attention segment = (image, temporal slice); block-diagonal

  def as_dict(self) -> dict[str, np.ndarray]:
    return dataclasses.asdict(self)


def _block_order(h: int, w: int, m: int) -> tuple[np.ndarray, np.ndarray]:
  """(row, col) of every patch of an h x w grid, in merge-block order."""
  r = np.arange(h).reshape(h // m, 1, m, 1)
  c = np.arange(w).reshape(1, w // m, 1, m)
  rows = np.broadcast_to(r, (h // m, w // m, m, m)).reshape(-1)
  cols = np.broadcast_to(c, (h // m, w // m, m, m)).reshape(-1)
  return rows, cols


def _bilinear_taps(n: int, side: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """align_corners=True source coords for n outputs over a side-long axis: floor, ceil, frac."""
  src = np.linspace(0.0, side - 1, n, dtype=np.float64) if n > 1 else np.zeros((1,))
  lo = np.floor(src).astype(np.int64)
  hi = np.minimum(lo + 1, side - 1)
  return lo, hi, src - lo


def vision_meta(grid_thw: np.ndarray, *, num_position_embeddings: int,
                spatial_merge_size: int) -> VisionMeta:
  grid_thw = np.asarray(grid_thw, np.int64).reshape(-1, 3)
  side = int(round(num_position_embeddings ** 0.5))
  if side * side != num_position_embeddings:
    raise ValueError(f"num_position_embeddings {num_position_embeddings} is not a square")
  m = spatial_merge_size
  idx, wts, rcs, segs = [], [], [], []
  seg = 0
  for t, h, w in grid_thw:
    if h % m or w % m:
      raise ValueError(f"grid {(t, h, w)} is not divisible by spatial_merge_size {m}")
    rows, cols = _block_order(int(h), int(w), m)
    r0, r1, dr = _bilinear_taps(int(h), side)
    c0, c1, dc = _bilinear_taps(int(w), side)
    r0, r1, dr = r0[rows], r1[rows], dr[rows]
    c0, c1, dc = c0[cols], c1[cols], dc[cols]
    i = np.stack([r0 * side + c0, r0 * side + c1, r1 * side + c0, r1 * side + c1], -1)
    wt = np.stack([(1 - dr) * (1 - dc), (1 - dr) * dc, dr * (1 - dc), dr * dc], -1)
    for _ in range(int(t)):
      idx.append(i)
      wts.append(wt)
      rcs.append(np.stack([rows, cols], -1))
      segs.append(np.full((h * w,), seg))
      seg += 1
  if not idx:
    raise ValueError("vision_meta: empty grid_thw")
  return VisionMeta(
      pos_index=np.concatenate(idx).astype(np.int32),
      pos_weight=np.concatenate(wts).astype(np.float32),
      rows_cols=np.concatenate(rcs).astype(np.int32),
      segment=np.concatenate(segs).astype(np.int32))
