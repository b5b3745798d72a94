"""The safetensors format as this package uses it: dtype names <-> numpy dtypes, one tensor's place.

The layout (https://github.com/huggingface/safetensors):
  [8 bytes: little-endian u64 N][N bytes: JSON header][data]
  header = {"__metadata__": {str: str}, key: {"dtype": "BF16", "shape": [..], "data_offsets":
            [begin, end]}, ...} with offsets relative to the start of the data region.
A sharded checkpoint adds `<prefix>.safetensors.index.json` =
  {"metadata": {"total_size": int}, "weight_map": {key: shard file name}}.
Reading and writing go through the `safetensors` package; only io/diagnose.py reads the header
bytes itself, to say why a file the package rejected is bad.
"""

from __future__ import annotations

import dataclasses
import pathlib

import ml_dtypes
import numpy as np

# safetensors dtype string -> numpy dtype. `framework="numpy"` returns ml_dtypes types for BF16/F8.
ST_TO_NP: dict[str, np.dtype] = {
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
NP_TO_ST: dict[np.dtype, str] = {v: k for k, v in ST_TO_NP.items()}


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
    return ST_TO_NP[self.dtype]
