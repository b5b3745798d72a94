"""Model-agnostic safetensors I/O: find, index, validate, load (sharded) and save checkpoints.

Why a layer of our own over `safetensors`: an 8B checkpoint is ~17.5 GB, so every mistake must be
caught from the headers alone (a few KB per shard) before minutes of reading, and reported once,
on one line, naming the file / key / shape at fault. Loading then streams one tensor at a time
straight into its final `jax.sharding.Sharding`, so host memory holds about one tensor beyond the
result instead of a second copy of the model.

The safetensors layout (https://github.com/huggingface/safetensors):
  [8 bytes: little-endian u64 N][N bytes: JSON header][data]
  header = {"__metadata__": {str: str}, key: {"dtype": "BF16", "shape": [..], "data_offsets":
            [begin, end]}, ...} with offsets relative to the start of the data region.
A sharded checkpoint adds `<prefix>.safetensors.index.json` =
  {"metadata": {"total_size": int}, "weight_map": {key: shard file name}}.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import pathlib
import re
import struct
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

from glance_jax.progress import Progress

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike

# safetensors dtype string -> numpy dtype. `framework="numpy"` returns ml_dtypes types for BF16/F8.
_ST_TO_NP: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "U8": np.dtype(np.uint8), "I8": np.dtype(np.int8),
    "U16": np.dtype(np.uint16), "I16": np.dtype(np.int16),
    "U32": np.dtype(np.uint32), "I32": np.dtype(np.int32),
    "U64": np.dtype(np.uint64), "I64": np.dtype(np.int64),
    "F16": np.dtype(np.float16), "BF16": np.dtype(ml_dtypes.bfloat16),
    "F32": np.dtype(np.float32), "F64": np.dtype(np.float64),
    "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn), "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2),
    "C64": np.dtype(np.complex64),
}
_NP_TO_ST: dict[np.dtype, str] = {v: k for k, v in _ST_TO_NP.items()}

_MAX_HEADER_BYTES = 100 * 1024 * 1024  # safetensors' own limit; larger means "not safetensors".
_MAX_LISTED = 8  # problems / keys shown per category before "... and N more".
_DEFAULT_METADATA = {"format": "pt"}  # transformers refuses shards without a known format.
_HUB_PATTERNS = ["*.json", "*.safetensors", "*.jinja", "*.txt", "tokenizer*"]
_REPO_ID_RE = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")


class CheckpointError(ValueError):
  """A checkpoint that cannot be found, parsed or matched; the message is always one line.

  One line because these messages end up in logs and test output next to other failures: a
  multi-line dump of 750 keys hides the two that matter, so long lists are truncated with counts.
  """

  def __init__(self, message: str):
    super().__init__(_one_line(message))


@dataclasses.dataclass(frozen=True)
class TensorEntry:
  """Where one tensor lives, read from a safetensors header (no tensor data touched).

  `start`/`end` are absolute byte offsets in `file` (header length already added), so
  `end - start == nbytes` and a reader can seek there directly.
  """
  key: str
  file: pathlib.Path
  shape: tuple[int, ...]
  dtype: str  # safetensors dtype string, e.g. "BF16".
  start: int
  end: int

  @property
  def nbytes(self) -> int:
    return self.end - self.start

  @property
  def np_dtype(self) -> np.dtype:
    return _ST_TO_NP[self.dtype]


# ------------------------------------------------------------------------------------------------
# Messages.


def _one_line(text: str) -> str:
  return " ".join(str(text).split())


def _truncated_list(items: Sequence[str], limit: int = _MAX_LISTED) -> str:
  """'a, b, c' or 'a, b, ... and 7 more' so a message stays readable whatever the count."""
  shown = ", ".join(items[:limit])
  return shown if len(items) <= limit else f"{shown}, ... and {len(items) - limit} more"


def _problems_message(head: str, problems: Sequence[str]) -> str:
  """'head: N problem(s): p1; p2; ... and K more' on one line."""
  n = len(problems)
  shown = "; ".join(_one_line(p) for p in problems[:_MAX_LISTED])
  more = f"; ... and {n - _MAX_LISTED} more" if n > _MAX_LISTED else ""
  return f"{head}: {n} problem{'s' if n != 1 else ''}: {shown}{more}"


def format_nbytes(n: int) -> str:
  """Human-readable byte count (binary units), e.g. 17.5 GiB, for logs and progress."""
  value = float(n)
  for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
    if abs(value) < 1024 or unit == "TiB":
      return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
    value /= 1024
  raise AssertionError("unreachable")


def tensor_nbytes(entries: Mapping[str, TensorEntry] | Iterable[TensorEntry]) -> int:
  """Total data bytes of `entries` (a mapping from `index_checkpoint` or any iterable)."""
  values = entries.values() if isinstance(entries, Mapping) else entries
  return sum(e.nbytes for e in values)


# ------------------------------------------------------------------------------------------------
# Resolving a directory or hub repo id.


def _looks_local(text: str) -> bool:
  """True when `text` is meant as a filesystem path, so a typo must not trigger a hub download."""
  if os.path.exists(os.path.expanduser(text)):
    return True
  if text.startswith(("/", "./", "../", "~")) or text in (".", ".."):
    return True
  seps = {os.sep} | ({os.altsep} if os.altsep else set())
  if any(s in text for s in seps):
    return not _REPO_ID_RE.match(text)
  return False


def resolve_checkpoint_dir(path_or_repo_id: str) -> pathlib.Path:
  """An existing local directory, or the local snapshot of a Hugging Face hub repo.

  Only the files a model needs are downloaded (configs, weights, tokenizer, chat template),
  not e.g. the `*.bin`/`*.pth` duplicates some repos also carry.
  """
  text = os.fspath(path_or_repo_id)
  if not text:
    raise CheckpointError("checkpoint directory not found: empty path / repo id")
  local = pathlib.Path(text).expanduser()
  if local.is_dir():
    return local
  if _looks_local(text):
    if local.exists():
      raise CheckpointError(
          f"checkpoint directory not found: {text} is a file, expected the directory holding "
          f"the model's *.safetensors and config.json")
    raise CheckpointError(f"checkpoint directory not found: {text}")
  try:
    import huggingface_hub  # pylint: disable=import-outside-toplevel
  except ImportError as e:
    raise CheckpointError(
        f"'{text}' is not a local directory and huggingface_hub is not installed, so it cannot be "
        f"fetched as a hub repo id (pip install huggingface_hub)") from e
  try:
    return pathlib.Path(
        huggingface_hub.snapshot_download(text, allow_patterns=list(_HUB_PATTERNS)))
  except Exception as e:  # Offline, DNS, 401/404, bad id: all mean "no checkpoint here".
    raise CheckpointError(
        f"could not fetch hub repo '{text}': the Hugging Face hub was not reachable (offline or "
        f"no network) or the repo does not exist / is not accessible "
        f"({type(e).__name__}: {_one_line(str(e))[:300]})") from e


# ------------------------------------------------------------------------------------------------
# Header parsing and indexing.


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
  """json.loads hook: a key listed twice in one header would otherwise silently keep the last."""
  out = {}
  for key, value in pairs:
    if key in out:
      raise ValueError(f"key '{key}' appears twice")
    out[key] = value
  return out


def _read_header(path: pathlib.Path, problems: list[str]) -> dict[str, TensorEntry] | None:
  """Entries of one safetensors file from its header; problems appended, None if unusable.

  Validates what `safe_open` would reject later (sizes, offsets), but up front and by name.
  """
  try:
    size = path.stat().st_size
    with open(path, "rb") as f:
      prefix = f.read(8)
      if len(prefix) < 8:
        problems.append(f"{path}: truncated: {size} bytes, too short for the 8-byte header length")
        return None
      (header_len,) = struct.unpack("<Q", prefix)
      if header_len > _MAX_HEADER_BYTES:
        problems.append(f"{path}: not a safetensors file (header length {header_len} bytes is "
                        f"implausible)")
        return None
      if 8 + header_len > size:
        problems.append(f"{path}: truncated: expected at least {8 + header_len} bytes for the "
                        f"header, file has {size}")
        return None
      raw = f.read(header_len)
  except OSError as e:
    problems.append(f"{path}: cannot read: {e}")
    return None
  try:
    header = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicate_keys)
    if not isinstance(header, dict):
      raise ValueError(f"header is a JSON {type(header).__name__}, expected an object")
  except (UnicodeDecodeError, ValueError) as e:
    problems.append(f"{path}: unparsable safetensors header ({e})")
    return None

  data_start = 8 + header_len
  entries: dict[str, TensorEntry] = {}
  spans: list[tuple[int, int, str]] = []
  bad = False
  for key, info in header.items():
    if key == "__metadata__":
      continue
    try:
      dtype, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
      if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
        raise ValueError(f"bad shape {shape!r}")
      if not (isinstance(begin, int) and isinstance(end, int) and 0 <= begin <= end):
        raise ValueError(f"bad data_offsets {[begin, end]!r}")
    except (KeyError, TypeError, ValueError) as e:
      problems.append(f"{path}: key '{key}': malformed header entry ({e})")
      bad = True
      continue
    if dtype not in _ST_TO_NP:
      problems.append(f"{path}: key '{key}': unsupported dtype {dtype!r}")
      bad = True
      continue
    expected = math.prod(shape) * _ST_TO_NP[dtype].itemsize
    if end - begin != expected:
      problems.append(f"{path}: key '{key}': {dtype} shape {tuple(shape)} needs {expected} bytes, "
                      f"data_offsets [{begin}, {end}] span {end - begin}")
      bad = True
      continue
    spans.append((begin, end, key))
    entries[key] = TensorEntry(key, path, tuple(shape), dtype, data_start + begin, data_start + end)

  data_end = max((end for _, end, _ in spans), default=0)
  if size < data_start + data_end:
    problems.append(f"{path}: truncated: header describes {data_start + data_end} bytes, file has "
                    f"{size}")
    return None
  if bad:
    return None
  # safe_open requires the data region to be tiled exactly; say which key breaks it.
  position = 0
  for begin, end, key in sorted(spans):
    if begin != position:
      problems.append(f"{path}: key '{key}': data_offsets start at {begin}, expected {position} "
                      f"(gap or overlap)")
      return None
    position = end
  if size != data_start + position:
    problems.append(f"{path}: {size - data_start - position} trailing bytes after the data "
                    f"(expected {data_start + position} bytes, file has {size})")
    return None
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

  shard_names = sorted(set(weight_map.values()))
  shard_entries: dict[str, dict[str, TensorEntry] | None] = {}
  for name in shard_names:
    path = root / name
    if os.path.isabs(name) or not path.is_file():
      keys = [k for k, v in weight_map.items() if v == name]
      problems.append(f"{index_path.name} names shard {name} ({len(keys)} keys, e.g. '{keys[0]}') "
                      f"but {path} is missing")
      shard_entries[name] = None
      continue
    shard_entries[name] = _read_header(path, problems)

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
    entries = _read_header(single_path, problems) or {}
  else:
    others = sorted(p.name for p in root.glob("*.safetensors*"))
    hint = f" (found only: {_truncated_list(others)})" if others else ""
    raise CheckpointError(f"no safetensors checkpoint in {root}: looked for {index_path.name} and "
                          f"{single_path.name}{hint}")
  if problems:
    raise CheckpointError(_problems_message(f"invalid checkpoint in {root}", problems))
  return dict(sorted(entries.items()))


# ------------------------------------------------------------------------------------------------
# Key / shape checks.


def _shape_of(value: Any) -> tuple[int, ...]:
  """Accepts a shape tuple or anything with `.shape` (TensorEntry, ShapeDtypeStruct, arrays)."""
  shape = getattr(value, "shape", value)
  return tuple(int(d) for d in shape)


def check_keys(found: Mapping[str, Any], expected: Mapping[str, Any], *, where: str) -> None:
  """Raises one CheckpointError naming every missing, unexpected and misshaped key.

  Values are shapes (tuples) or objects with `.shape`, so index entries and
  `jax.ShapeDtypeStruct`s can be passed directly. All three lists are reported at once because
  fixing a converter key by key, one rerun per key, is what this is meant to prevent.
  """
  missing = sorted(k for k in expected if k not in found)
  unexpected = sorted(k for k in found if k not in expected)
  misshaped = sorted(
      f"'{k}' {_shape_of(found[k])} vs expected {_shape_of(expected[k])}"
      for k in expected if k in found and _shape_of(found[k]) != _shape_of(expected[k]))
  if not (missing or unexpected or misshaped):
    return None
  parts = []
  if missing:
    parts.append(f"{len(missing)} missing: {_truncated_list([repr(k) for k in missing])}")
  if unexpected:
    parts.append(f"{len(unexpected)} unexpected: {_truncated_list([repr(k) for k in unexpected])}")
  if misshaped:
    parts.append(f"{len(misshaped)} misshaped: {_truncated_list(misshaped)}")
  raise CheckpointError(f"{where}: keys do not match ({len(found)} found, {len(expected)} "
                        f"expected): {'; '.join(parts)}")


# ------------------------------------------------------------------------------------------------
# Loading.


def _kind(dtype: Any) -> str:
  """'b' bool, 'i' integer, 'f' float (incl. bf16/fp8), 'c' complex, '?' other."""
  d = np.dtype(dtype)
  if d == np.bool_:
    return "b"
  for kind, parent in (("f", jnp.floating), ("i", jnp.integer), ("c", jnp.complexfloating)):
    if jnp.issubdtype(d, parent):
      return kind
  return "?"


# (source kind, target kind) pairs that are a cast, not a mapping bug.
_ALLOWED_KINDS = {("f", "f"), ("i", "i"), ("b", "b"), ("b", "i"), ("c", "c")}


def _kind_problem(key: str, src: Any, dst: Any) -> str | None:
  if (_kind(src), _kind(dst)) in _ALLOWED_KINDS:
    return None
  return f"'{key}': cannot load {np.dtype(src).name} data into a {np.dtype(dst).name} target"


def _cast(host: np.ndarray, dtype: np.dtype, key: str, file: pathlib.Path) -> np.ndarray:
  """`host` as `dtype`; integer narrowing is checked so ids never wrap around silently."""
  problem = _kind_problem(key, host.dtype, dtype)
  if problem:
    raise CheckpointError(f"{file}: {problem}")
  if host.dtype == dtype:
    return host
  if _kind(dtype) == "i" and _kind(host.dtype) == "i" and host.size:
    info = np.iinfo(dtype)
    lo, hi = host.min(), host.max()
    if lo < info.min or hi > info.max:
      raise CheckpointError(f"{file}: '{key}': values [{lo}, {hi}] do not fit {dtype.name}")
  return host.astype(dtype)


def _load_one(f: Any, entry: TensorEntry, target: jax.ShapeDtypeStruct,
              sharding: jax.sharding.Sharding,
              transform: Callable[[np.ndarray], np.ndarray] | None) -> jax.Array:
  """Reads, transforms, casts and places one tensor; every host copy dies on return.

  The result is blocked on so the host buffer is released before the next read; otherwise async
  transfers could queue many host tensors when the disk outpaces the device.
  """
  host = f.get_tensor(entry.key)  # entry.shape, entry.np_dtype
  if transform is not None:
    try:
      host = np.asarray(transform(host))
    except Exception as e:
      raise CheckpointError(f"{entry.file}: transform for '{entry.key}' {entry.shape} failed: "
                            f"{type(e).__name__}: {e}") from e
  shape = tuple(target.shape)
  if host.shape != shape:
    how = "after its transform " if transform is not None else ""
    raise CheckpointError(f"{entry.file}: '{entry.key}' has shape {host.shape} {how}but the "
                          f"target is {shape}")
  # Canonical dtype (int64 -> int32 without jax_enable_x64), so the range check sees what JAX keeps.
  dtype = np.dtype(jax.dtypes.canonicalize_dtype(target.dtype))
  host = _cast(host, dtype, entry.key, entry.file)  # target.shape, dtype
  try:
    array = jax.make_array_from_callback(shape, sharding, lambda index: host[index])
  except Exception as e:
    raise CheckpointError(f"'{entry.key}' {shape}: cannot place into {sharding}: "
                          f"{type(e).__name__}: {e}") from e
  return array.block_until_ready()


def _plan_problems(entries: Mapping[str, TensorEntry],
                   targets: Mapping[str, jax.ShapeDtypeStruct],
                   shardings: Mapping[str, jax.sharding.Sharding],
                   transforms: Mapping[str, Callable[[np.ndarray], np.ndarray]]) -> list[str]:
  """Everything checkable from headers alone, so a bad plan fails before any data is read."""
  problems = []
  missing = [k for k in targets if k not in entries]
  if missing:
    problems.append(f"{len(missing)} target keys not in the checkpoint: "
                    f"{_truncated_list([repr(k) for k in missing])}")
  for name, extra in (("shardings", shardings), ("transforms", transforms)):
    stray = [k for k in extra if k not in targets]
    if stray:
      problems.append(f"{len(stray)} {name} keys are not targets: "
                      f"{_truncated_list([repr(k) for k in stray])}")
  for key, target in targets.items():
    if key not in entries:
      continue
    entry = entries[key]
    if key not in transforms:  # A transform may legitimately change shape and dtype.
      if entry.shape != tuple(target.shape):
        problems.append(f"'{key}' in {entry.file.name} has shape {entry.shape}, target is "
                        f"{tuple(target.shape)}")
      problem = _kind_problem(key, entry.np_dtype, target.dtype)
      if problem:
        problems.append(f"{problem} ({entry.file.name})")
  return problems


def load_tensors(
    entries: Mapping[str, TensorEntry],
    targets: Mapping[str, jax.ShapeDtypeStruct],
    *,
    shardings: Mapping[str, jax.sharding.Sharding] | None = None,
    transforms: Mapping[str, Callable[[np.ndarray], np.ndarray]] | None = None,
    progress: bool = False,
) -> dict[str, jax.Array]:
  """Loads `targets` (keyed by checkpoint key) from `entries`, one tensor at a time.

  Each file is opened once and its keys read in file order; per key: `transforms[key]` (numpy,
  may change shape, e.g. a transpose), cast to `target.dtype`, then placed straight into
  `shardings[key]` (default: the first device) via `jax.make_array_from_callback`, so each device
  only receives its own shard and the full host tensor is dropped before the next read. Keys in
  `entries` but not in `targets` are ignored; use `check_keys` for strict matching.
  """
  shardings = dict(shardings or {})
  transforms = dict(transforms or {})
  problems = _plan_problems(entries, targets, shardings, transforms)
  if problems:
    raise CheckpointError(_problems_message("cannot load checkpoint", problems))
  from safetensors import safe_open  # pylint: disable=import-outside-toplevel

  default_sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  by_file: dict[pathlib.Path, list[TensorEntry]] = {}
  for key in targets:
    by_file.setdefault(entries[key].file, []).append(entries[key])
  bar = Progress(sum(entries[k].nbytes for k in targets), "loading", unit="B", unit_scale=True, enabled=progress)
  loaded: dict[str, jax.Array] = {}
  try:
    for file, file_entries in by_file.items():
      # framework="numpy" yields ml_dtypes bf16; "np" fails on bf16 in safetensors 0.8.
      with safe_open(str(file), framework="numpy") as f:
        for entry in sorted(file_entries, key=lambda e: e.start):
          loaded[entry.key] = _load_one(f, entry, targets[entry.key],
                                        shardings.get(entry.key, default_sharding),
                                        transforms.get(entry.key))
          bar.update(entry.nbytes)
  finally:
    bar.close()
  return {key: loaded[key] for key in targets}


# ------------------------------------------------------------------------------------------------
# Saving.


@dataclasses.dataclass(frozen=True)
class _SaveItem:
  key: str
  value: Any  # The caller's array; converted to host memory only when written.
  shape: tuple[int, ...]
  dtype: np.dtype

  @property
  def nbytes(self) -> int:
    return math.prod(self.shape) * self.dtype.itemsize


def _save_items(tensors: Mapping[str, Any]) -> list[_SaveItem]:
  """Shapes and dtypes without pulling device arrays to the host (that happens per write)."""
  items, problems = [], []
  for key, value in tensors.items():
    if not isinstance(key, str) or not key or key == "__metadata__":
      problems.append(f"invalid key {key!r}")
      continue
    if not (hasattr(value, "shape") and hasattr(value, "dtype")):
      value = np.asarray(value)
    dtype = np.dtype(value.dtype).newbyteorder("=")
    if dtype not in _NP_TO_ST:
      problems.append(f"'{key}': dtype {dtype.name} has no safetensors equivalent")
      continue
    items.append(_SaveItem(key, value, tuple(int(d) for d in value.shape), dtype))
  if problems:
    raise CheckpointError(_problems_message("cannot save tensors", problems))
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


def _host_bytes(item: _SaveItem) -> np.ndarray:
  """The item's data as a flat little-endian uint8 view (one tensor on the host at a time)."""
  try:
    host = np.asarray(item.value)
  except Exception as e:  # e.g. a multi-process array that is not fully addressable.
    raise CheckpointError(f"'{item.key}': cannot copy to host: {type(e).__name__}: {e}") from e
  # np.require, not np.ascontiguousarray, which turns 0-d arrays into 1-d ones.
  host = np.require(host.astype(item.dtype.newbyteorder("<"), copy=False), requirements="C")
  if host.shape != item.shape:
    raise CheckpointError(f"'{item.key}': shape changed from {item.shape} to {host.shape}")
  return host.reshape(-1).view(np.uint8)


