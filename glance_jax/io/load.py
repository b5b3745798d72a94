"""Matching checkpoint keys to a model, and loading tensors straight into their shardings.

Loading reads each tensor through `safe_open(...).get_slice`, inside
`jax.make_array_from_callback`: every process reads only the slices its own devices hold (a 4-host
TPU slice reads a 17.5 GB checkpoint once in total, not four times), and host memory holds about
one tensor's local slices beyond the result instead of a second copy of the model.
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import safetensors

from glance_jax.io.errors import CheckpointError, problems_message, truncated_list
from glance_jax.io.format import TensorEntry
from glance_jax.progress import Progress

Transform = Callable[[np.ndarray], np.ndarray]


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
    parts.append(f"{len(missing)} missing: {truncated_list([repr(k) for k in missing])}")
  if unexpected:
    parts.append(f"{len(unexpected)} unexpected: {truncated_list([repr(k) for k in unexpected])}")
  if misshaped:
    parts.append(f"{len(misshaped)} misshaped: {truncated_list(misshaped)}")
  raise CheckpointError(f"{where}: keys do not match ({len(found)} found, {len(expected)} "
                        f"expected): {'; '.join(parts)}")


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


def _reader(f: Any, entry: TensorEntry, target: jax.ShapeDtypeStruct,
            transform: Transform | None) -> Callable[[tuple[slice, ...]], np.ndarray]:
  """index -> that slice of the tensor, read, transformed and cast, for make_array_from_callback.

  Without a transform only the slice is read. A transform (numpy, may change shape, e.g. a
  transpose) needs the whole tensor, so it is read once and sliced in memory.
  """
  shape = tuple(target.shape)
  # Canonical dtype (int64 -> int32 without jax_enable_x64), so the range check sees what JAX keeps.
  dtype = np.dtype(jax.dtypes.canonicalize_dtype(target.dtype))
  if transform is not None:
    host = f.get_tensor(entry.key)  # entry.shape, entry.np_dtype
    try:
      host = np.asarray(transform(host))
    except Exception as e:
      raise CheckpointError(f"{entry.file}: transform for '{entry.key}' {entry.shape} failed: "
                            f"{type(e).__name__}: {e}") from e
    if host.shape != shape:
      raise CheckpointError(f"{entry.file}: '{entry.key}' has shape {host.shape} after its "
                            f"transform but the target is {shape}")
    host = _cast(host, dtype, entry.key, entry.file)  # shape, dtype
    return lambda index: host[index]
  if 0 in entry.shape:  # The package cannot slice an empty tensor; there is nothing to read.
    return lambda index: np.zeros(shape, dtype)[index]
  stored = f.get_slice(entry.key)
  return lambda index: _cast(stored[index], dtype, entry.key, entry.file)


def _place(read: Callable[[tuple[slice, ...]], np.ndarray], entry: TensorEntry,
           shape: tuple[int, ...], sharding: jax.sharding.Sharding) -> jax.Array:
  """One global array from the slices this process's devices hold, each slice read once.

  Devices holding the same slice (replication) share one read. The result is blocked on so the
  host slices are released before the next tensor; otherwise async transfers could queue many
  host tensors when the disk outpaces the device.
  """
  cache: dict[tuple, np.ndarray] = {}

  def callback(index):
    key = tuple((s.start, s.stop, s.step) for s in index)
    if key not in cache:
      cache[key] = read(index)
    return cache[key]

  try:
    array = jax.make_array_from_callback(shape, sharding, callback)
  except CheckpointError:
    raise
  except Exception as e:
    raise CheckpointError(f"'{entry.key}' {shape}: cannot place into {sharding}: "
                          f"{type(e).__name__}: {e}") from e
  return array.block_until_ready()


def _plan_problems(entries: Mapping[str, TensorEntry], targets: Mapping[str, jax.ShapeDtypeStruct],
                   shardings: Mapping[str, jax.sharding.Sharding],
                   transforms: Mapping[str, Transform]) -> list[str]:
  """Everything checkable from headers alone, so a bad plan fails before any data is read."""
  problems = []
  missing = [k for k in targets if k not in entries]
  if missing:
    problems.append(f"{len(missing)} target keys not in the checkpoint: "
                    f"{truncated_list([repr(k) for k in missing])}")
  for name, extra in (("shardings", shardings), ("transforms", transforms)):
    stray = [k for k in extra if k not in targets]
    if stray:
      problems.append(f"{len(stray)} {name} keys are not targets: "
                      f"{truncated_list([repr(k) for k in stray])}")
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
    transforms: Mapping[str, Transform] | None = None,
    progress: bool = False,
) -> dict[str, jax.Array]:
  """Loads `targets` (keyed by checkpoint key) from `entries`, one tensor at a time.

  Each file is opened once and its keys read in file order; per key, each slice that this
  process's devices hold in `shardings[key]` (default: the first device) is read, cast to
  `target.dtype` and placed via `jax.make_array_from_callback`. `transforms[key]` (numpy, may
  change shape) makes that key read whole. Keys in `entries` but not in `targets` are ignored; use
  `check_keys` for strict matching.
  """
  shardings = dict(shardings or {})
  transforms = dict(transforms or {})
  problems = _plan_problems(entries, targets, shardings, transforms)
  if problems:
    raise CheckpointError(problems_message("cannot load checkpoint", problems))

  default_sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  by_file: dict[pathlib.Path, list[TensorEntry]] = {}
  for key in targets:
    by_file.setdefault(entries[key].file, []).append(entries[key])
  bar = Progress(sum(entries[k].nbytes for k in targets), "loading", unit="B", unit_scale=True,
                 enabled=progress)
  loaded: dict[str, jax.Array] = {}
  try:
    for file, file_entries in by_file.items():
      # Looked up per call so tests can spy on it; framework="numpy" yields ml_dtypes bf16.
      with safetensors.safe_open(str(file), framework="numpy") as f:
        for entry in sorted(file_entries, key=lambda e: e.start):
          target = targets[entry.key]
          read = _reader(f, entry, target, transforms.get(entry.key))
          loaded[entry.key] = _place(read, entry, tuple(target.shape),
                                     shardings.get(entry.key, default_sharding))
          del read
          bar.update(entry.nbytes)
  finally:
    bar.close()
  return {key: loaded[key] for key in targets}
