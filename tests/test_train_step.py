"""The train step: recipe optimizer, learning on a fixed batch, one trace and one compile, the frozen
target untouched and outside the optimizer, cached features, bf16 compute on fp32 master weights,
clear errors, and (in a subprocess with 8 fake devices) sharded == unsharded."""

import os
import pathlib
import subprocess
import sys
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from glance_jax.config import ConfigError, tiny_config
from glance_jax.head.config import HeadConfig
from glance_jax.train import batch as tb
from glance_jax.train import optim
from glance_jax.train import step as ts
from tests import train_fixtures as fx

ROOT = pathlib.Path(__file__).resolve().parents[1]
CFG = fx.TARGET_CFG
STEPS = 30
# XLA backend optimisation level 0 halves the CPU compile time of the step (numerics are still
# fp32; every comparison below is between steps compiled alike).
FAST = {"xla_backend_optimization_level": 0}
KW = dict(block_size=4, num_anchors=8, gamma=3.0, chunk=3, compiler_options=FAST)


def _np(tree):
  return jax.tree.map(np.asarray, tree)


@pytest.fixture(scope="module")
def run():
  """30 steps on one fixed text batch (the image path is covered by the sharded check)."""
  compiles = []

  def listen(event, _, **kw):
    if event == "/jax/core/compile/backend_compile_duration":
      compiles.append(kw.get("fun_name"))

  jax.monitoring.register_event_duration_secs_listener(listen)
  try:
    target = fx.lively_target(CFG, 0)
    hc = HeadConfig.for_target(CFG, num_layers=2, block_size=4)
    tx, sched = optim.make_optimizer(total_steps=STEPS, lr=3e-3)
    gd, state = ts.init_train_state(hc, tx=tx, seed=0, head=fx.lively_head(hc, 1))
    init = _np(state.params)
    target_before = _np(target.params)
    step = ts.make_train_step(hc, gd, CFG, target.graphdef, tx=tx, schedule=sched, **KW)
    host = fx.text_batch(CFG, rows=4, seed=0)
    batch = tb.shard_batch(host)
    hist = []
    for _ in range(STEPS):
      state, m = step(state, target.params, batch)
      hist.append(jax.device_get(m))
    other = tb.shard_batch(fx.text_batch(CFG, rows=4, seed=1))          # new content, same shapes
    state, _ = step(state, target.params, other)
  finally:
    jax.monitoring.unregister_event_duration_listener(listen)
  return types.SimpleNamespace(target=target, hc=hc, tx=tx, sched=sched, gd=gd, state=state,
                               init=init, target_before=target_before, step=step, host=host,
                               batch=batch, hist=hist, compiles=compiles)


def test_loss_decreases_on_a_fixed_batch(run):
  losses = [float(m["loss"]) for m in run.hist]
  assert all(np.isfinite(losses))
  assert np.mean(losses[-5:]) < 0.6 * losses[0], losses
  first, last = run.hist[0], run.hist[-1]
  assert float(last["acc"]) > float(first["acc"]) and float(last["accept_len"]) > 1.0
  assert first["acc_per_offset"].shape == (3,)
  np.testing.assert_allclose(float(first["lr"]), float(run.sched(0)))


def test_step_traces_and_compiles_once(run):
  assert run.step.num_traces() == 1
  assert run.compiles.count("jit(train_step)") == 1, run.compiles
  assert int(run.state.step) == STEPS + 1


def test_target_is_frozen_and_outside_the_optimizer(run):
  # the target's params were an argument, never donated, never changed
  jax.tree.map(np.testing.assert_array_equal, _np(run.target.params), run.target_before)
  # the optimizer holds exactly the head: mu and nu shaped like its params, plus scalars
  head_shapes = sorted(x.shape for x in jax.tree.leaves(run.init))
  opt_arrays = [x for x in jax.tree.leaves(run.state.opt_state) if x.ndim > 0]
  assert sorted(x.shape for x in opt_arrays) == sorted(head_shapes * 2)
  emb = run.target.params["model"]["language_model"]["embed_tokens"]["weight"].get_value()
  assert emb.shape not in head_shapes
  # master weights stay fp32 and moved
  assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(run.state.params))
  moved = jax.tree.map(lambda a, b: not np.array_equal(a, b), run.init, _np(run.state.params))
  assert all(jax.tree.leaves(moved))


