"""Prefill + decode, and the GLANCE loop with target and head sharded, give the same tokens on
1 device and on 8 fake CPU devices (2x2x2 mesh)."""

import os
import pathlib
import subprocess
import sys

import pytest

from glance_jax import sharding as shd

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_sharded_decode_matches_single_device():
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu",
             PYTHONPATH=str(ROOT))
  r = subprocess.run([sys.executable, "-m", "tests.sharded_decode_check"], cwd=ROOT, env=env,
                     capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
  assert "SHARDED_OK" in r.stdout


def test_mesh_that_does_not_fit_devices_is_a_clear_error():
  import jax
  with pytest.raises(shd.MeshError, match=r"needs 16 devices"):
    shd.make_mesh((2, 2, 4), devices=jax.devices()[:1])


def test_rules_replicate_non_dividing_dims():
  import jax
  import numpy as np
  from jax.sharding import Mesh
  devs = np.asarray(jax.devices()[:1] * 1).reshape(1, 1, 1)
  mesh = Mesh(devs, shd.MESH_AXES)
  assert shd.logical_to_spec((shd.HEADS, shd.EMBED), (6, 4), mesh) == jax.sharding.PartitionSpec(None, None)
