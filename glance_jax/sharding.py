"""Logical axis names, the rules that map them onto a (data, fsdp, tensor) mesh, and mesh helpers.

Every parameter carries `axes=(...)` metadata with one logical name per dimension. A rules table maps
each logical name to a mesh axis (or None = replicated). A dimension that the mesh axis does not
divide is replicated instead, so one table serves every model size and mesh shape.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

# Logical axis names (one place, as MaxText's common_types).
BATCH = "batch"
LENGTH = "length"
EMBED = "embed"          # model width (text hidden, vision hidden)
MLP = "mlp"              # feed-forward width
HEADS = "heads"          # q heads x head_dim, flattened
KV_HEADS = "kv_heads"    # kv heads x head_dim, flattened
HEAD_DIM = "head_dim"
VOCAB = "vocab"
PATCH = "patch"          # pixel features per patch row (C*T*P*P)
NORM = "norm"            # norm scales and biases: always replicated
LAYERS = "layers"

MESH_AXES = ("data", "fsdp", "tensor")

# Megatron-style tensor parallelism on heads / mlp / vocab, FSDP on the model width, data on batch.
DEFAULT_RULES: tuple[tuple[str, str | None], ...] = (
    (BATCH, "data"),
    (EMBED, "fsdp"),
    (MLP, "tensor"),
    (HEADS, "tensor"),
    (KV_HEADS, "tensor"),
    (VOCAB, "tensor"),
    (LENGTH, None),
    (HEAD_DIM, None),
    (PATCH, None),
    (NORM, None),
    (LAYERS, None),
)

# Replicated everywhere: what the CPU and single-device runs use.
REPLICATED_RULES: tuple[tuple[str, str | None], ...] = tuple((k, None) for k, _ in DEFAULT_RULES)


class MeshError(ValueError):
  """A mesh shape that does not fit the devices."""


def make_mesh(shape: Sequence[int] | None = None, axes: Sequence[str] = MESH_AXES,
              devices: Sequence[jax.Device] | None = None) -> Mesh:
  """Builds a (data, fsdp, tensor) mesh; `shape=None` puts every device on `data`."""
  devices = list(jax.devices() if devices is None else devices)
  if shape is None:
    shape = (len(devices),) + (1,) * (len(axes) - 1)
  shape = tuple(int(s) for s in shape)
  if len(shape) != len(axes):
    raise MeshError(f"mesh shape {shape} has {len(shape)} axes, expected {len(axes)} ({axes})")
  if int(np.prod(shape)) != len(devices):
    raise MeshError(f"mesh shape {shape} needs {int(np.prod(shape))} devices, "
                    f"but {len(devices)} are available")
  return Mesh(np.asarray(devices).reshape(shape), tuple(axes))


def logical_to_spec(axes: Iterable[str | None] | None, shape: Sequence[int], mesh: Mesh,
                    rules: Sequence[tuple[str, str | None]] = DEFAULT_RULES) -> P:
  """PartitionSpec for one array: logical names -> mesh axes, dropping non-dividing ones."""
  if axes is None:
    return P()
  table = dict(rules)
  used: set[str] = set()
  spec = []
  for name, dim in zip(axes, shape):
    mesh_axis = table.get(name) if name is not None else None
    if (mesh_axis is None or mesh_axis in used or mesh_axis not in mesh.shape
        or dim % mesh.shape[mesh_axis] != 0 or mesh.shape[mesh_axis] == 1):
      spec.append(None)
    else:
      spec.append(mesh_axis)
      used.add(mesh_axis)
  return P(*spec)


def state_shardings(state: nnx.State, mesh: Mesh,
                    rules: Sequence[tuple[str, str | None]] = DEFAULT_RULES) -> Any:
  """A pytree of NamedShardings matching `state` (an nnx.State of Variables or abstract arrays)."""

  def one(var):
    value = var.get_value() if hasattr(var, "get_value") else var
    axes = var.get_metadata().get("axes") if hasattr(var, "get_metadata") else None
    return NamedSharding(mesh, logical_to_spec(axes, value.shape, mesh, rules))

  return jax.tree.map(one, state, is_leaf=lambda x: isinstance(x, nnx.Variable))


def named(mesh: Mesh, *spec) -> NamedSharding:
  return NamedSharding(mesh, P(*spec))
