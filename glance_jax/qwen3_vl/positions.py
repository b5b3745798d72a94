"""3-D (t, h, w) MRoPE positions for Qwen3-VL prompts, in numpy (HF `Qwen3VLModel.get_rope_index`).

Text tokens advance all three axes together; a run of vision tokens with merged grid (t, gh, gw) starting at
`cur` gets (cur + ti, cur + i, cur + j) in t-major raster order and moves `cur` on by max(gh, gw) -- not by
the number of tokens -- so a prompt's largest position is usually below its length. `rope_delta` records the
gap: every token generated after the prompt sits at `index + rope_delta` on all three axes.
"""

from __future__ import annotations

import itertools

import numpy as np

TEXT, IMAGE, VIDEO = 0, 1, 2


def _vision_positions(start: int, t: int, gh: int, gw: int) -> np.ndarray:
  """[3, t*gh*gw]: (start + ti, start + i, start + j), t-major then row-major."""
  tt, hh, ww = np.meshgrid(np.arange(t), np.arange(gh), np.arange(gw), indexing="ij")
  return np.stack([tt.reshape(-1), hh.reshape(-1), ww.reshape(-1)]) + start


def get_rope_index(input_ids: np.ndarray, attention_mask: np.ndarray | None = None,
                   image_grid_thw: np.ndarray | None = None, video_grid_thw: np.ndarray | None = None, *,
                   image_token_id: int, video_token_id: int,
                   spatial_merge_size: int = 2) -> tuple[np.ndarray, np.ndarray]:
  """input_ids [B, S] (+ attention_mask [B, S], 1 = real token) -> (positions int32 [3, B, S], rope_delta int32 [B]).

  Only the tokens kept by attention_mask are numbered (any padding side); padded slots get position 0.
  image_grid_thw [n_images, 3] / video_grid_thw [n_videos, 3] are patch grids (before the spatial merge),
  consumed in order across the batch (row 0's runs first). Each maximal run of image (video) tokens takes the
  next grid; a video grid (t, h, w) counts as t frames of (1, h, w), each its own run. A run whose length
  is not t*h*w // merge**2, or a grid count that disagrees with the runs, raises ValueError.
  rope_delta = max position + 1 - number of real tokens (0 for text-only rows and empty rows).
  """
  input_ids = np.asarray(input_ids)
  if input_ids.ndim != 2:
    raise ValueError(f"input_ids must be [B, S], got shape {input_ids.shape}")
  batch, seq = input_ids.shape
  if attention_mask is None:
    mask = np.ones((batch, seq), bool)
  else:
    mask = np.asarray(attention_mask).astype(bool)
    if mask.shape != input_ids.shape:
      raise ValueError(f"attention_mask shape {mask.shape} != input_ids shape {input_ids.shape}")

  grids = {IMAGE: _grid_rows(image_grid_thw, "image_grid_thw"), VIDEO: _grid_rows(video_grid_thw, "video_grid_thw")}
  # Videos are separated per frame by timestamps in the text, so each frame is its own run.
  grids[VIDEO] = [(1, h, w) for t, h, w in grids[VIDEO] for _ in range(t)]
  used = {IMAGE: 0, VIDEO: 0}
  names = {IMAGE: "image", VIDEO: "video"}

  token_type = np.where(input_ids == image_token_id, IMAGE, np.where(input_ids == video_token_id, VIDEO, TEXT))
  positions = np.zeros((3, batch, seq), np.int32)
  deltas = np.zeros((batch,), np.int32)
  for b in range(batch):
    types = token_type[b][mask[b]]
    if types.size == 0:
      continue
    cur, chunks, offset = 0, [], 0
    for kind, group in itertools.groupby(types.tolist()):
      n = sum(1 for _ in group)
      if kind == TEXT:
        chunks.append(np.broadcast_to(np.arange(cur, cur + n), (3, n)))
        cur += n
      else:
        if used[kind] >= len(grids[kind]):
          raise ValueError(f"row {b}: {names[kind]} token run at index {offset} has no {names[kind]}_grid_thw "
                           f"row left ({len(grids[kind])} given)")
        t, h, w = grids[kind][used[kind]]
        used[kind] += 1
        gh, gw = h // spatial_merge_size, w // spatial_merge_size
        if n != t * gh * gw:
          raise ValueError(f"row {b}: {names[kind]} token run at index {offset} has {n} tokens but grid "
                           f"({t}, {h}, {w}) needs {t * gh * gw}")
        chunks.append(_vision_positions(cur, t, gh, gw))
        cur += max(gh, gw)
      offset += n
    row = np.concatenate(chunks, axis=1)  # [3, n_valid]
    positions[:, b, mask[b]] = row
    deltas[b] = row.max() + 1 - types.size
  for kind in (IMAGE, VIDEO):
    if used[kind] != len(grids[kind]):
      raise ValueError(f"{names[kind]}_grid_thw has {len(grids[kind])} rows (videos: frames) but the prompts "
                       f"have {used[kind]} {names[kind]} token runs")
  return positions, deltas


def _grid_rows(grid: np.ndarray | None, name: str) -> list[tuple[int, int, int]]:
  if grid is None:
    return []
  grid = np.asarray(grid)
  if grid.ndim != 2 or grid.shape[1] != 3:
    raise ValueError(f"{name} must be [n, 3], got shape {grid.shape}")
  return [tuple(int(v) for v in row) for row in grid]


def decode_positions(index: np.ndarray | int, rope_delta: np.ndarray) -> np.ndarray:
  """Positions of tokens after the prompt: index [B, K] (or [B], or a scalar) -> int32 [3, B, K].

  `index` is the token's 0-based index among the row's real tokens (prompt length for the first generated
  token, and so on for every drafted/accepted token); its position is index + rope_delta[b] on all three
  axes, which is HF's `cache_len + arange + rope_deltas`.
  """
  delta = np.asarray(rope_delta, np.int64).reshape(-1)
  index = np.asarray(index, np.int64)
  if index.ndim == 0:
    index = np.broadcast_to(index, (delta.shape[0], 1))
  elif index.ndim == 1:
    index = index[:, None]
  pos = (index + delta[:, None]).astype(np.int32)  # [B, K]
  return np.broadcast_to(pos[None], (3, *pos.shape)).copy()
