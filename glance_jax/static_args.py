"""Jit arguments that cost little to pass: static ones hashed once, parameter trees flattened once.

A jitted call hashes its static arguments on every call to find the compiled program. flax's
`GraphDef.__hash__` walks every node each time (0.27 ms for the 3M testbed target, more for a real
one) and jit hashes it more than once per call: passing the target's graphdef as a static argument
cost ~0.5 ms of host time per call, before anything ran (measured: 600 us per call vs 97 us through
`static`), twice per `generate` (prefill and decode loop). `static(x)` wraps x in a holder whose
hash is computed once; jitted functions take either and call `unwrap` while tracing.

Flattening an nnx.State argument walks its nested mappings in Python on every call too (96 us for
the testbed target's 97 arrays); a `FlatState` holds the leaves and the treedef, flattened once
(28 us a call), and `as_tree` rebuilds the State while tracing. Targets and heads keep theirs
(`Target.flat_params`, `Head.flat_params`), so it lives as long as the parameters do.
"""

from __future__ import annotations

import collections
from typing import Any

import jax

_MEMO: collections.OrderedDict = collections.OrderedDict()
_MEMO_SIZE = 64   # graphdefs of one process: a few targets and heads, and their ablated copies


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


def static(value: Any) -> Hashed | None:
  """The Hashed holder of `value`, the same object for the same value object (memoised by identity,
  holding a reference so that the identity is not reused); None stays None."""
  if value is None or isinstance(value, Hashed):
    return value
  key = id(value)
  hit = _MEMO.get(key)
  if hit is not None and hit.value is value:
    _MEMO.move_to_end(key)
    return hit
  _MEMO[key] = held = Hashed(value)
  while len(_MEMO) > _MEMO_SIZE:
    _MEMO.popitem(last=False)
  return held


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
