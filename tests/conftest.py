"""Test-wide environment, set before any test imports jax.

With jax[tpu] installed (requirements-test.txt), every process that initialises jax's backends
loads libtpu: it prints TPU_ACCELERATOR_TYPE / TPU_WORKER_HOSTNAMES warnings and takes the host's
/tmp/libtpu_lockfile, which a second test process then fails to get. The suite runs on CPU, so
the CPU backend alone is asked for; tests/test_aot.py compiles for TPU topologies in a subprocess
(the topology API works under JAX_PLATFORMS=cpu too).
"""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
