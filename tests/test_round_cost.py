"""benchmarks/round_cost.py and benchmarks/gpu_8b.py: tau parsing, the best-budget rule, and both
scripts end to end at their smallest settings (gpu_8b.py --size tiny is its CPU smoke test)."""

import json
import math

import pytest

from benchmarks import gpu_8b
from benchmarks import round_cost as rc


def test_parse_taus_inline_and_errors():
  assert rc.parse_taus("15:3.1, 31:3.4,63:3.6") == {15: 3.1, 31: 3.4, 63: 3.6}
  with pytest.raises(ValueError, match="not N:tau"):
    rc.parse_taus("15:x")
  with pytest.raises(ValueError, match="no such file"):
    rc.parse_taus("/nonexistent/bench.json")


def test_read_taus_reads_the_bench_schema(tmp_path):
  """Per budget, the mean over tasks of tasks.<task>.methods.<label>.tau for method glance."""
  def m(method, budget, tau):
    return {"method": method, "budget": budget, "tau": tau}
  bench = {"tasks": {"coco": {"methods": {"ar": m("ar", 1, 1.0), "glance-15": m("glance", 15, 3.0),
                                          "glance-63": m("glance", 63, 4.0)}},
                     "textvqa": {"methods": {"glance-15": m("glance", 15, 2.0), "ngram": m("ngram", 15, 9.0),
                                             "glance-63": m("glance", 63, 5.0),
                                             "glance-31": m("glance", 31, None),
                                             "glance-auto": m("glance", 63, 9.0),
                                             "glance-63[zero-context]": m("glance", 63, 1.1)}}}}
  path = tmp_path / "bench.json"
  path.write_text(json.dumps(bench))
  assert rc.read_taus(path) == {15: 2.5, 63: 4.5}
  path.write_text(json.dumps({"tasks": {}}))
  with pytest.raises(ValueError, match="holds no glance tau"):
    rc.read_taus(path)
  path.write_text("{not json")
  with pytest.raises(ValueError, match="not JSON"):
    rc.read_taus(path)


def _fake_split():
  def row(method, n, round_ms):
    return dict(method=method, budget=n, draft_ms=1.0, tree_ms=0.1, verify_ms=2.0, walk_commit_ms=0.2, sum_ms=3.3,
                round_ms=round_ms, ratio_to_ar=round_ms / 2.0, tau=16.0)
  return dict(size="x", params_m=1.0, head_layers=2, head_params_m=0.1, context=300,
              rows=[row("ar", 1, 2.0), row("glance", 15, 6.0), row("glance", 31, 8.0), row("glance", 63, 12.0)])


def test_best_budget_maximises_tau_over_round_cost():
  res = _fake_split()
  rows = rc.cost_rows(res, {15: 3.0, 31: 4.4, 63: 5.0})          # speedups 1.0, 1.1, 0.833
  assert [r.get("predicted_speedup") for r in rows[1:]] == pytest.approx([1.0, 1.1, 5.0 / 6.0])
  best = rc.best_budget(rows)
  assert best["budget"] == 31 and best["predicted_speedup"] == pytest.approx(1.1)
  text = rc.table(res, rows)
  assert "best budget: N = 31" in text and "| 31 |" in text
  assert rc.best_budget(rc.cost_rows(res, None)) is None


def _check_rows(rows, budgets):
  assert [(r["method"], r["budget"]) for r in rows] == [("ar", 1)] + [("glance", n) for n in budgets]
  assert rows[0]["ratio_to_ar"] == 1.0
  for r in rows:
    assert r["round_ms"] > 0 and math.isfinite(r["ratio_to_ar"])
    assert all(r[k] >= 0 for k in ("draft_ms", "tree_ms", "verify_ms", "walk_commit_ms"))


def test_round_cost_smallest_run(tmp_path, capsys):
  path = tmp_path / "rc.json"
  rep = rc.main(["--sizes", "tiny", "--budgets", "1,3", "--repeats", "1", "--new-tokens", "17", "--context", "40",
                 "--target-ms", "2", "--taus", "1:1.5,3:2.0", "--json", str(path)])
  out = capsys.readouterr().out
  assert out.splitlines()[0].startswith("$ python benchmarks/round_cost.py --sizes tiny")
  assert "best budget: N =" in out
  (size,) = rep["sizes"]
  assert size["size"] == "tiny" and size["params_m"] < 1
  _check_rows(size["rows"], (1, 3))
  assert [r["oracle_tau"] for r in size["rows"][1:]] == [2.0, 4.0]      # full acceptance: depth min(N, 15)
  assert size["best"]["budget"] in (1, 3)
  assert json.loads(path.read_text())["sizes"][0]["best"] == size["best"]