def _header_bytes(items: Sequence[_SaveItem], metadata: Mapping[str, str]) -> bytes:
  """Length prefix + JSON header padded with spaces to 8 bytes so the data region is aligned."""
  header: dict[str, Any] = {"__metadata__": dict(metadata)}
  offset = 0
  for item in items:
    header[item.key] = {"dtype": _NP_TO_ST[item.dtype], "shape": list(item.shape),
                        "data_offsets": [offset, offset + item.nbytes]}
    offset += item.nbytes
  raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
  raw += b" " * (-len(raw) % 8)
  return struct.pack("<Q", len(raw)) + raw


def _atomic_write(path: pathlib.Path, write: Callable[[Any], None]) -> None:
  """`write(file)` into a temp file beside `path`, then rename: readers see all or nothing."""
  tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
  try:
    with open(tmp, "wb") as f:
      write(f)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    tmp.unlink(missing_ok=True)
    raise


def _write_shard(path: pathlib.Path, items: Sequence[_SaveItem],
                 metadata: Mapping[str, str]) -> None:
  # Largest alignment first (as the safetensors library does), so every tensor is aligned.
  items = sorted(items, key=lambda i: (-i.dtype.itemsize, i.key))

  def write(f):
    f.write(_header_bytes(items, metadata))
    for item in items:
      f.write(memoryview(_host_bytes(item)))

  _atomic_write(path, write)


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
  is merged over {"format": "pt"}, which transformers requires to read the files. Every file is
  written to a temp name and renamed, the index last, so a crash never leaves a partial file under
  a final name; afterwards, leftovers of the other layout (a stale single file or stale shards
  with this prefix) are removed so readers cannot pick up an old checkpoint. Returns the paths
  written.
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
  index_path = root / f"{prefix}.safetensors.index.json"
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
    _atomic_write(index_path,
                  lambda f: f.write(json.dumps(index, indent=2, sort_keys=False).encode() + b"\n"))
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
