"""Training batches: per-example numpy -> one fixed-shape `TrainBatch`, and an on-disk feature cache.

Every array of a batch has a static shape (rows right-padded to `seq_len`, image patches padded to
a patch budget `max_patches`), so the jitted train step compiles once for a whole run. The vision
tower sees the patches of all rows concatenated in row order (the order `get_rope_index` and
`scatter_visual` consume them). Padded patches are zeros with zero position weights and a segment
id of their own: the tower's block-diagonal attention keeps them away from every real patch, so
real patches come out exactly as without padding, and their merged rows sit after the real ones,
where no image placeholder ever reads them.

Letters: B rows, S seq_len, Np patch budget, P = C*T*P*P pixel features per patch (1536).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
import re
from typing import Sequence

import flax.struct
import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding

from glance_jax import sharding as shd
from glance_jax.config import Qwen3VLConfig
from glance_jax.qwen3_vl.positions import get_rope_index
from glance_jax.qwen3_vl.prompt import Prompt
from glance_jax.qwen3_vl.vision_meta import vision_meta


@dataclasses.dataclass(frozen=True)
class Example:
  """One training sequence: a prompt followed by the TARGET's own response (DFlash trains on
  target-regenerated data), placeholders already expanded as the processor does."""
  input_ids: np.ndarray                      # int [T]
  loss_mask: np.ndarray                      # bool [T]: True on response tokens
  pixel_values: np.ndarray | None = None     # float32 [N, P], this example's images in order
  image_grid_thw: np.ndarray | None = None   # int [n_images, 3]
  example_id: str | None = None              # key into a FeatureCache


@flax.struct.dataclass
class TrainBatch:
  input_ids: jax.Array                 # int32 [B, S], right-padded with pad_id
  loss_mask: jax.Array                 # bool [B, S]: response tokens (never image placeholders)
  attention_mask: jax.Array            # bool [B, S]: real tokens
  positions: jax.Array                 # int32 [3, B, S]: the target's MRoPE positions; padding 0
  pixel_values: jax.Array | None = None  # float32 [Np, P]; None for a text-only layout
  pos_index: jax.Array | None = None     # int32 [Np, 4]   (vision_meta, padded)
  pos_weight: jax.Array | None = None    # float32 [Np, 4]
  rows_cols: jax.Array | None = None     # int32 [Np, 2]
  segment: jax.Array | None = None       # int32 [Np]: padded patches get one unused segment id

  @property
  def batch_size(self) -> int:
    return self.input_ids.shape[0]

  @property
  def seq_len(self) -> int:
    return self.input_ids.shape[1]

  @property
  def vision_meta(self) -> dict[str, jax.Array] | None:
    if self.pixel_values is None:
      return None
    return dict(pos_index=self.pos_index, pos_weight=self.pos_weight, rows_cols=self.rows_cols,
                segment=self.segment)

  @property
  def prompt(self) -> Prompt:
    """The sequences as the target's prompt forward reads them (qwen3_vl.prompt.Prompt)."""
    return Prompt(self.input_ids, self.attention_mask, self.positions, self.pixel_values, self.vision_meta)


