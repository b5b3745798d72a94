"""Leaf-by-leaf random init (qwen3_vl/leafwise_init.py): the model's own distributions, every leaf
of the 8B given a rule, and the threshold leaving every small model's one-program init alone."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from glance_jax import sharding as shd
from glance_jax.config import QWEN3_VL_8B, tiny_config
from glance_jax.head.config import HeadConfig
from glance_jax.head.init import init_head
from glance_jax.head.model import abstract_head
from glance_jax.qwen3_vl import leafwise_init
from glance_jax.qwen3_vl.target import Target
from glance_jax.qwen3_vl.weights import abstract_model

CFG = tiny_config()


def _flat(state):
  return {".".join(map(str, p)): np.asarray(v.get_value(), np.float32) for p, v in nnx.to_flat_state(state)}


@pytest.fixture
def always_leafwise(monkeypatch):
  monkeypatch.setattr(leafwise_init, "LEAFWISE_ABOVE", 0)


def test_leafwise_target_draws_the_models_distributions(monkeypatch):
  whole = _flat(Target.random(CFG, seed=3).params)                  # tiny: below the real threshold
  monkeypatch.setattr(leafwise_init, "LEAFWISE_ABOVE", 0)
  leaf = _flat(Target.random(CFG, seed=3).params)
  assert whole.keys() == leaf.keys()
  normal = []
  for name, x in leaf.items():
    assert x.shape == whole[name].shape, name
    if x.ndim == 1:                                 # norms' ones and biases' zeros: exactly the init's
      np.testing.assert_array_equal(x, whole[name], err_msg=name)
    else:
      assert not np.array_equal(x, whole[name]), name               # a fresh draw ...
      normal.append(x.ravel())
  assert {n.split(".")[-1] for n, x in leaf.items() if x.ndim == 1 and x.any() and (x == 1).all()} == {"weight"}
  draws = np.concatenate(normal)                                    # ... from normal(0, 0.02)
  assert abs(draws.std() - leafwise_init.STD) < 2e-4 and abs(draws.mean()) < 2e-4
  again = _flat(Target.random(CFG, seed=3).params)
  other = _flat(Target.random(CFG, seed=4).params)
  assert all(np.array_equal(leaf[n], again[n]) for n in leaf)       # seeded
  assert not all(np.array_equal(leaf[n], other[n]) for n in leaf if leaf[n].ndim > 1)
  leaves = [leaf[n] for n in leaf if leaf[n].ndim > 1]
  assert not any(np.array_equal(a, b) for a, b in zip(leaves, leaves[1:]) if a.shape == b.shape)  # own key each


def test_leafwise_head_and_mesh_placement(always_leafwise):
  target = Target.random(CFG, seed=0)
  mesh = shd.make_mesh(devices=jax.devices()[:1])
  cfg = HeadConfig.for_target(CFG, num_layers=2)
  graphdef, params = init_head(cfg, seed=1, mesh=mesh)
  _, abstract = abstract_head(cfg)
  assert jax.tree.map(lambda x: (x.shape, x.dtype), params) == jax.tree.map(lambda x: (x.shape, x.dtype), abstract)
  assert all(isinstance(x.sharding, jax.sharding.NamedSharding) for x in jax.tree.leaves(params))
  bf16 = Target.random(CFG, seed=0, dtype=jnp.bfloat16, mesh=mesh)
  assert {x.dtype for x in jax.tree.leaves(bf16.params)} == {jnp.dtype(jnp.bfloat16)}
  assert target.config is CFG


def test_the_threshold_covers_the_8b_and_spares_small_models():
  _, big = abstract_model(QWEN3_VL_8B, jnp.bfloat16)               # shapes only: no memory
  _, head = abstract_head(HeadConfig.for_target(QWEN3_VL_8B, num_layers=5), jnp.bfloat16)
  _, small = abstract_model(CFG)
  assert leafwise_init.use_leafwise(big) and leafwise_init.use_leafwise(head)
  assert not leafwise_init.use_leafwise(small)
  for path, var in nnx.to_flat_state(big):                          # every 8B leaf has a rule
    leafwise_init.leaf_kind(path, var.get_value().ndim)
  with pytest.raises(ValueError, match="no rule for the 1-dim parameter a.scale"):
    leafwise_init.leaf_kind(("a", "scale"), 1)
