"""Jit arguments that cost little to pass: static ones hashed once, parameter trees flattened once.

A jitted call hashes its static arguments on every call to find the compiled program. flax's
`GraphDef.__hash__` walks every node each time (0.27 ms for the 3M testbed target, more for a real
one) and jit hashes it more than once per call: passing the target's graphdef as a static argument
cost ~0.5 ms of host time per call, before anything ran (measured: 600 us per call vs 97 us through
`Hashed`), twice per `generate` (prefill and decode loop). A `Hashed` holder computes the hash
once; jitted functions take either and call `unwrap` while tracing.

Flattening an nnx.State argument walks its nested mappings in Python on every call too (96 us for
the testbed target's 97 arrays); a `FlatState` holds the leaves and the treedef, flattened once
(28 us a call), and `as_tree` rebuilds the State while tracing. Targets and heads keep both
(`jit_graphdef`, `flat_params`: cached properties), so they live as long as the model object does.
"""

from __future__ import annotations

from typing import Any

import jax
from flax import nnx


class Hashed:
  """`value` as a static argument: hash computed once, equal to another Hashed of an equal value."""
  __slots__ = ("value", "_hash")

  def __init__(self, value: Any):
    self.value = value
    self._hash = hash(value)

  def __hash__(self) -> int:
    return self._hash

  def __eq__(self, other) -> bool:
    return self is other or (type(other) is Hashed and self._hash == other._hash and self.value == other.value)

  def __repr__(self) -> str:
    return f"Hashed({type(self.value).__name__})"


def unwrap(value: Any) -> Any:
  """The value inside a Hashed holder; anything else as it is (callers may pass the bare value)."""
  return value.value if isinstance(value, Hashed) else value


@jax.tree_util.register_pytree_node_class
class FlatState:
  """A parameter tree as jit sees it: its leaves (a tuple of arrays) and its treedef."""
  __slots__ = ("leaves", "treedef")

  def __init__(self, leaves: tuple, treedef):
    self.leaves, self.treedef = leaves, treedef

  @classmethod
  def of(cls, tree) -> "FlatState":
    leaves, treedef = jax.tree.flatten(tree)
    return cls(tuple(leaves), treedef)

  def tree_flatten(self):
    return self.leaves, self.treedef

  @classmethod
  def tree_unflatten(cls, treedef, leaves):
    return cls(tuple(leaves), treedef)


def as_tree(value: Any) -> Any:
  """The parameter tree inside a FlatState; anything else as it is (callers may pass the tree)."""
  return jax.tree.unflatten(value.treedef, value.leaves) if isinstance(value, FlatState) else value


def merge(graphdef: Any, params: Any):
  """nnx.merge of a graphdef and params as the jitted functions receive them (either form of each)."""
  return nnx.merge(unwrap(graphdef), as_tree(params))