def collate(examples: Sequence[Example], cfg: Qwen3VLConfig, *, seq_len: int,
            max_patches: int | None = None, pad_id: int = 0, truncate: bool = False) -> TrainBatch:
  """Examples -> a TrainBatch of numpy arrays (`shard_batch` puts it on devices).

  `max_patches` fixes the patch budget; give it whenever any batch of the run may hold an image,
  so that text-only batches get the same (all-padding) vision arrays and the step never
  retraces. Sequences longer than `seq_len` are an error unless `truncate`, which cuts the tail
  (refused if the cut drops image placeholders, whose grids would then not match).
  Loss-mask bits on image/video placeholders are cleared: those rows are not tokens to draft.
  """
  if not examples:
    raise ValueError("collate: no examples")
  b = len(examples)
  vis_ids = (cfg.image_token_id, cfg.video_token_id)
  ids = np.full((b, seq_len), pad_id, np.int64)
  loss = np.zeros((b, seq_len), bool)
  valid = np.zeros((b, seq_len), bool)
  pixels, grids = [], []
  for r, ex in enumerate(examples):
    x = np.asarray(ex.input_ids).reshape(-1)
    m = np.asarray(ex.loss_mask).reshape(-1).astype(bool)
    if x.shape != m.shape:
      raise ValueError(f"example {r}: input_ids {x.shape} and loss_mask {m.shape} differ in length")
    if x.size > seq_len:
      if not truncate:
        raise ValueError(f"example {r} has {x.size} tokens > seq_len {seq_len} (pass truncate=True "
                         f"to cut the tail)")
      if np.isin(x[seq_len:], vis_ids).any():
        raise ValueError(f"example {r}: truncating to {seq_len} tokens would drop image placeholders")
      x, m = x[:seq_len], m[:seq_len]
    n = x.size
    ids[r, :n], valid[r, :n] = x, True
    loss[r, :n] = m & ~np.isin(x, vis_ids)
    if ex.pixel_values is not None:
      if ex.image_grid_thw is None:
        raise ValueError(f"example {r} has pixel_values but no image_grid_thw")
      pixels.append(np.asarray(ex.pixel_values, np.float32))
      grids.append(np.asarray(ex.image_grid_thw, np.int64).reshape(-1, 3))
  grid = np.concatenate(grids) if grids else None
  pos, _ = get_rope_index(ids, valid, grid, None, image_token_id=cfg.image_token_id,
                          video_token_id=cfg.video_token_id, spatial_merge_size=cfg.spatial_merge_size)
  batch = TrainBatch(input_ids=ids.astype(np.int32), loss_mask=loss, attention_mask=valid,
                     positions=pos.astype(np.int32))
  if grid is None and max_patches is None:
    return batch
  if max_patches is None:
    raise ValueError("collate: examples carry images but max_patches (the static patch budget) "
                     "is not set")
  return batch.replace(**_padded_vision(pixels, grid, cfg, max_patches))


def _padded_vision(pixels: list[np.ndarray], grid: np.ndarray | None, cfg: Qwen3VLConfig,
                   max_patches: int) -> dict[str, np.ndarray]:
  """Concatenated patches + vision_meta tables, padded to `max_patches` rows."""
  v = cfg.vision
  unit = v.spatial_merge_size**2
  if max_patches <= 0 or max_patches % unit:
    raise ValueError(f"max_patches {max_patches} must be a positive multiple of "
                     f"spatial_merge_size^2 = {unit} (merged rows must not straddle the padding)")
  out = dict(pixel_values=np.zeros((max_patches, v.patch_dim), np.float32),
             pos_index=np.zeros((max_patches, 4), np.int32),
             pos_weight=np.zeros((max_patches, 4), np.float32),
             rows_cols=np.zeros((max_patches, 2), np.int32),
             segment=np.zeros((max_patches,), np.int32))
  n, pad_segment = 0, 0
  if grid is not None:
    px = np.concatenate(pixels)
    n = px.shape[0]
    if n > max_patches:
      raise ValueError(f"batch has {n} image patches > max_patches {max_patches}")
    if px.shape[1] != v.patch_dim:
      raise ValueError(f"pixel_values rows have {px.shape[1]} features, the vision tower takes "
                       f"{v.patch_dim}")
    meta = vision_meta(grid, num_position_embeddings=v.num_position_embeddings,
                       spatial_merge_size=v.spatial_merge_size)
    if meta.segment.shape[0] != n:
      raise ValueError(f"image_grid_thw describes {meta.segment.shape[0]} patches, pixel_values "
                       f"has {n}")
    out["pixel_values"][:n] = px
    for k, a in meta.as_dict().items():
      out[k][:n] = a
    pad_segment = int(meta.segment.max()) + 1
  out["segment"][n:] = pad_segment
  return out


def batch_shardings(batch: TrainBatch, mesh: Mesh,
                    rules=shd.TRAIN_RULES) -> TrainBatch:
  """Rows on the batch axis (by the training rules: over data x fsdp); patch arrays replicated,
  since the patches of all rows form one sequence for the vision tower."""
  b, s = batch.input_ids.shape
  row = NamedSharding(mesh, shd.logical_to_spec((shd.BATCH, shd.LENGTH), (b, s), mesh, rules))
  pos = NamedSharding(mesh, shd.logical_to_spec((None, shd.BATCH, shd.LENGTH), (3, b, s), mesh,
                                                rules))
  rep = NamedSharding(mesh, shd.logical_to_spec(None, (), mesh, rules))
  vis = None if batch.pixel_values is None else rep
  return TrainBatch(input_ids=row, loss_mask=row, attention_mask=row, positions=pos,
                    pixel_values=vis, pos_index=vis, pos_weight=vis, rows_cols=vis, segment=vis)


