"""glance-auto's round costs measured on this machine at first use and cached (bench/device_cost.py)."""

import json
import pathlib

import numpy as np
import pytest

from glance_jax.bench import device_cost as dc
from glance_jax.decode import policies
from tests import decode_fixtures as fx
from tests import oracle


@pytest.fixture(scope="module")
def world():
  target = fx.lively_target(oracle.CONFIG_A, seed=11)
  head = fx.lively_head(target, seed=12)
  return target, head, fx.batch(oracle.CONFIG_A, seed=3, rows=1, with_images=True)


def test_first_use_measures_then_the_cache_answers(world, tmp_path, monkeypatch):
  target, head, inputs = world
  monkeypatch.setenv("GLANCE_JAX_CACHE", str(tmp_path))
  calls = []
  real = dc.measure_table
  monkeypatch.setattr(dc, "measure_table", lambda *a, **k: calls.append(1) or real(*a, **k))
  rc = dc.device_round_cost(target, head, inputs, budget=15, max_new_tokens=8, log=lambda *_: None)
  assert calls == [1] and rc.meta["source"].startswith("measured on this device now")
  path = dc.table_path(dc.table_key(target, head, batch=1, budget=15))
  assert path.parent == tmp_path / "round_cost" and path.exists()
  data = json.loads(path.read_text())
  # every width glance-auto and ngram may compile, timed against AR: a real measurement (> 0, finite)
  assert sorted(map(int, data["t_over_ar"])) == list(policies.auto_widths(15))
  assert sorted(map(int, data["ngram_t_over_ar"])) == list(policies.ngram_widths(15))
  assert all(np.isfinite(v) and v > 0 for v in data["t_over_ar"].values()) and data["t_ar_ms"] > 0
  assert data["meta"]["hidden_size"] == target.config.text.hidden_size and data["meta"]["batch"] == 1
  # the compiled set: the built-in table's calibration rounds (the head's) replayed on these costs,
  # every candidate set timed in its own loop, the best one written for glance-auto to compile
  assert data["auto_set"] and set(data["auto_set"]) <= set(policies.auto_widths(15)) - {0}
  assert data["auto_sets"][0]["auto_set"] == data["auto_set"] and "replayed" in data["meta"]["auto_set_from"]
  # the rule: the fewest widths within SET_MARGIN of the best replayed tokens per AR step
  top = max(r["tokens_per_ar_step"] for r in data["auto_sets"])
  chosen = data["auto_sets"][0]
  assert chosen["tokens_per_ar_step"] * (1 + dc.SET_MARGIN) >= top
  assert all(r["tokens_per_ar_step"] * (1 + dc.SET_MARGIN) < top for r in data["auto_sets"]
             if len(r["auto_set"]) < len(chosen["auto_set"]))
  assert rc.compiled == tuple(data["auto_set"])
  again = dc.device_round_cost(target, head, inputs, budget=15, log=lambda *_: None)
  assert calls == [1] and again.meta["source"].startswith("measured on this device earlier")
  assert again.widths == rc.widths
  # a key the file no longer matches (another budget names another file; an edited one is re-measured)
  data["meta"]["hidden_size"] = 1
  path.write_text(json.dumps(data))
  said = []
  dc.device_round_cost(target, head, inputs, budget=15, max_new_tokens=8, log=said.append)
  assert calls == [1, 1] and any("no longer matches" in s for s in said)
  assert dc.table_path(dc.table_key(target, head, batch=1, budget=63)) != path
  # a new built-in calibration (a new shipped head) names another file: measured again, not reused
  other = tmp_path / "other_default.json"
  base = json.loads(pathlib.Path(policies.default_round_cost(1).path).read_text())
  base["calibration"] = {"predicted": [0.0, 15.0], "observed": [0.0, 7.5]}
  other.write_text(json.dumps(base))
  monkeypatch.setattr(policies, "default_round_cost", lambda batch=1: policies.read_round_cost(other))
  assert dc.table_path(dc.table_key(target, head, batch=1, budget=15)) != path


def test_decode_cli_says_whose_costs_chose_the_widths(world, tmp_path, monkeypatch):
  from glance_jax.cli import decode as cli
  from glance_jax.testing.checkpoint import make_tiny_checkpoint
  monkeypatch.setenv("GLANCE_JAX_CACHE", str(tmp_path / "cache"))
  # the timing itself is the test above's; here a table of the right widths stands in for it
  table = {"schema": policies.COST_SCHEMA, "t_over_ar": {"0": 1.5, "15": 3.0, "31": 4.0, "63": 6.0},
           "ngram_t_over_ar": {"0": 1.0, "3": 2.0, "7": 2.5, "15": 3.0}, "t_ar_ms": 1.0}
  monkeypatch.setattr(dc, "measure_table", lambda target, head, inputs, key, **kw: {**table, "meta": key})
  model = make_tiny_checkpoint(tmp_path / "m", seed=2)
  base = ["--model", str(model), "--method", "glance", "--budget", "auto", "--max-new-tokens", "6"]
  from glance_jax.head import Head, save_head
  from glance_jax.qwen3_vl.target import load_target
  import jax.numpy as jnp
  h = Head.random(load_target(model, dtype=jnp.float32), seed=0, num_layers=1)
  save_head(tmp_path / "h", h.config, h.params)
  res = cli.main(base + ["--head", str(tmp_path / "h"), "--round-cost", "device"])
  assert res["round_cost"].startswith("measured on this device now")
  assert cli.main(base + ["--head", str(tmp_path / "h")])["round_cost"] == "built-in table (the testbed's CPU)"


def test_a_cpu_table_is_kept_per_host(world, monkeypatch):
  """jax names every CPU "cpu"; the key also holds the host's processor and last-level cache, so a
  cache directory shared by two hosts keeps one table each (a round's cost in AR steps differs)."""
  target, head, _ = world
  key = dc.table_key(target, head, batch=1, budget=15)
  assert key["host"] == dc.cpu_host() and "x" in key["host"]
  monkeypatch.setattr(dc, "cpu_host", lambda: "Other CPU x2, L3 300M")
  other = dc.table_key(target, head, batch=1, budget=15)
  assert other["host"] == "Other CPU x2, L3 300M" and dc.table_path(other) != dc.table_path(key)
