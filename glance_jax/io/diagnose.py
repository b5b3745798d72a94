"""Why a file is not a usable safetensors file, named by byte count and key, from its header alone.

The `safetensors` package validates a file when it opens it, but says only e.g. "incomplete
metadata, file not fully covered" or "invalid shape, data type, or offset for tensor"; before
minutes of loading an 8B checkpoint the user needs the file, key and sizes at fault. So when the
package rejects a file, `explain` reads the header itself and says which check fails. The package
also silently keeps the last of a key listed twice, so `duplicate_keys` is asked of every file.
"""

from __future__ import annotations

import json
import math
import pathlib
import struct
from typing import Any

from glance_jax.io.format import ST_TO_NP

_MAX_HEADER_BYTES = 100 * 1024 * 1024  # safetensors' own limit; larger means "not safetensors".


class _Bad(Exception):
  """A problem found; its message is the complete one-line description."""


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
  """json.loads hook: a key listed twice in one header would otherwise silently keep the last."""
  out = {}
  for key, value in pairs:
    if key in out:
      raise ValueError(f"key '{key}' appears twice")
    out[key] = value
  return out


def _raw_header(path: pathlib.Path) -> tuple[int, int, dict[str, Any]]:
  """(file size, start of the data region, header dict); raises _Bad naming what is wrong."""
  try:
    size = path.stat().st_size
    with open(path, "rb") as f:
      prefix = f.read(8)
      if len(prefix) < 8:
        raise _Bad(f"{path}: truncated: {size} bytes, too short for the 8-byte header length")
      (header_len,) = struct.unpack("<Q", prefix)
      if header_len > _MAX_HEADER_BYTES:
        raise _Bad(f"{path}: not a safetensors file (header length {header_len} bytes is "
                   f"implausible)")
      if 8 + header_len > size:
        raise _Bad(f"{path}: truncated: expected at least {8 + header_len} bytes for the header, "
                   f"file has {size}")
      raw = f.read(header_len)
  except OSError as e:
    raise _Bad(f"{path}: cannot read: {e}") from e
  try:
    header = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicate_keys)
    if not isinstance(header, dict):
      raise ValueError(f"header is a JSON {type(header).__name__}, expected an object")
  except (UnicodeDecodeError, ValueError) as e:
    raise _Bad(f"{path}: unparsable safetensors header ({e})") from e
  return size, 8 + header_len, header


def duplicate_keys(path: pathlib.Path) -> str | None:
  """The problem with a header that lists a key twice (which the package accepts), else None."""
  try:
    _raw_header(path)
  except _Bad as e:
    return str(e)
  return None


def _entry_spans(path: pathlib.Path, header: dict[str, Any]) -> list[tuple[int, int, str]]:
  """(begin, end, key) per tensor, relative to the data region; raises _Bad at the first bad key."""
  spans = []
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
      raise _Bad(f"{path}: key '{key}': malformed header entry ({e})") from e
    if dtype not in ST_TO_NP:
      raise _Bad(f"{path}: key '{key}': unsupported dtype {dtype!r}")
    expected = math.prod(shape) * ST_TO_NP[dtype].itemsize
    if end - begin != expected:
      raise _Bad(f"{path}: key '{key}': {dtype} shape {tuple(shape)} needs {expected} bytes, "
                 f"data_offsets [{begin}, {end}] span {end - begin}")
    spans.append((begin, end, key))
  return spans


def explain(path: pathlib.Path, error: Exception) -> str:
  """One line saying why the package rejected `path` (its own message if no check here fires)."""
  try:
    size, data_start, header = _raw_header(path)
    spans = _entry_spans(path, header)
    data_end = max((end for _, end, _ in spans), default=0)
    if size < data_start + data_end:
      raise _Bad(f"{path}: truncated: header describes {data_start + data_end} bytes, file has "
                 f"{size}")
    position = 0  # The data region must be tiled exactly; say which key breaks it.
    for begin, end, key in sorted(spans):
      if begin != position:
        raise _Bad(f"{path}: key '{key}': data_offsets start at {begin}, expected {position} "
                   f"(gap or overlap)")
      position = end
    if size != data_start + position:
      raise _Bad(f"{path}: {size - data_start - position} trailing bytes after the data "
                 f"(expected {data_start + position} bytes, file has {size})")
  except _Bad as e:
    return str(e)
  return f"{path}: rejected by safetensors: {type(error).__name__}: {error}"