def shard_batch(batch: TrainBatch, mesh: Mesh | None = None, rules=shd.TRAIN_RULES) -> TrainBatch:
  """Host batch -> device arrays (sharded over `mesh` when given). Single process only: with
  several processes each one must build only its own shards (jax.make_array_from_callback over
  `batch_shardings`)."""
  if mesh is None:
    return jax.device_put(batch)
  return jax.device_put(batch, batch_shardings(batch, mesh, rules))


# --- on-disk feature cache ---------------------------------------------------------------------

class FeatureCache:
  """Target features per example, one .npy each, for small runs that revisit the same examples.

  Stores the valid rows only ([T, F], the concatenated taps in target_layer_ids order), in
  float32 or float16 (numpy has no bfloat16 .npy). `meta.json` records the tap layers and width,
  so features of another head layout are refused instead of silently mixed.
  """

  def __init__(self, directory: str | os.PathLike, *, tap_layers: Sequence[int],
               dtype: str = "float32"):
    if dtype not in ("float32", "float16"):
      raise ValueError(f"FeatureCache dtype must be float32 or float16, got {dtype!r}")
    self.dir = pathlib.Path(directory)
    self.dir.mkdir(parents=True, exist_ok=True)
    self.tap_layers = tuple(int(i) for i in tap_layers)
    self.dtype = np.dtype(dtype)
    self._meta_path = self.dir / "meta.json"
    self.feature_dim: int | None = None
    if self._meta_path.is_file():
      meta = json.loads(self._meta_path.read_text())
      if tuple(meta["tap_layers"]) != self.tap_layers:
        raise ValueError(f"{self.dir}: cached features tap layers {tuple(meta['tap_layers'])}, "
                         f"this head taps {self.tap_layers}")
      self.feature_dim = meta.get("feature_dim")

  def path(self, example_id: str) -> pathlib.Path:
    s = str(example_id)
    name = s if re.fullmatch(r"[A-Za-z0-9_.-]{1,100}", s) else hashlib.sha1(s.encode()).hexdigest()
    return self.dir / f"{name}.npy"

  def __contains__(self, example_id: str) -> bool:
    return self.path(example_id).is_file()

  def put(self, example_id: str, feats: np.ndarray) -> None:
    """feats [T, F]: the example's valid rows. Written atomically (tmp file + rename)."""
    feats = np.asarray(feats)
    if feats.ndim != 2:
      raise ValueError(f"features must be [tokens, width], got shape {feats.shape}")
    if self.feature_dim is None:
      self.feature_dim = int(feats.shape[1])
      self._meta_path.write_text(json.dumps(dict(tap_layers=list(self.tap_layers),
                                                 feature_dim=self.feature_dim)))
    elif feats.shape[1] != self.feature_dim:
      raise ValueError(f"features of width {feats.shape[1]}, the cache holds width {self.feature_dim}")
    path = self.path(example_id)
    tmp = path.with_suffix(".tmp.npy")
    np.save(tmp, feats.astype(np.float32).astype(self.dtype))
    os.replace(tmp, path)

  def get(self, example_id: str) -> np.ndarray:
    path = self.path(example_id)
    if not path.is_file():
      raise KeyError(f"no cached features for example {example_id!r} in {self.dir}")
    return np.load(path)

  def put_batch(self, example_ids: Sequence[str], feats: np.ndarray, lengths: np.ndarray) -> None:
    """feats [B, S, F] from `target_features`, lengths [B] real tokens per row."""
    feats = np.asarray(feats, np.float32)
    for r, (i, n) in enumerate(zip(example_ids, np.asarray(lengths))):
      self.put(i, feats[r, :int(n)])

  def collate(self, example_ids: Sequence[str], seq_len: int) -> np.ndarray:
    """float32 [B, S, F], rows zero-padded (padded rows are never visible to any block)."""
    rows = [self.get(i) for i in example_ids]
    f = rows[0].shape[1]
    out = np.zeros((len(rows), seq_len, f), np.float32)
    for r, x in enumerate(rows):
      n = min(x.shape[0], seq_len)
      out[r, :n] = x[:n]
    return out
