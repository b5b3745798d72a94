"""TPU topologies from libtpu's ahead-of-time topology API: abstract devices, meshes, HBM per chip.

libtpu takes a process-wide lockfile (/tmp/libtpu_lockfile) when it loads; a second process on
the same host (a test, another compile) then fails with "Internal error when accessing libtpu
multi-process lockfile". Compiling needs no chip, so the lock is skipped
(ALLOW_MULTIPLE_LIBTPU_LOAD=1), which must be set before jax loads its plugins: `configure_env`
runs from glance_jax.aot's __init__.
"""

from __future__ import annotations

import os
from typing import Sequence

GB = 1e9

# HBM per chip (bytes) by device_kind, as libtpu names them.
HBM_BYTES = {"TPU v5 lite": 16 * 2**30, "TPU v5": 95 * 2**30, "TPU v6 lite": 32 * 2**30,
             "TPU v4": 32 * 2**30, "TPU v3": 16 * 2**30}

# Names known to compile here (libtpu 0.0.42.1), for the error line; others of the same form may too.
KNOWN = ("v5e:2x2", "v5e:2x4", "v5e:4x4", "v5p:2x2x1", "v5p:2x2x2", "v6e:2x2", "v6e:2x4", "v4:2x2x1",
         "v4:2x2x2", "v3:2x2")


class TopologyError(ValueError):
  """An unknown topology name, or a mesh that does not match its devices."""


def configure_env() -> None:
  os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
  # libtpu reads these on load and warns (harmless for compiling) when they are missing.
  os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
  os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")


def libtpu_version() -> str | None:
  """The installed libtpu's version, or None when libtpu is missing."""
  from importlib import metadata
  for dist in ("libtpu", "libtpu-nightly"):
    try:
      return metadata.version(dist)
    except metadata.PackageNotFoundError:
      continue
  return None


MISSING = ('libtpu is not installed: pip install "jax[tpu]==0.10.2" (libtpu 0.0.42.1) to compile for TPUs '
           'from this host')


def devices(name: str):
  """The abstract devices of topology `name` (e.g. v5e:2x2)."""
  if libtpu_version() is None:
    raise TopologyError(MISSING)
  from jax.experimental import topologies
  try:
    return list(topologies.get_topology_desc(platform="tpu", topology_name=name).devices)
  except Exception as e:  # libtpu raises JaxRuntimeError INVALID_ARGUMENT for names it cannot parse
    first = str(e).splitlines()[0][:200]
    raise TopologyError(f"unknown TPU topology {name!r} ({first}); known: {', '.join(KNOWN)}") from None


def mesh_for(name: str, shape: Sequence[int]):
  """A (data, fsdp, tensor) mesh of `shape` over topology `name`'s devices."""
  from glance_jax import sharding as shd
  devs = devices(name)
  try:
    return shd.make_mesh(shape, devices=devs)
  except shd.MeshError as e:
    raise TopologyError(f"--mesh {','.join(map(str, shape))} does not fit topology {name} "
                        f"({len(devs)} devices): {e}") from None


def hbm_bytes(mesh) -> int | None:
  """HBM per device: a chip's HBM split over its devices (v4 shows each TensorCore as one)."""
  devs = list(mesh.devices.flat)
  chip = HBM_BYTES.get(devs[0].device_kind)
  if chip is None:
    return None
  chips = len({tuple(getattr(d, "coords", (i,))) for i, d in enumerate(devs)})
  return chip * chips // len(devs)
