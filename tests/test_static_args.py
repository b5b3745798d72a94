"""static_args: a static jit argument hashed once, parameter trees flattened once, and the models' holders."""

import functools

import jax
import jax.numpy as jnp

from glance_jax.static_args import Hashed, unwrap


class _Counted:
  """A hashable value that counts how often it is hashed (as flax's GraphDef, it rehashes each time)."""
  def __init__(self, key):
    self.key, self.hashes = key, 0

  def __hash__(self):
    self.hashes += 1
    return hash(self.key)

  def __eq__(self, other):
    return isinstance(other, _Counted) and other.key == self.key


def test_equal_values_compare_equal():
  a, b = _Counted("g"), _Counted("g")
  assert Hashed(a) == Hashed(a) and Hashed(a) == Hashed(b) and hash(Hashed(a)) == hash(Hashed(b))
  assert Hashed(_Counted("other")) != Hashed(a) and Hashed(a) != a
  assert unwrap(Hashed(a)) is a and unwrap(a) is a and unwrap(None) is None


def test_jit_hashes_the_value_once_and_traces_once():
  value = _Counted("graph")
  traces = []

  @functools.partial(jax.jit, static_argnames=("g",))
  def f(x, g):
    traces.append(unwrap(g).key)
    return x + 1

  held = Hashed(value)
  hashes_after_wrapping = value.hashes
  for _ in range(5):
    assert int(f(jnp.int32(1), g=held)) == 2
  assert value.hashes == hashes_after_wrapping == 1   # hashed when wrapped, never by jit
  assert traces == ["graph"]
  assert isinstance(held, Hashed)


def test_flat_state_round_trips_and_is_cheap_to_pass():
  from glance_jax.static_args import FlatState, as_tree
  tree = {"a": jnp.arange(3), "b": {"c": jnp.ones((2, 2))}}
  flat = FlatState.of(tree)
  traces = []

  @jax.jit
  def f(p):
    traces.append(1)
    t = as_tree(p)
    return t["a"].sum() + t["b"]["c"].sum()

  assert int(f(flat)) == int(f(tree)) == 7
  assert int(f(FlatState.of(tree))) == 7 and len(traces) == 2   # FlatState: one trace, the tree: another
  assert as_tree(tree) is tree
  assert jax.tree.structure(as_tree(flat)) == jax.tree.structure(tree)


def test_target_and_head_keep_their_jit_arguments():
  from glance_jax.head import Head
  from glance_jax.qwen3_vl.target import load_target
  from glance_jax.static_args import as_tree
  from glance_jax.testbed import paths
  target = load_target(str(paths.TARGET))
  head = Head.load(str(paths.HEAD), target=target)
  for obj in (target, head):
    assert obj.jit_graphdef is obj.jit_graphdef and unwrap(obj.jit_graphdef) is obj.graphdef
    assert obj.flat_params is obj.flat_params
    rebuilt = as_tree(obj.flat_params)
    assert jax.tree.structure(rebuilt) == jax.tree.structure(obj.params)
    assert all(a is b for a, b in zip(jax.tree.leaves(rebuilt), jax.tree.leaves(obj.params)))