def test_gpu_8b_smoke_tiny(tmp_path, capsys):
  path = tmp_path / "g.json"
  rep = gpu_8b.main(["--size", "micro", "--head-layers", "1", "--context", "64", "--image", "64", "--new-tokens", "33", "--budgets", "1,3",
                     "--repeats", "1", "--target-ms", "2", "--taus", "1:1.2,3:1.8", "--json", str(path)])
  out = capsys.readouterr().out
  assert "device: cpu" in out and "| N | draft ms" in out
  saved = json.loads(path.read_text())
  assert saved["device_kind"] == rep["device_kind"] and saved["dtype"] == "bfloat16"
  assert saved["context"] == 64 and saved["ar_ms_per_token"] > 0
  _check_rows(saved["rows"], (1, 3))
  assert saved["best"]["budget"] in (1, 3) and saved["head_layers"] == 1
  rivals = {r["arm"]: r for r in saved["rivals"]}
  assert list(rivals) == ["ar", "glance-31", "glance-63", "eagle3", "eagle3-chain", "two-model"], list(rivals)
  assert rivals["eagle3"]["passes"] == 8 and rivals["two-model"]["verified"] == 5 and "## The rivals" in out
  # the floor beside AR (no datasheet for a CPU: the probe's bandwidth alone), and each arm at its paper taus
  assert saved["floor"]["probed_gb_s"] > 0 and saved["floor"]["nominal"] is None and "Floor of an AR token" in out
  preds = {p["arm"]: p for p in saved["paper_predictions"]}
  assert list(preds) == ["glance-63", "eagle3", "eagle3-chain", "two-model"] and "## Predicted speedup" in out
  assert preds["eagle3"]["round_over_ar"] == rivals["eagle3"]["round_over_ar"]


def test_rival_round_cost_smallest_run(tmp_path, capsys):
  """benchmarks/rival_round_cost.py at the testbed's own size (no widening), a few tokens: every arm
  runs, emits AR's tokens and reports its passes and verified tokens."""
  from benchmarks import rival_round_cost as rrc
  path = tmp_path / "r.json"
  rep = rrc.main(["--widen", "1", "--max-new", "6", "--repeats", "1", "--json", str(path)])
  rows = {r["arm"]: r for r in rep["rows"]}
  assert list(rows) == list(rrc.ARMS) and all(r["lossless"] for r in rows.values())
  assert {a: (r["passes"], r["verified"]) for a, r in rows.items()} == {
      "ar": (0, 1), "glance-15": (1, 16), "glance-31": (1, 32), "glance-63": (1, 64), "eagle3": (8, 32),
      "eagle3-chain": (3, 4), "two-model": (4, 5)}
  assert rows["ar"]["round_over_ar"] == 1.0 and all(r["ms_per_round"] > 0 for r in rows.values())
  assert "| eagle3 | 8 | 32 |" in capsys.readouterr().out
  assert json.loads(path.read_text())["rows"][0]["arm"] == "ar"


def test_time_arms_skips_what_would_end_past_the_deadline(capsys):
  """gpu_8b's guard for a lease's 10-minute command: AR (the reference) always runs; an arm whose
  compile and repeats would likely end past the deadline is reported skipped, not timed."""
  import time

  from benchmarks import rival_round_cost as rrc
  from glance_jax.bench.random_models import long_prompt, make_head, make_target, size_config
  cfg = size_config("micro")
  target = make_target(cfg, 0)
  arms = {"ar": ("ar", None, 1), "glance-3": ("glance", make_head(target, 1, 1), 3)}
  prompt = long_prompt(cfg, 32, 0, image=False)
  rows = rrc.time_arms(target, arms, prompt, max_new=4, repeats=1, deadline=time.perf_counter())
  assert rows[0]["arm"] == "ar" and rows[0]["round_over_ar"] == 1.0
  assert rows[1] == {"arm": "glance-3", "skipped": "deadline"} and "skipped glance-3" in capsys.readouterr().out
  rows = rrc.time_arms(target, arms, prompt, max_new=4, repeats=1, deadline=time.perf_counter() + 600)
  assert [r["arm"] for r in rows] == ["ar", "glance-3"] and rows[1]["lossless"]
