"""Smoke test of benchmarks/decode_report.py: every section at its smallest settings (a 1-layer tiny
target and head, budget 3, a few prompts and tokens), checking the structure and sanity of the report."""

import json
import math

from benchmarks import decode_report as dr

SMALLEST = dict(
    audit=dict(size="micro", dtypes=("bfloat16",), num_prompts=4, max_new=8, budgets=(3,), head_layers=1),
    split=dict(sizes=("micro",), head_layers={"micro": 1}, budgets=(3,), chain=False, context=40,
               image=False, new_tokens=17, repeats=1, target_ms=5.0),
    batch=dict(size="micro", head_layers=1, batches=(1, 2), budgets=(3,), max_new=8, repeats=1,
               with_oracle=False, with_images=False),
)


def _finite_pos(x):
  return isinstance(x, float) and math.isfinite(x) and x > 0


def test_report_smallest_settings(tmp_path, capsys):
  path = tmp_path / "report.json"
  rep = dr.main(["--quick", "--json", str(path), "--sections", "audit,split,batch"], overrides=SMALLEST)
  text = capsys.readouterr().out
  first = text.splitlines()[0]
  assert first == f"$ python benchmarks/decode_report.py --quick --json {path} --sections audit,split,batch"
  for title in ("## 1. bf16 audit", "## 2. Per-round time split", "## 3. Batch scaling", "argmax near-tie"):
    assert title in text
  assert json.loads(path.read_text())["command"][0] == "python"

  # audit: fractions in [0, 1], divergences inside the output, both AR runs and glance compared
  a = rep["audit"]["results"]["bfloat16"]
  assert set(a["pairs"]) == {"glance3 vs ar_b4", "ar_b1 vs ar_b4", "glance3 vs ar_b1"}
  for p in a["pairs"].values():
    assert p["prompts"] == 4 and 0 <= p["identical"] <= 4
    assert 0.0 <= p["identical_frac"] <= 1.0
    assert len(p["first_divergences"]) == 4 - p["identical"]
    assert all(0 <= d < 8 for d in p["first_divergences"])
  g = a["gap"]
  assert g["median_all"] >= 0 and 0 <= g["frac_below_0_05"] <= 1 and 0 <= g["teacher_forced_agrees_with_ar"] <= 1
  assert a["tau"]["glance3"] >= 1.0

  # split: one row per method, parts add up to the sum, ratios against the AR round
  (s,) = rep["split"]["results"]
  rows = {(r["method"], r["budget"]): r for r in s["rows"]}
  assert set(rows) == {("ar", 1), ("glance", 3)}
  assert rows[("ar", 1)]["draft_ms"] == 0.0 and rows[("ar", 1)]["tree_ms"] == 0.0
  assert rows[("ar", 1)]["ratio_to_ar"] == 1.0
  for r in rows.values():
    parts = [r["draft_ms"], r["tree_ms"], r["verify_ms"], r["walk_commit_ms"]]
    assert all(x >= 0 and math.isfinite(x) for x in parts)   # a phase lost in timer noise reads 0
    assert math.isclose(sum(parts), r["sum_ms"], rel_tol=1e-9) and r["sum_ms"] > 0
    assert _finite_pos(r["round_ms"])
    assert 0.02 < r["sum_ms"] / r["round_ms"] < 50          # same order as the real loop (noisy CPU)
  assert rows[("glance", 3)]["tau"] == 4.0                # the oracle drafter: every round accepts 3
  assert set(s["tree_topk"]) == {"as written 3", "top_k kept 3"}

  # batch: lossless rows, speeds relative to batch 1
  b = rep["batch"]["rows"]
  assert {(r["method"], r["batch"]) for r in b} == {("ar", 1), ("ar", 2), ("glance", 1), ("glance", 2)}
  for r in b:
    assert r["lossless"] and r["tokens"] == 2 * 8
    assert _finite_pos(r["tokens_per_s"])
    if r["batch"] == 1:
      assert r["relative_to_batch1"] == 1.0
