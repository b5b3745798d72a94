"""glance-auto's round-cost table measured on the machine it runs on, at first use, and cached.

The built-in tables (decode/policies/round_cost_default*.json) were measured on one CPU; on another
they mis-choose (a 32 MiB-L3 machine: the testbed's t_round(15) / t_AR 8.0 against the table's 6.87,
glance-auto 0.86x AR on caption there against glance-15's 0.93x). `--round-cost device` instead:

  1. looks for a table measured for this key: the backend and device kind (on a CPU also the host's
     processor model, core count and last-level cache, since jax calls every CPU "cpu" and a round's
     cost in AR steps moves with the cache: 3.51 vs 4.12 on two hosts, docs/results.md), the target's and the
     head's shapes and dtype, the batch, the budget and a hash of the built-in table's calibration
     (a hash of them all names the file) under
     $GLANCE_JAX_CACHE/round_cost (default ~/.cache/glance_jax/round_cost);
  2. if none, times the real loop on the prompt at hand (bench/calibrate.measure_costs: AR and every
     width glance-auto and ngram may compile, each forced in its own loop, `reps` interleaved runs
     of `max_new_tokens` tokens), then the compiled set: each subset of the widths that could pay
     timed in its own loop (each of its widths forced in turn; every round of that loop builds the
     widest tree of the set) and glance-auto's policy replayed on the built-in table's calibration
     rounds with these costs (bench/auto_set.py); the best set is the table's 'auto_set'. It writes
     the table there (atomically) and uses it.

The E[A] calibration and the replayed rounds are the head's, not the device's: they come from the
built-in table. Without the compiled set, the policy compiled every width that could pay, built the
63-node tree every round, and ran 0.85-0.96x glance-15 on the testbed (docs/rounds.md). The
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

from glance_jax.bench.host import cpu_host   # table_key reads it from here (tests patch dc.cpu_host)

DEVICE = "device"         # the --round-cost value that asks for this
# 2: the compiled set chosen by the replay (a version-1 table, without it, is measured again)
TABLE_VERSION = 2
# a compiled set of more widths must beat the best set of fewer by more than this in the replay, which
# over-predicts multi-width sets on the testbed: {15, 31, 63} replayed 1% above {15} and benched 10%
# below glance-15 (geomean), {15, 31} replayed 6% above and benched 1% below (docs/rounds.md)
SET_MARGIN = 0.10


def cache_dir() -> pathlib.Path:
  root = os.environ.get("GLANCE_JAX_CACHE") or pathlib.Path.home() / ".cache" / "glance_jax"
  return pathlib.Path(root) / "round_cost"


def table_key(target, head, *, batch: int, budget: int) -> dict:
  """What a measured table is valid for."""
  import jax
  t, h = target.config.text, head.config
  backend = jax.default_backend()
  host = {"host": cpu_host()} if backend == "cpu" else {}
  return {"backend": backend, "device": str(jax.devices()[0].device_kind), **host,
          "hidden_size": t.hidden_size, "num_layers": t.num_hidden_layers, "vocab_size": t.vocab_size,
          "dtype": str(getattr(target.dtype, "__name__", target.dtype)), "head_layers": h.num_hidden_layers,
          "block_size": h.block_size, "batch": int(batch), "budget": int(budget),
          "table_version": TABLE_VERSION, "calibration": calibration_digest(batch)}


def calibration_digest(batch: int) -> str:
  """A hash of what a measured table takes from the built-in one: its E[A] calibration and the
  calibration rounds the compiled set is replayed on (the shipped head's, not the device's). In the
  key, so that a new built-in calibration (a new testbed head) measures the device again instead of
  reusing a table whose compiled set the old head's rounds chose."""
  from glance_jax.decode import policies
  base = json.loads(pathlib.Path(policies.default_round_cost(batch).path).read_text())
  part = {k: base.get(k) for k in ("calibration", "replay")}
  return hashlib.sha256(json.dumps(part, sort_keys=True).encode()).hexdigest()[:16]


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
  """A cost table (policies COST_SCHEMA) timed in the real loop on `inputs`; when the built-in table
  holds the head's calibration rounds ('replay', bench/calibrate.py), also the compiled set: each
  subset S of the widths that could pay timed in its own loop (every round of it builds the widest
  tree of S), the policy replayed on those rounds with these costs, the best S written as 'auto_set'."""
  from glance_jax.bench import auto_set as aset
  from glance_jax.bench.calibrate import measure_costs
  from glance_jax.bench.runner import Prompt
  from glance_jax.decode import policies
  t0 = time.perf_counter()
  prompt = Prompt(task="first-use", file="", id="first-use", inputs=inputs,
                  signature=(tuple(inputs.input_ids.shape),))
  costs = measure_costs(target, head, [prompt], budget=budget, reps=reps, max_new_tokens=max_new_tokens, log=log)
  base = policies.default_round_cost(key["batch"])
  base_json = json.loads(pathlib.Path(base.path).read_text())
  table = {"schema": policies.COST_SCHEMA, "t_over_ar": costs["t_over_ar"],
           "ngram_t_over_ar": costs["ngram_t_over_ar"], "t_ar_ms": costs["t_ar_ms"],
           "calibration": base_json.get("calibration") or {},
           "meta": {**key, "source": "python -m glance_jax.bench.device_cost (first use)",
                    "measured": time.strftime("%Y-%m-%d %H:%M:%S"), "reps": reps,
                    "max_new_tokens": max_new_tokens, "calibration_from": base.path}}
  replay = aset.replay_rounds(base_json, base.path)
  if replay is not None and replay[0].shape[1] == key["batch"]:
    pred, obs, rw = replay
    single = {int(w): t for w, t in costs["t_over_ar"].items()}
    allowed = [w for w in policies.auto_widths(budget) if w == 0 or w in rw]
    paying = policies.paying_widths({w: single[w] for w in allowed}, head.config.block_size - 1)
    timed = policies.RoundCost(single, base.calibration, per_width=base.per_width)
    set_costs = measure_costs(target, head, [prompt], budget=budget, reps=reps, max_new_tokens=max_new_tokens,
                              base=timed, sets=aset.candidate_sets(paying), only_sets=True,
                              log=log)["set_t_over_ar"]
    rows = aset.apply_choice(table, set_costs, pred, obs, rw, aset.table_width_knots(table, rw), margin=SET_MARGIN)
    table["meta"]["auto_set_from"] = f"{len(pred)} calibration rounds of {base.path} replayed on these costs"
    log(f"round cost: compiled set {table['auto_set']} ({rows[0]['vs_ar']:.2f}x AR replayed; "
        + ", ".join(f"{r['auto_set']}: {r['vs_ar']:.2f}" for r in rows[1:]) + ")")
  log(f"round cost: measured on this device in {time.perf_counter() - t0:.0f} s "
      f"(AR {costs['t_ar_ms']:.2f} ms a round; t(w) / t_AR {table['t_over_ar']})")
  return table
