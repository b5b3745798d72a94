"""glance-auto's round-cost table measured on the machine it runs on, at first use, and cached.

The built-in tables (decode/policies/round_cost_default*.json) were measured on one CPU; on another
they mis-choose (a 32 MiB-L3 machine: the testbed's t_round(15) / t_AR 8.0 against the table's 6.87,
glance-auto 0.86x AR on caption there against glance-15's 0.93x). `--round-cost device` instead:

  1. looks for a table measured for this key: the backend and device kind, the target's and the
     head's shapes and dtype, the batch and the budget (a hash of them names the file) under
     $GLANCE_JAX_CACHE/round_cost (default ~/.cache/glance_jax/round_cost);
  2. if none, times the real loop on the prompt at hand (bench/calibrate.measure_costs: AR and every
     width glance-auto and ngram may compile, each forced in its own loop, `reps` interleaved runs
     of `max_new_tokens` tokens), writes the table there (atomically) and uses it.

The E[A] calibration is the head's, not the device's: it is copied from the built-in table. The
table's meta records how it was obtained ("source"), which decode.py prints and the bench report
keeps, so every glance-auto figure says whose costs chose its widths.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
import time

DEVICE = "device"         # the --round-cost value that asks for this


def cache_dir() -> pathlib.Path:
  root = os.environ.get("GLANCE_JAX_CACHE") or pathlib.Path.home() / ".cache" / "glance_jax"
  return pathlib.Path(root) / "round_cost"


def table_key(target, head, *, batch: int, budget: int) -> dict:
  """What a measured table is valid for."""
  import jax
  t, h = target.config.text, head.config
  return {"backend": jax.default_backend(), "device": str(jax.devices()[0].device_kind),
          "hidden_size": t.hidden_size, "num_layers": t.num_hidden_layers, "vocab_size": t.vocab_size,
          "dtype": str(getattr(target.dtype, "__name__", target.dtype)), "head_layers": h.num_hidden_layers,
          "block_size": h.block_size, "batch": int(batch), "budget": int(budget)}


def table_path(key: dict) -> pathlib.Path:
  digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
  return cache_dir() / f"{key['backend']}-{digest}.json"


def device_round_cost(target, head, inputs, *, batch: int = 1, budget: int = 63, reps: int = 1,
                      max_new_tokens: int = 32, log=print):
  """The RoundCost for this device, target, head, batch and budget: cached, or measured now on
  `inputs` (one prompt's ModelInputs) and cached. Its meta["source"] says which."""
  from glance_jax.decode import policies
  key = table_key(target, head, batch=batch, budget=budget)
  path = table_path(key)
  if path.exists():
    rc = policies.read_round_cost(path)
    stale = rc.check_matches(key)
    if not stale:
      return dataclasses.replace(rc, meta={**rc.meta, "source": f"measured on this device earlier ({path})"})
    log(f"round cost: {path} no longer matches ({stale[0]}); measuring again")
  table = measure_table(target, head, inputs, key, budget=budget, reps=reps, max_new_tokens=max_new_tokens, log=log)
  path.parent.mkdir(parents=True, exist_ok=True)
  tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
  tmp.write_text(json.dumps(table, indent=1))
  os.replace(tmp, path)
  rc = policies.read_round_cost(path)
  return dataclasses.replace(rc, meta={**rc.meta, "source": f"measured on this device now ({path})"})


def measure_table(target, head, inputs, key: dict, *, budget: int, reps: int, max_new_tokens: int, log=print) -> dict:
  """A cost table (policies COST_SCHEMA) timed in the real loop on `inputs`."""
  from glance_jax.bench.calibrate import measure_costs
  from glance_jax.bench.runner import Prompt
  from glance_jax.decode import policies
  t0 = time.perf_counter()
  prompt = Prompt(task="first-use", file="", id="first-use", inputs=inputs,
                  signature=(tuple(inputs.input_ids.shape),))
  costs = measure_costs(target, head, [prompt], budget=budget, reps=reps, max_new_tokens=max_new_tokens, log=log)
  base = policies.default_round_cost(key["batch"])
  calib = {"predicted": list(base.calibration[0]), "observed": list(base.calibration[1])} if base.calibration else {}
  log(f"round cost: measured on this device in {time.perf_counter() - t0:.0f} s "
      f"(AR {costs['t_ar_ms']:.2f} ms a round; t(w) / t_AR {costs['t_over_ar']})")
  return {"schema": policies.COST_SCHEMA, "t_over_ar": costs["t_over_ar"],
          "ngram_t_over_ar": costs["ngram_t_over_ar"], "t_ar_ms": costs["t_ar_ms"],
          "calibration": calib,
          "meta": {**key, "source": "python -m glance_jax.bench.device_cost (first use)",
                   "measured": time.strftime("%Y-%m-%d %H:%M:%S"), "reps": reps,
                   "max_new_tokens": max_new_tokens, "calibration_from": base.path}}
