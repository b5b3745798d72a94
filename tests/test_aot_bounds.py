"""glance_jax.aot.bounds: time bounds from a compiled report (no compile here: a synthetic report
with the fields glance_jax.aot writes), the floor of the 8B and the pricing at a tau."""

import json

import pytest

from glance_jax.aot import bounds
from glance_jax.config import QWEN3_VL_8B


def _report(topology="v5e:2x2", devices=4):
  cfg = repr({"text": {k: getattr(QWEN3_VL_8B.text, k) for k in (
      "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
      "num_key_value_heads", "head_dim")}, "tie_word_embeddings": False})
  meta = {"topology": topology, "devices": devices, "sizes": {"config": cfg, "prompt_len": 1024}}
  progs = [
      {"name": "round.ar.b1", "kind": "round", "hbm_traffic": 3.9e9, "flops": 9e9, "collectives": {}},
      {"name": "round.glance63.b1", "kind": "round", "hbm_traffic": 4.9e9, "flops": 2.8e11,
       "collectives": {"all-reduce": 4e7, "all-gather": 2e7}},
      {"name": "loop.glance63.b1", "kind": "loop", "hbm_traffic": 5.5e9, "round_hbm_traffic": 5.0e9,
       "flops": 1.0, "collectives": {"all-gather": 9e9}, "round_collectives": {"all-gather": 6e7}},
      {"name": "round.ar.b8", "kind": "round", "hbm_traffic": 4.6e9, "flops": 7e10, "collectives": {}},
      {"name": "round.broken.b1", "kind": "round", "error": "out of memory"},
      {"name": "prefill.b1", "kind": "prefill", "hbm_traffic": 5.9e9, "flops": 4e12},
  ]
  return {"meta": meta, "programs": progs}


def test_bound_is_the_larger_of_traffic_and_flops_plus_collectives():
  b = bounds.bounds(_report(), taus={"x": 4.0})
  rows = {r["program"]: r for r in b["programs"]}
  assert sorted(rows) == ["loop.glance63.b1", "round.ar.b1", "round.ar.b8", "round.glance63.b1"]
  v5e = bounds.CHIPS["v5e"]
  g = rows["round.glance63.b1"]
  hbm, flops, ici = 4.9e9 / 819e9 * 1e3, 2.8e11 / 197e12 * 1e3, 6e7 / 200e9 * 1e3
  assert g["hbm_ms"] == pytest.approx(hbm) and g["flops_ms"] == pytest.approx(flops) and g["ici_ms"] == pytest.approx(ici)
  assert g["bound_ms"] == pytest.approx(max(hbm, flops) + ici) and g["limit"] == "hbm"
  ar = 3.9e9 / v5e.hbm_gb_s / 1e9 * 1e3
  assert g["x_ar"] == pytest.approx(g["bound_ms"] / ar)
  assert g["at_tau"]["x"]["speedup"] == pytest.approx(ar * 4.0 / g["bound_ms"])
  assert g["at_tau"]["x"]["ms_per_token"] == pytest.approx(g["bound_ms"] / 4.0)
  # and at its own taus in the paper (GLANCE at N = 63: 3.09 on captioning ... 5.12 on ChartQA)
  assert g["at_paper_tau"]["chartqa"]["speedup"] == pytest.approx(ar * 5.12 / g["bound_ms"])
  # a loop row is one iteration of its body, with its round's flops; batch 8 is priced against AR at 8
  lp = rows["loop.glance63.b1"]
  assert lp["hbm_ms"] == pytest.approx(5.0e9 / 819e9 * 1e3) and lp["flops_ms"] == pytest.approx(flops)
  assert lp["ici_ms"] == pytest.approx(6e7 / 200e9 * 1e3) and lp["x_ar"] is None   # no loop.ar.b1 here
  assert rows["round.ar.b8"]["limit"] == "hbm" and "at_tau" not in rows["round.ar.b8"]
  # the floor at batch 8 reads the weights once and 8 caches: its per-token floor is below batch 1's
  f1, f8 = rows["round.ar.b1"]["floor_ms"], rows["round.ar.b8"]["floor_ms"]
  kv = 36 * 2 * 8 * 128 * 1024 * 2 / 4 / 819e9 * 1e3                 # one row's cache, per device
  assert f8 == pytest.approx(f1 + 7 * kv) and rows["round.ar.b8"]["floor_ms_per_token"] == pytest.approx(f8 / 8)
  assert rows["round.ar.b8"]["x_floor"] == pytest.approx(rows["round.ar.b8"]["bound_ms"] / f8)


def test_the_8b_floor_is_its_text_weights_and_cache_over_bandwidth():
  b = bounds.bounds(_report("v5p:2x2x1", 1))
  # ~15.3 GB a token in bf16 at a 1k context (baselines.md section 7): 5.5 ms on one v5p chip
  assert b["floor_gb_per_device"] == pytest.approx(15.3, abs=0.15)
  assert b["floor_ms"] == pytest.approx(5.5, abs=0.06)
  assert bounds.bounds(_report("v6e:2x2", 1))["floor_ms"] == pytest.approx(9.3, abs=0.1)
  assert b["taus"] == bounds.PAPER_TAUS
  assert "v5p:2x2x1 (1 devices" in bounds.markdown(b) and "| round.glance63.b1 |" in bounds.markdown(b)


def test_unknown_chip_and_bench_taus(tmp_path):
  with pytest.raises(ValueError, match=r"report topology 'v9x:2x2': no chip figures for 'v9x'"):
    bounds.bounds(_report("v9x:2x2"))
  bench = tmp_path / "bench.json"
  bench.write_text(json.dumps({"tasks": {"table": {"methods": {"glance-63": {"tau": 7.6}}},
                                         "chart": {"methods": {"ar": {"tau": 1.0}}}}}))
  assert bounds.taus_from_bench(str(bench), "glance-63") == {"table": 7.6}
  with pytest.raises(ValueError, match="no task ran method 'glance-99'"):
    bounds.taus_from_bench(str(bench), "glance-99")
  rep = tmp_path / "report.json"
  rep.write_text(json.dumps(_report()))
  assert bounds.main([str(rep), "--bench", str(bench), "--json", str(tmp_path / "b.json")]) == 0
  out = json.loads((tmp_path / "b.json").read_text())
  assert out[0]["taus"] == {"testbed table": 7.6}
