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


def _abstract(shape):
  import jax
  return jax.sharding.AbstractMesh(shape, shd.MESH_AXES)


def test_a_rule_may_name_several_mesh_axes():
  from jax.sharding import PartitionSpec as P
  mesh = _abstract((2, 4, 1))
  rows = (shd.BATCH, shd.LENGTH, shd.EMBED)
  # training: rows over data x fsdp; the width then finds fsdp taken and stays whole
  assert shd.logical_to_spec(rows, (8, 16, 32), mesh, shd.TRAIN_RULES) == P(("data", "fsdp"), None, None)
  # decoding keeps rows on data, so the width takes fsdp
  assert shd.logical_to_spec(rows, (8, 16, 32), mesh) == P("data", None, "fsdp")
  # 4 rows: data (2) divides, data x fsdp (8) does not -> rows on data only; 3 rows: on neither
  assert shd.logical_to_spec(rows, (4, 16, 32), mesh, shd.TRAIN_RULES) == P("data", None, "fsdp")
  assert shd.logical_to_spec(rows, (3, 16, 32), mesh, shd.TRAIN_RULES) == P(None, None, "fsdp")
  # size-1 axes are left out, a lone survivor is written as its name
  assert shd.logical_to_spec(rows, (8, 16, 32), _abstract((1, 8, 1)), shd.TRAIN_RULES) == P("fsdp", None, None)
  assert shd.shards(("data", "fsdp"), mesh) == 8 and shd.shards("fsdp", mesh) == 4 and shd.shards(None, mesh) == 1
  # parameters name no batch dimension: the two tables lay out every weight alike
  for axes, shape in (((shd.VOCAB, shd.EMBED), (64, 32)), ((shd.MLP, shd.EMBED), (16, 32)), ((shd.NORM,), (32,))):
    assert (shd.logical_to_spec(axes, shape, mesh, shd.TRAIN_RULES)
            == shd.logical_to_spec(axes, shape, mesh, shd.DEFAULT_RULES))


@pytest.mark.parametrize("rules, message", [
    ((("batch", ("data", "data")),), r"rule for 'batch': mesh axes \('data', 'data'\) repeat an axis"),
    ((("batch", 3),), r"rule for 'batch': mesh axes 3 are not a str, a tuple of str or None"),
    ((("batch", "data"), ("batch", None)), r"rule for 'batch' given twice"),
    ((("batch",),), r"rule \('batch',\): expected \(logical name, mesh axis"),
])
def test_bad_rules_are_one_clear_line(rules, message):
  with pytest.raises(shd.RulesError, match=message) as e:
    shd.logical_to_spec((shd.BATCH,), (8,), _abstract((2, 4, 1)), rules)
  assert "\n" not in str(e.value)


def test_rows_split_by_process_follows_data_x_fsdp():
  import types
  import numpy as np
  from glance_jax.train.driver import rows_split_by_process

  def mesh(shape, procs):
    devs = np.array([types.SimpleNamespace(process_index=p) for p in procs], dtype=object).reshape(shape)
    return types.SimpleNamespace(devices=devs, shape=dict(zip(shd.MESH_AXES, shape)), axis_names=shd.MESH_AXES)

  # (1, 4, 1) over 2 processes: rows split 4 ways over fsdp, process 0 holds shards 0-1
  assert rows_split_by_process(mesh((1, 4, 1), [0, 0, 1, 1]), 32, nproc=2)
  assert not rows_split_by_process(mesh((1, 4, 1), [0, 1, 0, 1]), 32, nproc=2)   # not contiguous
  assert not rows_split_by_process(mesh((1, 4, 1), [0, 0, 0, 1]), 32, nproc=2)   # not equal
  # (2, 2, 1): shards ordered data-major
  assert rows_split_by_process(mesh((2, 2, 1), [0, 0, 1, 1]), 32, nproc=2)
  assert rows_split_by_process(mesh((2, 2, 1), [0, 1, 2, 3]), 32, nproc=4)
  # tensor-parallel partners on two processes: each row shard spans both, no local share
  assert not rows_split_by_process(mesh((1, 2, 2), [0, 1, 0, 1]), 32, nproc=2)
  assert not rows_split_by_process(mesh((1, 4, 1), [0, 0, 1, 1]), 32, nproc=1)
