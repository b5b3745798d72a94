"""One of 2 processes (jax.distributed on localhost, 4 CPU devices each; see test_safetensors_io.py):
loads a checkpoint onto a (2, 4) mesh spanning both processes and prints the bytes this process
read through safetensors, so the test can check that each process reads only its own slices.

  python tests/sharded_load_check.py CHECKPOINT_DIR COORDINATOR PROCESS_ID
"""

import json
import sys

import jax
import numpy as np
import safetensors

ckpt, coordinator, process_id = sys.argv[1], sys.argv[2], int(sys.argv[3])
jax.distributed.initialize(coordinator_address=coordinator, num_processes=2, process_id=process_id)

import jax.numpy as jnp  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

from glance_jax.io import index_checkpoint, load_tensors  # noqa: E402
from tests.test_safetensors_io import sharded_load_tensors  # noqa: E402

read = {"bytes": 0, "calls": 0}
real_open = safetensors.safe_open


class CountingHandle:
  """safe_open that counts the bytes every slice / tensor read returns."""

  def __init__(self, path, framework):
    self._inner = real_open(path, framework=framework)

  def __enter__(self):
    self._inner.__enter__()
    return self

  def __exit__(self, *exc):
    return self._inner.__exit__(*exc)

  def _count(self, array):
    read["bytes"] += array.nbytes
    read["calls"] += 1
    return array

  def get_tensor(self, key):
    return self._count(self._inner.get_tensor(key))

  def get_slice(self, key):
    inner = self._inner.get_slice(key)
    return type("Slice", (), {"__getitem__": lambda _, index: self._count(inner[index])})()


safetensors.safe_open = CountingHandle
assert jax.process_count() == 2 and jax.device_count() == 8 and jax.local_device_count() == 4
mesh = Mesh(np.array(jax.devices()).reshape(2, 4), ("data", "model"))  # row i = process i
tensors, specs = sharded_load_tensors()
shardings = {k: NamedSharding(mesh, P(*spec)) for k, spec in specs.items()}
targets = {k: jax.ShapeDtypeStruct(v.shape, jnp.float32) for k, v in tensors.items()}
out = load_tensors(index_checkpoint(ckpt), targets, shardings=shardings)
for key, array in out.items():
  assert array.sharding == shardings[key], key
  for shard in array.addressable_shards:
    np.testing.assert_array_equal(np.asarray(shard.data),
                                  np.asarray(tensors[key], np.float32)[shard.index], err_msg=key)
print("READ " + json.dumps({"process": process_id, **read}), flush=True)