def test_cached_features_and_bf16_compute(run, tmp_path):
  """A step on cached features equals the online step; bf16 compute stays close to fp32 while
  the master weights and optimizer moments stay fp32."""
  feats = ts.make_feature_fn(run.target.graphdef, run.hc.target_layer_ids, compiler_options=FAST)(
      run.target.params, run.batch)
  ids = [f"row{i}" for i in range(4)]
  cache = tb.FeatureCache(tmp_path, tap_layers=run.hc.target_layer_ids)
  cache.put_batch(ids, np.asarray(feats), run.host.attention_mask.sum(1))
  cached = jnp.asarray(cache.collate(ids, fx.SEQ_LEN))
  out = {}
  for dtype in (jnp.float32, jnp.bfloat16):
    _, state = ts.init_train_state(run.hc, tx=run.tx, seed=0, head=fx.lively_head(run.hc, 1))
    step = ts.make_train_step(run.hc, run.gd, CFG, run.target.graphdef, tx=run.tx,
                              compute_dtype=dtype, **KW)
    state, m = step(state, run.target.params, run.batch, cached)
    out[dtype] = (float(m["loss"]), state)
  np.testing.assert_allclose(out[jnp.float32][0], float(run.hist[0]["loss"]), rtol=1e-5)
  np.testing.assert_allclose(out[jnp.bfloat16][0], out[jnp.float32][0], rtol=3e-2)
  bf16_state = out[jnp.bfloat16][1]
  assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(bf16_state.params))
  assert all(x.dtype in (jnp.float32, jnp.int32) for x in jax.tree.leaves(bf16_state.opt_state))


def test_block_size_and_target_mismatch_are_clear_errors(run):
  with pytest.raises(ValueError, match="block_size 8 disagrees with the head's configured block_size 4"):
    ts.make_train_step(run.hc, run.gd, CFG, run.target.graphdef, tx=run.tx,
                       **dict(KW, block_size=8))
  other = tiny_config(hidden=48, heads=6, kv_heads=2, head_dim=16, intermediate=96)
  with pytest.raises(ConfigError, match="hidden_size 64 != target hidden_size 48"):
    ts.make_train_step(run.hc, run.gd, other, run.target.graphdef, tx=run.tx, **KW)
  with pytest.raises(ValueError, match="pass gamma"):
    hc6 = HeadConfig.for_target(CFG, num_layers=2, block_size=6)
    ts.make_train_step(hc6, run.gd, CFG, run.target.graphdef, tx=run.tx, block_size=6,
                       num_anchors=4)


# --- optimizer ----------------------------------------------------------------------------------------

def test_schedule_is_specforge_warmup_cosine():
  s = optim.lr_schedule(total_steps=100, lr=6e-4, warmup_frac=0.04)    # warmup 4 steps
  got = np.asarray([float(s(t)) for t in range(100)])
  np.testing.assert_allclose(got[:4], 6e-4 * np.arange(1, 5) / 4, rtol=1e-6)
  np.testing.assert_allclose(got[4:], 3e-4 * (1 + np.cos(np.pi * np.arange(96) / 96)), rtol=1e-5,
                             atol=1e-10)
  assert got[99] < 1e-6


def test_adamw_clip_and_betas_match_the_recipe():
  """Two steps by hand: clip to global norm 1, torch AdamW (0.9, 0.999, eps 1e-8, wd 0)."""
  tx, sched = optim.make_optimizer(total_steps=10, lr=1e-2, warmup_frac=0.0)
  p = {"w": jnp.ones(3)}
  g1, g2 = np.array([30.0, 40.0, 0.0]), np.array([0.1, -0.2, 0.05])
  state = tx.init(p)
  u1, state = tx.update({"w": jnp.asarray(g1)}, state, p)
  u2, state = tx.update({"w": jnp.asarray(g2)}, state, p)
  c1 = g1 / 50.0                                                           # clipped; g2 is not
  m1, v1 = 0.1 * c1, 0.001 * c1**2
  m2, v2 = 0.9 * m1 + 0.1 * g2, 0.999 * v1 + 0.001 * g2**2
  ref1 = -float(sched(0)) * (m1 / 0.1) / (np.sqrt(v1 / 0.001) + 1e-8)
  ref2 = -float(sched(1)) * (m2 / (1 - 0.9**2)) / (np.sqrt(v2 / (1 - 0.999**2)) + 1e-8)
  np.testing.assert_allclose(u1["w"], ref1, rtol=1e-5, atol=1e-9)
  np.testing.assert_allclose(u2["w"], ref2, rtol=1e-5, atol=1e-9)


# --- sharded == unsharded ---------------------------------------------------------------------------

def test_sharded_train_matches_single_device():
  # backend optimisation level 0: the subprocess compiles the step twice (1 and 8 devices), and
  # both runs share the flag, so the comparison is unaffected.
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT),
             XLA_FLAGS="--xla_force_host_platform_device_count=8 --xla_backend_optimization_level=0")
  r = subprocess.run([sys.executable, "-m", "tests.sharded_train_check"], cwd=ROOT, env=env,
                     capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
  assert "SHARDED_TRAIN_OK" in r.stdout

