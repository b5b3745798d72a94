"""Jit arguments that cost little to pass: static ones hashed once, parameter trees flattened once.

A jitted call hashes its static arguments on every call to find the compiled program. flax's
`GraphDef.__hash__` walks every node each time (0.27 ms for the 3M testbed target, more for a real
one) and jit hashes it more than once per call: a bare graphdef as a static argument cost ~1.5 ms
of host time per call. A `Hashed` holder computes the hash once; jitted functions take either
and call `unwrap` (or `merge`) while tracing. Flattening an nnx.State argument walks its nested
mappings in Python on every call too; a `FlatState` holds the leaves and the treedef, flattened
once, and `as_tree` rebuilds the State while tracing. Targets and heads keep both (`JitArgs`:
`jit_graphdef`, `flat_params`, cached per holder).

Why holders and not programs bound to their graphdef (jax.jit of a closure, as flax's Sampler
does): the two cost the same host time, and holders compose. `python benchmarks/host_time.py` on
the testbed target (97 parameter arrays; 2-core CPU, nothing else running): static Hashed graphdef
+ FlatState 99.6 us per call, bound program + FlatState 102.0 us; with the nnx.State instead,
bound 385 us, bare static graphdef 1524 us. A bound program is one per (target, drafter, policy,
loop config): a cache of them would be keyed by those same objects, graphdefs included, while as
static arguments the drafter's graphdef (decode.drafters.block: a Hashed field) is one more
hashed-once value in the key jit already builds.
"""

from __future__ import annotations

import functools
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


class JitArgs:
  """Mixin of a model holder with `graphdef` and `params` (Target, Head): both as jit takes them,
  computed once per holder. Holders are not updated in place (new weights make a new holder)."""

  @functools.cached_property
  def jit_graphdef(self) -> Hashed:
    """graphdef as a jit static argument, hashed once."""
    return Hashed(self.graphdef)

  @functools.cached_property
  def flat_params(self) -> FlatState:
    """params flattened once, for jit calls."""
    return FlatState.of(self.params)
