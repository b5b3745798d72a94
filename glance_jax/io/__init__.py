"""Checkpoint I/O over the `safetensors` package, model-agnostic.

  errors.py    CheckpointError (always one line) and message helpers
  format.py    dtype names <-> numpy, TensorEntry (one tensor's file, shape, dtype, bytes)
  hub.py       resolve_checkpoint_dir: a local directory or a hub repo id
  index.py     index_checkpoint: every problem of every shard from the headers, before any data
  diagnose.py  why the package rejected a file, by key and byte count
  load.py      check_keys, load_tensors: each process reads only the slices its devices hold
  save.py      save_tensors: one file or shards + index, atomic renames
"""

from glance_jax.io.errors import CheckpointError, format_nbytes
from glance_jax.io.format import TensorEntry
from glance_jax.io.hub import resolve_checkpoint_dir
from glance_jax.io.index import index_checkpoint, tensor_nbytes
from glance_jax.io.load import check_keys, load_tensors
from glance_jax.io.save import save_tensors, write_json

__all__ = [
    "CheckpointError",
    "TensorEntry",
    "check_keys",
    "format_nbytes",
    "index_checkpoint",
    "load_tensors",
    "resolve_checkpoint_dir",
    "save_tensors",
    "tensor_nbytes",
    "write_json",
]
