"""Run in a subprocess with 8 fake CPU devices (see test_train_step.py): the same 3 train steps on
one device and on a 2x2x2 (data, fsdp, tensor) mesh give the same losses and parameters."""

import jax
import numpy as np
from flax import nnx

from glance_jax import sharding as shd
from glance_jax.head.config import HeadConfig
from glance_jax.train import batch as tb
from glance_jax.train import optim, step as ts
from tests import train_fixtures as fx


COMPILES = []
jax.monitoring.register_event_duration_secs_listener(
    lambda event, _, **kw: COMPILES.append(kw.get("fun_name"))
    if event == "/jax/core/compile/backend_compile_duration" else None)


def run(target, hc, batch, mesh):
  tx, sched = optim.make_optimizer(total_steps=10, lr=2e-3, warmup_frac=0.1)
  gd, state = ts.init_train_state(hc, tx=tx, seed=3, mesh=mesh)
  sh = None if mesh is None else ts.train_state_shardings(hc, tx, mesh)
  step = ts.make_train_step(hc, gd, target.config, target.graphdef, tx=tx, block_size=hc.block_size,
                            num_anchors=6, gamma=3.0, chunk=4, schedule=sched, state_sharding=sh)
  dev_batch = tb.shard_batch(batch, mesh)
  init = jax.tree.map(np.asarray, state.params)
  losses = []
  for _ in range(3):
    state, m = step(state, target.params, dev_batch)
    losses.append(float(m["loss"]))
  assert step.num_traces() == 1, step.num_traces()
  return init, losses, state


def main():
  assert jax.device_count() == 8, jax.devices()
  cfg = fx.TARGET_CFG
  target = fx.lively_target(cfg, 1)
  hc = HeadConfig.for_target(cfg, num_layers=2, block_size=4)
  batch = fx.image_batch(cfg, rows=4, seed=0)
  init1, losses1, state1 = run(target, hc, batch, None)

  mesh = shd.make_mesh((2, 2, 2))
  init8, losses8, state8 = run(target.shard(mesh), hc, batch, mesh)
  assert COMPILES.count("jit(train_step)") == 2, COMPILES   # once per layout, never again
  # born sharded: the same initial values, already laid out on the mesh, moments alike
  jax.tree.map(np.testing.assert_array_equal, init1, init8)
  flat = dict(nnx.to_flat_state(state8.params))
  q = flat[("layers", 0, "self_attn", "q_proj", "weight")].get_value()
  assert q.sharding.spec == jax.sharding.PartitionSpec("tensor", "fsdp"), q.sharding
  assert len(q.sharding.device_set) == 8
  mu = dict(nnx.to_flat_state(state8.opt_state[1][0].mu))
  for path, var in flat.items():
    assert mu[path].get_value().sharding == var.get_value().sharding, path
  assert state8.step.sharding.is_fully_replicated

  print("losses", losses1, losses8)
  np.testing.assert_allclose(losses8, losses1, rtol=1e-5)
  # Per tensor: relative error in norm <= 2e-5 (seen: 7e-6), and all but a handful of elements
  # within 1e-6. Adam divides each gradient by its own running RMS, so an element whose gradient is close to 0
  # turns reduction-order roundoff (different on 8 devices) into an lr-sized difference; those
  # elements are rare and bounded by the step size.
  p1 = jax.tree.leaves(jax.tree.map(np.asarray, state1.params))
  p8 = jax.tree.leaves(jax.tree.map(np.asarray, state8.params))
  worst = 0.0
  for a, b in zip(p1, p8):
    rel = float(np.linalg.norm(a - b) / np.linalg.norm(a))
    worst = max(worst, rel)
    assert rel <= 2e-5, rel
    assert np.mean(np.abs(a - b) > 1e-6) <= 1e-3, np.sum(np.abs(a - b) > 1e-6)
    assert np.max(np.abs(a - b)) <= 3 * 2e-3, np.max(np.abs(a - b))
  print("worst per-tensor relative difference", worst)
  print("SHARDED_TRAIN_OK")


if __name__ == "__main__":
  main()
