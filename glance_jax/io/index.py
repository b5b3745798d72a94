"""Indexing a checkpoint from its headers alone: every tensor's file, shape, dtype and byte range.

An 8B checkpoint is ~17.5 GB, so every mistake must be caught from the headers (a few KB per
shard) before minutes of reading, and reported once, on one line, naming the file / key / shape
at fault: all problems of all shards are collected and raised together.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
from collections.abc import Iterable, Mapping

from safetensors import safe_open

from glance_jax.io import diagnose
from glance_jax.io.errors import CheckpointError, problems_message, truncated_list
from glance_jax.io.format import ST_TO_NP, TensorEntry

PathLike = str | os.PathLike


def tensor_nbytes(entries: Mapping[str, TensorEntry] | Iterable[TensorEntry]) -> int:
  """Total data bytes of `entries` (a mapping from `index_checkpoint` or any iterable)."""
  values = entries.values() if isinstance(entries, Mapping) else entries
  return sum(e.nbytes for e in values)


def _read_file(path: pathlib.Path, problems: list[str]) -> dict[str, TensorEntry] | None:
  """Entries of one safetensors file as the package reads its header; problems appended.

  The package validates sizes, offsets and coverage; byte offsets follow from its key order by
  offset (it does not expose them) and from the file size, since it has checked the data region
  is tiled exactly up to the end of the file.
  """
  try:
    with safe_open(str(path), framework="numpy") as f:
      keys = f.offset_keys()  # sorted by data offset
      info = {k: (f.get_slice(k).get_dtype(), tuple(f.get_slice(k).get_shape())) for k in keys}
  except Exception as e:  # SafetensorError, OSError: explain from the header bytes.
    problems.append(diagnose.explain(path, e))
    return None
  duplicate = diagnose.duplicate_keys(path)
  if duplicate:
    problems.append(duplicate)
    return None
  unsupported = [f"{path}: key '{k}': unsupported dtype {d!r}" for k, (d, _) in info.items()
                 if d not in ST_TO_NP]
  if unsupported:
    problems.extend(unsupported)
    return None
  sizes = {k: ST_TO_NP[d].itemsize * math.prod(shape) for k, (d, shape) in info.items()}
  position = path.stat().st_size - sum(sizes.values())
  entries = {}
  for key in keys:
    dtype, shape = info[key]
    entries[key] = TensorEntry(key, path, shape, dtype, position, position + sizes[key])
    position += sizes[key]
  return entries



def _index_sharded(root: pathlib.Path, index_path: pathlib.Path,
                   problems: list[str]) -> dict[str, TensorEntry]:
  """Entries of a sharded checkpoint, cross-checking the index against the shard headers."""
  try:
    index = json.loads(index_path.read_text(encoding="utf-8"))
    weight_map = index["weight_map"]
    if not (isinstance(weight_map, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items())):
      raise ValueError("weight_map is not a {key: file name} object")
  except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as e:
    problems.append(f"{index_path}: unparsable index ({type(e).__name__}: {e})")
    return {}

  shard_entries: dict[str, dict[str, TensorEntry] | None] = {}
  for name in sorted(set(weight_map.values())):
    path = root / name
    if os.path.isabs(name) or not path.is_file():
      keys = [k for k, v in weight_map.items() if v == name]
      problems.append(f"{index_path.name} names shard {name} ({len(keys)} keys, e.g. '{keys[0]}') "
                      f"but {path} is missing")
      shard_entries[name] = None
      continue
    shard_entries[name] = _read_file(path, problems)

  # Every key lives in exactly one shard, and it is the one the index says.
  owners: dict[str, list[str]] = {}
  for name, entries in shard_entries.items():
    for key in entries or ():
      owners.setdefault(key, []).append(name)
  for key, names in sorted(owners.items()):
    if len(names) > 1:
      problems.append(f"duplicate key '{key}' in shards {', '.join(names)}")
    elif key not in weight_map:
      problems.append(f"key '{key}' in shard {names[0]} is not listed in {index_path.name}")
  for key, name in sorted(weight_map.items()):
    if shard_entries.get(name) is not None and key not in shard_entries[name]:
      problems.append(f"{index_path.name} maps '{key}' to {name}, which does not contain it")

  return {key: shard_entries[name][key] for key, name in weight_map.items()
          if shard_entries.get(name) is not None and key in shard_entries[name]}


def index_checkpoint(checkpoint_dir: PathLike, prefix: str = "model") -> dict[str, TensorEntry]:
  """Every tensor's file, shape, dtype and byte range (sorted by key), reading only the headers.

  Looks for `<prefix>.safetensors.index.json` (+ the shards it names) first, as transformers
  does, then `<prefix>.safetensors`. All problems found are raised together as one error.
  """
  root = pathlib.Path(checkpoint_dir).expanduser()
  if not root.is_dir():
    raise CheckpointError(f"checkpoint directory not found: {root}")
  index_path = root / f"{prefix}.safetensors.index.json"
  single_path = root / f"{prefix}.safetensors"
  problems: list[str] = []
  if index_path.is_file():
    entries = _index_sharded(root, index_path, problems)
  elif single_path.is_file():
    entries = _read_file(single_path, problems) or {}
  else:
    others = sorted(p.name for p in root.glob("*.safetensors*"))
    hint = f" (found only: {truncated_list(others)})" if others else ""
    raise CheckpointError(f"no safetensors checkpoint in {root}: looked for {index_path.name} and "
                          f"{single_path.name}{hint}")
  if problems:
    raise CheckpointError(problems_message(f"invalid checkpoint in {root}", problems))
  return dict(sorted(entries.items()))
