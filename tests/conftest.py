"""Test-wide environment, set before any test imports jax.

With jax[tpu] installed (requirements-test.txt), every process that initialises jax's backends
loads libtpu: it prints TPU_ACCELERATOR_TYPE / TPU_WORKER_HOSTNAMES warnings and takes the host's
/tmp/libtpu_lockfile, which a second test process then fails to get. The suite runs on CPU, so
the CPU backend alone is asked for; tests/test_aot.py compiles for TPU topologies in a subprocess
(the topology API works under JAX_PLATFORMS=cpu too).
"""

import os
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# One persistent compilation cache for every process of a run (both xdist workers and the
# subprocesses of the sharding, AOT and multi-process tests): the same tiny programs are compiled
# in many modules, and compiling dominates the suite's time on 2 cores. Entries are keyed by the
# program, the compile options and the jax version, so a cache left by an earlier run is safe.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(tempfile.gettempdir(), f"glance_jax_xla_cache_{os.getuid()}"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")

import gc  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
  """Drops jax's compiled programs after each test module. XLA:CPU maps each executable's code into
  the process (several maps a program); over the whole suite one process reached ~60k maps, at
  vm.max_map_count (65530 by default) an mmap fails and the next compile aborts or segfaults.
  Programs shared across modules are recompiled instead (a few seconds)."""
  yield
  import sys
  if "jax" in sys.modules:
    sys.modules["jax"].clear_caches()
  gc.collect()
