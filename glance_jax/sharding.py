"""Logical axis names, the rules that map them onto a (data, fsdp, tensor) mesh, and mesh helpers.

Every parameter carries `axes=(...)` metadata with one logical name per dimension. A rules table maps
each logical name to a mesh axis, a tuple of mesh axes (the dimension split over their product, as
MaxText's logical_axis_rules), or None (replicated). A mesh axis that does not divide the dimension
(or has size 1, or is not in the mesh) is left out, so one table serves every model size and mesh
shape.
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

Rule = tuple[str, "str | tuple[str, ...] | None"]

# Megatron-style tensor parallelism on heads / mlp / vocab, FSDP on the model width, data on batch.
# Decoding keeps the batch on `data` only: a decode step is bound by reading the weights, and with
# the batch off `fsdp` each device reads only its own shard of every weight (fsdp acts as a second
# weight split) instead of all-gathering whole weights every token.
DEFAULT_RULES: tuple[Rule, ...] = (
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

# Training: the batch (and every activation's batch dimension) over data x fsdp, so FSDP is data
# parallel for activations and each device holds only its rows' activations; parameters are laid
# out as in DEFAULT_RULES (BATCH names no parameter dimension).
TRAIN_RULES: tuple[Rule, ...] = tuple((k, ("data", "fsdp") if k == BATCH else v)
                                      for k, v in DEFAULT_RULES)

# Replicated everywhere: what the CPU and single-device runs use.
REPLICATED_RULES: tuple[Rule, ...] = tuple((k, None) for k, _ in DEFAULT_RULES)


class MeshError(ValueError):
  """A mesh shape that does not fit the devices."""


class RulesError(ValueError):
  """A logical-axis rules table that is malformed."""


def rules_table(rules: Sequence[Rule]) -> dict[str, tuple[str, ...]]:
  """Rules -> {logical name: tuple of mesh axes} (str -> 1-tuple, None -> ()), validated: each
  rule is (name, mesh axis | tuple of distinct mesh axes | None), each name given once."""
  table: dict[str, tuple[str, ...]] = {}
  for rule in rules:
    if not (isinstance(rule, (tuple, list)) and len(rule) == 2 and isinstance(rule[0], str)):
      raise RulesError(f"rule {rule!r}: expected (logical name, mesh axis | tuple of mesh axes | None)")
    name, target = rule
    if target is None:
      axes: tuple = ()
    elif isinstance(target, str):
      axes = (target,)
    elif isinstance(target, (tuple, list)) and all(isinstance(a, str) for a in target):
      axes = tuple(target)
    else:
      raise RulesError(f"rule for {name!r}: mesh axes {target!r} are not a str, a tuple of str or None")
    if len(set(axes)) != len(axes):
      raise RulesError(f"rule for {name!r}: mesh axes {axes} repeat an axis")
    if name in table:
      raise RulesError(f"rule for {name!r} given twice")
    table[name] = axes
  return table


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
                    rules: Sequence[Rule] = DEFAULT_RULES) -> P:
  """PartitionSpec for one array: logical names -> mesh axes. Of a rule's mesh axes, in order, each
  is kept if it is in the mesh with size > 1, not used by an earlier dimension, and the product of
  the kept ones still divides the dimension; one kept axis is written as its name, several as a
  tuple, none as None."""
  if axes is None:
    return P()
  table = rules_table(rules)
  used: set[str] = set()
  spec = []
  for name, dim in zip(axes, shape):
    kept: list[str] = []
    split = 1
    for mesh_axis in table.get(name, ()) if name is not None else ():
      size = mesh.shape.get(mesh_axis, 1)
      if mesh_axis in used or size == 1 or dim % (split * size) != 0:
        continue
      kept.append(mesh_axis)
      split *= size
    used.update(kept)
    spec.append(None if not kept else kept[0] if len(kept) == 1 else tuple(kept))
  return P(*spec)


def shards(entry: str | tuple[str, ...] | None, mesh: Mesh) -> int:
  """How many ways one PartitionSpec entry splits its dimension on `mesh`."""
  names = () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)
  return int(np.prod([mesh.shape[n] for n in names], dtype=np.int64))


def state_shardings(state: nnx.State, mesh: Mesh,
                    rules: Sequence[Rule] = DEFAULT_RULES) -> Any:
  """A pytree of NamedShardings matching `state` (an nnx.State of Variables or abstract arrays)."""

  def one(var):
    value = var.get_value() if hasattr(var, "get_value") else var
    axes = var.get_metadata().get("axes") if hasattr(var, "get_metadata") else None
    return NamedSharding(mesh, logical_to_spec(axes, value.shape, mesh, rules))

  return jax.tree.map(one, state, is_leaf=lambda x: isinstance(x, nnx.Variable))


def pinner(mesh: Mesh | None, rules: Sequence[Rule] = TRAIN_RULES):
  """-> pin(x, *logical axes): x under a sharding constraint to the layout the rules give those
  axes on `mesh` (the identity without a mesh). Pinning activations' batch dimension keeps XLA from
  choosing the weights' layout for them (e.g. contracting over an fsdp-split width and summing
  whole [B, ..., V] partial logits across devices)."""
  if mesh is None:
    return lambda x, *axes: x

  def pin(x, *axes):
    if len(axes) != x.ndim:
      raise ValueError(f"pin: {len(axes)} logical axes {axes} for an array of shape {x.shape}")
    return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, logical_to_spec(axes, x.shape, mesh, rules)))
  return pin


def pin_kv(xs: Sequence[jax.Array], mesh: Mesh | None) -> tuple[jax.Array, ...]:
  """Per-layer K or V buffers [B, S, kv_heads, head_dim] in the decode layout: rows on data, kv
  heads on tensor (unchanged without a mesh). Every decode cache (the target's, a block head's
  context, an EAGLE-3 midlayer's, a two-model draft's) is pinned with it."""
  pin = pinner(mesh, DEFAULT_RULES)
  return tuple(pin(x, BATCH, None, KV_HEADS, None) for x in xs)


def named(mesh: Mesh, *spec) -> NamedSharding:
  return NamedSharding(mesh, P(*spec))
