"""The physical floor of an AR token on the device a benchmark runs on: the bytes a decode step must
read (the text decoder's weights, the lm_head, the KV cache at the prompt length; the embedding is
read one row a token) over the device's memory bandwidth, both as its vendor states it and as a
read probe measures it on the spot.

The nominal figures are the public per-device specifications (NOMINAL, sources beside them); a
device not in the table gets the probe's figure alone. The probe is one jitted reduction over a
large bf16 buffer (read-only, as a decode step's weights are), timed after a warm-up call; its
bandwidth is what a kernel reading that much memory reaches on this device, so AR's ms / the
probed floor says how far the decode step is from the memory system, and the nominal floor how
far from the datasheet.
"""

from __future__ import annotations

import dataclasses
import re
import time

import jax
import jax.numpy as jnp

from glance_jax.aot.bounds import CHIPS, step_bytes
from glance_jax.bench import timing


@dataclasses.dataclass(frozen=True)
class Nominal:
  name: str
  hbm_gb_s: float     # memory bandwidth per device, GB/s (1e9 bytes), from its datasheet
  source: str


_NV = "https://www.nvidia.com/en-us/data-center/"
# (pattern over jax's device_kind, lower-cased; the first match wins). jax names an H100 SXM
# "NVIDIA H100 80GB HBM3" and an H200 "NVIDIA H200"; word boundaries keep "GH200" (a Grace Hopper
# module, whose memory differs by SKU) out of the H200's row.
NOMINAL: tuple[tuple[str, Nominal], ...] = (
    (r"\bh200\b", Nominal("H200 SXM", 4800.0, _NV + "h200/")),
    (r"\bh100\b.*pcie", Nominal("H100 PCIe", 2000.0, _NV + "h100/")),
    (r"\bh100\b.*nvl", Nominal("H100 NVL", 3900.0, _NV + "h100/")),
    (r"\bh100\b", Nominal("H100 SXM", 3350.0, _NV + "h100/")),
    (r"\bb200\b", Nominal("B200 (HGX)", 8000.0, _NV + "hgx/")),
    (r"\ba100\b.*80gb", Nominal("A100 80GB SXM", 2039.0, _NV + "a100/")),
    (r"\ba100\b", Nominal("A100 40GB", 1555.0, _NV + "a100/")),
    (r"\bl40s\b", Nominal("L40S", 864.0, _NV + "l40s/")),
    (r"\bl4\b", Nominal("L4", 300.0, _NV + "l4/")),
    (r"tpu v5 ?lite|tpu v5e", Nominal("TPU v5e", CHIPS["v5e"].hbm_gb_s, CHIPS["v5e"].source)),
    (r"tpu v5p?$", Nominal("TPU v5p", CHIPS["v5p"].hbm_gb_s, CHIPS["v5p"].source)),
    (r"tpu v6 ?lite|tpu v6e", Nominal("TPU v6e", CHIPS["v6e"].hbm_gb_s, CHIPS["v6e"].source)),
)


def nominal(device_kind: str) -> Nominal | None:
  """The datasheet bandwidth of a device, by jax's device_kind (None where the table lacks it)."""
  kind = device_kind.strip().lower()
  return next((n for pat, n in NOMINAL if re.search(pat, kind)), None)


def probe_gb_s(nbytes: int, repeats: int = 5, device=None) -> float:
  """Read bandwidth in GB/s: a jitted f32-accumulated sum over `nbytes` of bf16 (reshaped [rows,
  4096] so the reduction tiles well), the median of `repeats` timed calls after one warm-up."""
  cols = 4096
  rows = max(1, nbytes // (2 * cols))
  x = jax.device_put(jnp.ones((rows, cols), jnp.bfloat16), device)
  f = jax.jit(lambda a: jnp.sum(a, dtype=jnp.float32))
  f(x).block_until_ready()
  times = []
  for _ in range(repeats):
    t = time.perf_counter()
    f(x).block_until_ready()
    times.append(time.perf_counter() - t)
  del x
  return rows * cols * 2 / timing.median(times) / 1e9


def floor(config, context: int, bytes_per_param: int, device_kind: str, probed_gb_s: float | None) -> dict:
  """The floor of one AR token of `config`'s target at a `context`-token cache, one device."""
  t = dataclasses.asdict(config.text)
  total = step_bytes(t, context, bytes_per_param)
  weights = step_bytes(t, 0, bytes_per_param)
  nom = nominal(device_kind)
  out = dict(device_kind=device_kind, gb_per_token=total / 1e9, weights_gb=weights / 1e9,
             kv_gb=(total - weights) / 1e9, context=context, bytes_per_param=bytes_per_param,
             nominal=None, probed_gb_s=probed_gb_s,
             probed_ms=total / (probed_gb_s * 1e9) * 1e3 if probed_gb_s else None)
  if nom:
    out["nominal"] = dict(dataclasses.asdict(nom), ms=total / (nom.hbm_gb_s * 1e9) * 1e3)
  return out


def describe(f: dict, ar_ms: float) -> str:
  """One paragraph: the floor's bytes, its ms at each bandwidth, and AR's ms against them."""
  parts = [f"Floor of an AR token: {_size(f['gb_per_token'])} read ({_size(f['weights_gb'])} of decoder weights "
           f"and lm_head, {_size(f['kv_gb'])} of KV at {f['context']} tokens)"]
  if f["nominal"]:
    n = f["nominal"]
    parts.append(f"{n['ms']:.2f} ms at the {n['name']}'s datasheet {n['hbm_gb_s']:.0f} GB/s ({n['source']}): "
                 f"AR at {n['ms'] / ar_ms:.0%} of it ({ar_ms / n['ms']:.2f}x the floor)")
  else:
    parts.append(f"no datasheet figure for {f['device_kind']!r} (physical_floor.NOMINAL)")
  if f["probed_gb_s"]:
    parts.append(f"{f['probed_ms']:.2f} ms at the probed {f['probed_gb_s']:.0f} GB/s (a read-only reduction): "
                 f"AR at {f['probed_ms'] / ar_ms:.0%} of it")
  return "; ".join(parts) + "."


def _size(gb: float) -> str:
  return f"{gb:.2f} GB" if gb >= 0.1 else f"{gb * 1e3:.2f} MB"
