"""Checkpoint I/O: model-agnostic safetensors indexing, validation, sharded loading and saving."""

from glance_jax.io.safetensors_io import (
    CheckpointError,
    TensorEntry,
    check_keys,
    format_nbytes,
    index_checkpoint,
    load_tensors,
    resolve_checkpoint_dir,
    save_tensors,
    tensor_nbytes,
)

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
]
