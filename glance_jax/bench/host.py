"""The host a CPU measurement was taken on: jax names every CPU "cpu", but a round's cost in AR steps
differs from one processor and cache to another (two hosts' 15-wide rounds: 3.51 and 4.12 AR steps)."""

from __future__ import annotations

import os
import pathlib


def cpu_host() -> str:
  """This host's processor as a round's cost sees it: "<model name> x<cores>, L3 <size>" (Linux sysfs /
  procfs; what cannot be read is left out)."""
  model = ""
  try:
    for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
      if line.startswith("model name"):
        model = line.split(":", 1)[1].strip()
        break
  except OSError:
    pass
  caches = []
  for idx in sorted(pathlib.Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
    try:
      caches.append(f"L{(idx / 'level').read_text().strip()} {(idx / 'size').read_text().strip()}")
    except OSError:
      continue
  last = caches[-1] if caches else ""
  return ", ".join(x for x in (f"{model or 'cpu'} x{os.cpu_count()}", last) if x)
