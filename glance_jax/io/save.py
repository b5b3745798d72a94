"""Writing a Hugging Face safetensors checkpoint (one file, or shards + index) with save_file.

Files are written by `safetensors.numpy.save_file` under a temp name and renamed, the index last,
so a crash never leaves a partial file under a final name. Host memory holds one shard at a time
(save_file takes a whole file's tensors), which `max_shard_bytes` bounds.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import pathlib
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from safetensors.numpy import save_file

from glance_jax.io.errors import CheckpointError, problems_message
from glance_jax.io.format import NP_TO_ST

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike
_DEFAULT_METADATA = {"format": "pt"}  # transformers refuses shards without a known format.


@dataclasses.dataclass(frozen=True)
class _SaveItem:
  key: str
  value: Any  # The caller's array; converted to host memory only when its shard is written.
  shape: tuple[int, ...]
  dtype: np.dtype

  @property
  def nbytes(self) -> int:
    return math.prod(self.shape) * self.dtype.itemsize


def _save_items(tensors: Mapping[str, Any]) -> list[_SaveItem]:
  """Shapes and dtypes without pulling device arrays to the host (that happens per shard)."""
  items, problems = [], []
  for key, value in tensors.items():
    if not isinstance(key, str) or not key or key == "__metadata__":
      problems.append(f"invalid key {key!r}")
      continue
    if not (hasattr(value, "shape") and hasattr(value, "dtype")):
      value = np.asarray(value)
    dtype = np.dtype(value.dtype).newbyteorder("=")
    if dtype not in NP_TO_ST:
      problems.append(f"'{key}': dtype {dtype.name} has no safetensors equivalent")
      continue
    items.append(_SaveItem(key, value, tuple(int(d) for d in value.shape), dtype))
  if problems:
    raise CheckpointError(problems_message("cannot save tensors", problems))
  return items


def _plan_shards(items: Sequence[_SaveItem], max_shard_bytes: int | None) -> list[list[_SaveItem]]:
  """Greedy in caller order, like transformers; a tensor larger than the limit gets its own."""
  if max_shard_bytes is None or sum(i.nbytes for i in items) <= max_shard_bytes:
    return [list(items)]
  shards: list[list[_SaveItem]] = [[]]
  size = 0
  for item in items:
    if shards[-1] and size + item.nbytes > max_shard_bytes:
      shards.append([])
      size = 0
    shards[-1].append(item)
    size += item.nbytes
  return shards


def _host(item: _SaveItem) -> np.ndarray:
  """The item's data as a C-contiguous host array (what save_file needs)."""
  try:
    host = np.asarray(item.value)
  except Exception as e:  # e.g. a multi-process array that is not fully addressable.
    raise CheckpointError(f"'{item.key}': cannot copy to host: {type(e).__name__}: {e}") from e
  # np.require, not np.ascontiguousarray, which turns 0-d arrays into 1-d ones.
  host = np.require(host.astype(item.dtype, copy=False), requirements="C")
  if host.shape != item.shape:
    raise CheckpointError(f"'{item.key}': shape changed from {item.shape} to {host.shape}")
  return host


def _atomic_write(path: pathlib.Path, write: Callable[[pathlib.Path], None]) -> None:
  """`write(tmp)` to a temp file beside `path`, fsync, then rename: readers see all or nothing."""
  tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
  try:
    write(tmp)
    with open(tmp, "rb+") as f:
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    tmp.unlink(missing_ok=True)
    raise


def write_json(path: str | os.PathLike, obj) -> pathlib.Path:
  """obj as indented, key-sorted JSON at `path`, atomically (a config.json beside the tensors)."""
  path = pathlib.Path(path)
  text = json.dumps(obj, indent=2, sort_keys=True) + "\n"
  _atomic_write(path, lambda tmp: tmp.write_text(text))
  return path


def _write_shard(path: pathlib.Path, items: Sequence[_SaveItem],
                 metadata: Mapping[str, str]) -> None:
  _atomic_write(path, lambda tmp: save_file({i.key: _host(i) for i in items}, str(tmp),
                                            metadata=dict(metadata)))


def _fsync_dir(path: pathlib.Path) -> None:
  """Makes the renames durable; best effort since not every OS/filesystem allows it."""
  try:
    fd = os.open(path, os.O_RDONLY)
  except OSError:
    return
  try:
    os.fsync(fd)
  except OSError:
    pass
  finally:
    os.close(fd)


def save_tensors(
    out_dir: PathLike,
    tensors: Mapping[str, Any],
    *,
    max_shard_bytes: int | None = None,
    metadata: Mapping[str, str] | None = None,
    prefix: str = "model",
) -> list[pathlib.Path]:
  """Writes `tensors` (jax or numpy arrays, bf16 included) as a Hugging Face safetensors checkpoint.

  One `<prefix>.safetensors`, or, when the total exceeds `max_shard_bytes`,
  `<prefix>-0000i-of-0000N.safetensors` shards + `<prefix>.safetensors.index.json`. `metadata`
  is merged over {"format": "pt"}, which transformers requires to read the files. Afterwards,
  leftovers of the other layout (a stale single file or stale shards with this prefix) are
  removed so readers cannot pick up an old checkpoint. Returns the paths written.
  """
  meta = {**_DEFAULT_METADATA, **dict(metadata or {})}
  bad_meta = [k for k, v in meta.items() if not (isinstance(k, str) and isinstance(v, str))]
  if bad_meta:
    raise CheckpointError(f"metadata must map str to str; offending keys: {bad_meta}")
  if max_shard_bytes is not None and max_shard_bytes <= 0:
    raise CheckpointError(f"max_shard_bytes must be positive, got {max_shard_bytes}")
  root = pathlib.Path(out_dir).expanduser()
  root.mkdir(parents=True, exist_ok=True)
  items = _save_items(tensors)
  shards = _plan_shards(items, max_shard_bytes)

  written: list[pathlib.Path] = []
  if len(shards) == 1:
    path = root / f"{prefix}.safetensors"
    _write_shard(path, shards[0], meta)
    written.append(path)
  else:
    weight_map: dict[str, str] = {}
    for i, shard in enumerate(shards):
      path = root / f"{prefix}-{i + 1:05d}-of-{len(shards):05d}.safetensors"
      _write_shard(path, shard, meta)
      written.append(path)
      weight_map.update({item.key: path.name for item in shard})
    index = {"metadata": {"total_size": sum(i.nbytes for i in items)},
             "weight_map": dict(sorted(weight_map.items()))}
    index_path = root / f"{prefix}.safetensors.index.json"
    _atomic_write(index_path, lambda tmp: tmp.write_text(json.dumps(index, indent=2) + "\n"))
    written.append(index_path)
  _remove_stale(root, prefix, keep=set(written))
  _fsync_dir(root)
  return written


def _remove_stale(root: pathlib.Path, prefix: str, keep: set[pathlib.Path]) -> None:
  """Deletes this prefix's checkpoint files not written now (only our exact naming pattern)."""
  shard_re = re.compile(re.escape(prefix) + r"-\d{5}-of-\d{5}\.safetensors")
  candidates = [root / f"{prefix}.safetensors", root / f"{prefix}.safetensors.index.json"]
  candidates += [p for p in root.iterdir() if shard_re.fullmatch(p.name)]
  for path in candidates:
    if path not in keep and path.is_file():
      logger.info("removing stale checkpoint file %s", path)
      path.unlink()
