"""decode.py bench: one reduced run end to end on the embedded tiny default (2 good task files, one
with a row whose image is missing, an empty file and a missing file), checked against the report
schema, for losslessness and for the markdown table; bad input is a clear error that leaves the
other tasks running; the statistics detect what they claim to (mismatches, interleaving order,
padding)."""

import collections
import contextlib
import copy
import io
import json
import sys
import types

import numpy as np
import pytest

from glance_jax.bench import cli as bench_cli
from glance_jax.bench import report as rep
from glance_jax.bench import runner
from glance_jax.bench.report import validate_report
from glance_jax.data import PromptRecord, read_synthetic, write_task_file
from glance_jax.cli import decode as cli

METHODS = ["ar", "ngram", "chain", "glance-15", "glance-63", "glance-63[zero-context]"]
MAX_NEW = 12
REPEATS = 2


@pytest.fixture(scope="module")
def files(tmp_path_factory):
  root = tmp_path_factory.mktemp("bench")
  recs = list(read_synthetic(root, "val"))                         # 2 prompts with images
  a = root / "a.jsonl"
  write_task_file(recs, a)
  b = root / "b.jsonl"
  other = [PromptRecord(id=f"b{i}", task="other", split="val", prompt=r.prompt + " Be brief.",
                        images=r.images) for i, r in enumerate(recs)]
  missing = PromptRecord(id="b-gone", task="other", split="val", prompt="What is this?",
                         images=(str(root / "gone.png"),))
  write_task_file([other[0], other[1], missing], b)               # line 3: image file absent
  empty = root / "empty.jsonl"
  empty.write_text("")
  return {"root": root, "a": str(a), "b": str(b), "empty": str(empty),
          "nope": str(root / "nope.jsonl")}


@pytest.fixture(scope="module")
def bench(files):
  """The one full run every test below reads (compiles each method once, about 30 s on 2 cores)."""
  calls = []

  def fake_image_swap(target, head, records, *, budget, max_new_tokens, seed):
    calls.append(dict(n=len(records), budget=budget, max_new_tokens=max_new_tokens, seed=seed,
                      head=head is not None, target=target is not None))
    return {"records": len(records), "budget": budget}

  out = files["root"] / "out"
  argv = ["bench", files["a"], files["b"], files["empty"], files["nope"],
          "--methods", "ar,ngram,chain,glance", "--budgets", "15,63", "--max-new-tokens", str(MAX_NEW),
          "--repeats", str(REPEATS), "--seed", "3", "--image-test", "--ablate", "zero-context",
          "--json", str(out / "r.json"), "--markdown", str(out / "r.md"), "--plots", str(out / "plots")]
  out.mkdir()
  with pytest.MonkeyPatch.context() as mp:
    # The real image_swap module is written elsewhere; here only the call contract is under test.
    mp.setitem(sys.modules, "glance_jax.bench.image_swap",
               types.SimpleNamespace(run_image_swap=fake_image_swap))
    so, se = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(so), contextlib.redirect_stderr(se):
      report = cli.main(argv)
  return dict(report=report, stdout=so.getvalue(), stderr=se.getvalue(), out=out, calls=calls,
              files=files)


def test_report_matches_schema(bench):
  on_disk = json.loads((bench["out"] / "r.json").read_text())
  assert validate_report(on_disk) == []
  assert on_disk["config"]["methods"] == METHODS
  assert set(on_disk["tasks"]) == {"synthetic", "other"}
  # the validator can fail: a missing key, a wrong type, a task missing a method
  bad = copy.deepcopy(on_disk)
  del bad["tasks"]["other"]["methods"]["ngram"]["tau"]
  bad["geomean"]["ar"]["speedup"] = "fast"
  problems = validate_report(bad)
  assert any("ngram: missing key 'tau'" in p for p in problems), problems
  assert any("geomean.ar.speedup: expected a number" in p for p in problems), problems
  bad = copy.deepcopy(on_disk)
  del bad["tasks"]["synthetic"]["methods"]["chain"]
  assert any("synthetic.methods: labels" in p for p in validate_report(bad))


def test_every_method_is_lossless_and_timed(bench):
  for name, t in bench["report"]["tasks"].items():
    assert t["n_prompts"] == 2
    ar = t["methods"]["ar"]
    assert ar["tau"] == 1.0 and ar["speedup_vs_ar"]["speedup"] == pytest.approx(1.0)
    for label in METHODS:
      s = t["methods"][label]
      assert s["lossless"] and s["mismatches"] == 0, (name, label, s["mismatch_ids"])
      assert [p["new_tokens"] for p in s["per_prompt"]] == [p["new_tokens"] for p in ar["per_prompt"]]
      assert all(len(p["times_s"]) == REPEATS and min(p["times_s"]) > 0 for p in s["per_prompt"])
      assert s["rounds"] == sum(p["rounds"] for p in s["per_prompt"]) >= 1
      assert 1.0 <= s["tau"] <= 16.0
      # lossless, so the speedup is exactly the ratio of ms/token
      assert s["speedup_vs_ar"]["speedup"] == pytest.approx(ar["ms_per_token"] / s["ms_per_token"])
      lo, hi = s["speedup_vs_ar"]["lo"], s["speedup_vs_ar"]["hi"]
      assert lo <= hi
      best = s["speedup_vs_best_other"]
      others = {k: v["speedup_vs_ar"]["speedup"] for k, v in t["methods"].items() if k != label}
      assert best["other"] == max(others, key=others.get)
  geo = bench["report"]["geomean"]
  for label in METHODS:
    per_task = [t["methods"][label]["speedup_vs_ar"]["speedup"] for t in bench["report"]["tasks"].values()]
    assert geo[label]["speedup"] == pytest.approx(float(np.exp(np.mean(np.log(per_task)))))
    assert geo[label]["n_tasks"] == 2


def test_zero_context_ablation_reaches_the_head_and_stays_lossless(bench):
  """glance-63[zero-context] is glance-63 with the head's target features zeroed: lossless (checked
  for every method above; here explicitly), and its first round's predicted E[A] differs from
  glance-63's (same prompt, same root, same head params: only the conditioning differs)."""
  r = bench["report"]
  assert r["config"]["ablate"] == "zero-context"
  assert r["config"]["timing"] == "hot"
  m = {x["label"]: x for x in r["methods"]}["glance-63[zero-context]"]
  assert (m["method"], m["budget"], m["ablate"]) == ("glance", 63, "zero-context")
  for name, t in r["tasks"].items():
    z, g = t["methods"]["glance-63[zero-context]"], t["methods"]["glance-63"]
    assert z["lossless"] and z["ablate"] == "zero-context" and g["ablate"] is None
    assert [p["new_tokens"] for p in z["per_prompt"]] == [p["new_tokens"] for p in t["methods"]["ar"]["per_prompt"]]
    for pz, pg in zip(z["per_prompt"], g["per_prompt"]):
      assert not np.allclose(pz["predicted"][0], pg["predicted"][0]), (name, pz["id"])
  assert r["entropy_law"]["method"] == "glance-63"


def test_tree_over_chain_and_law_checks_in_the_report(bench):
  r = bench["report"]
  law = r["entropy_law"]
  for name, t in r["tasks"].items():
    toc = t["tree_over_chain"]
    assert toc["tree"] == "glance-63" and toc["budget"] == 63
    assert toc["ratio"] == pytest.approx(t["methods"]["glance-63"]["tau"] / t["methods"]["chain"]["tau"])
    assert toc["lo"] <= toc["hi"]
    assert set(law["law_checks"]["glance-63"]["tasks"]) == set(r["tasks"])
  assert law["law_checks"]["glance-63"]["pooled"]["n_bins"] >= 1
  assert set(law["common_slope"]) == set(law["pooled"]) == set(METHODS) - {"ar"}
  table = (bench["out"] / "r.md").read_text()
  assert "Tree over chain (glance-63 tau / chain tau" in table
  for name in r["tasks"]:
    assert f"Deciles of {name} (glance-63):" in table


def test_markdown_has_a_row_per_task_and_method(bench):
  table = (bench["out"] / "r.md").read_text()
  assert table in bench["stdout"]
  for name in ("synthetic", "other"):
    for label in METHODS:
      assert sum(line.startswith(f"| {name} | {label} |") for line in table.splitlines()) == 1
  for label in METHODS:
    assert f"| geomean (2 tasks) | {label} |" in table


def test_entropy_law_plots_progress_and_image_test(bench):
  r = bench["report"]
  law = r["entropy_law"]
  assert law["method"] == "glance-63" and law["L"] == 15
  assert set(law["by_method"]) == set(METHODS) - {"ar"}
  for name, t in r["tasks"].items():
    e = t["entropy_law"]
    assert e == law["by_method"]["glance-63"][name]
    assert e["n"] == t["methods"]["glance-63"]["rounds"]
    assert sum(e["deciles"]["counts"]) == e["n"]
    assert (e["fit"] is None) == (e["error"] is not None)
  for p in r["plots"]:
    with open(p, "rb") as f:
      assert f.read(8) == b"\x89PNG\r\n\x1a\n"
  assert any(p.endswith("deciles.png") for p in r["plots"])
  assert any(p.endswith("speedup_vs_budget.png") for p in r["plots"])
  assert any(p.endswith("paper_panels.png") for p in r["plots"])     # tree/chain, fused/zeroed, speedup vs N
  from glance_jax.bench.report_plots import paper_panel_rows
  panels = paper_panel_rows(r)
  assert set(panels) == set(r["tasks"])
  for name, row in panels.items():
    t = r["tasks"][name]["methods"]
    assert row["zeroed_tau"] == t["glance-63[zero-context]"]["tau"] and row["fused_tau"] == t["glance-63"]["tau"]
    assert [n for n, *_ in row["speedups"]] == [15, 63]
  assert "compile" in bench["stderr"]   # the progress line
  assert r["tasks"]["synthetic"]["image_test"] == {"records": 2, "budget": 63}
  assert bench["calls"][0] == dict(n=2, budget=63, max_new_tokens=MAX_NEW, seed=3, head=True, target=True)


def test_bad_rows_and_files_are_reported_and_the_rest_runs(bench):
  f, r = bench["files"], bench["report"]
  errs = r["errors"]
  row = [e for e in errs if e["id"] == "b-gone"]
  assert len(row) == 1 and row[0]["file"] == f["b"] and row[0]["line"] == 3 and not row[0]["fatal"]
  assert f"{f['b']}:3: id 'b-gone'" in row[0]["message"] and "gone.png" in row[0]["message"]
  assert r["tasks"]["other"]["skipped_rows"] == 1 and r["tasks"]["other"]["prompt_ids"] == ["b0", "b1"]
  empty = [e for e in errs if e["file"] == f["empty"]]
  assert len(empty) == 1 and empty[0]["fatal"] and "no usable prompts" in empty[0]["message"]
  nope = [e for e in errs if e["file"] == f["nope"]]
  assert len(nope) == 1 and nope[0]["fatal"] and "not found" in nope[0]["message"]
  for e in (row[0], empty[0], nope[0]):
    assert e["message"] in bench["stderr"]
    assert "\n" not in e["message"]


def test_unknown_method_is_an_argparse_error(monkeypatch, capsys):
  monkeypatch.setattr(sys, "argv", ["decode.py", "bench", "--methods", "ar,glance,medusa"])
  with pytest.raises(SystemExit) as e:
    cli.cli_main()
  assert e.value.code == 2
  err = capsys.readouterr().err.strip().splitlines()[-1]
  assert "'medusa'" in err and "ar, ngram, chain, glance, glance-N" in err, err


def test_no_runnable_task_exits_nonzero(files, monkeypatch, capsys):
  monkeypatch.setattr(sys, "argv", ["decode.py", "bench", files["empty"], files["nope"], "--methods", "ar"])
  with pytest.raises(SystemExit) as e:
    cli.cli_main()
  assert e.value.code == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert err[-1].startswith("decode.py: error: no task could run"), err
  assert any(files["nope"] in line and "not found" in line for line in err)
  assert any(files["empty"] in line and "no usable prompts" in line for line in err)


def test_defaults_run_the_testbed(bench):
  """No model and no task file: default_bench_inputs picks the shipped testbed's target, head and
  held-out task files (one per suite task)."""
  from glance_jax.testbed import paths
  report = bench_cli.main(["--methods", "ar", "--max-new-tokens", str(MAX_NEW), "--repeats", "1",
                           "--limit", "1", "--regime", "compute"])
  assert validate_report(report) == []
  assert list(report["tasks"]) == list(paths.suite().TASKS)
  assert report["config"]["model"] == str(paths.TARGET) and report["config"]["head"] == str(paths.HEAD)
  assert report["config"]["regime"] == "compute"
  from glance_jax.testbed import regimes
  assert regimes.resolve(None, True) == regimes.DEFAULT == "memory"     # what a bare run gets


def test_an_unknown_regime_is_an_error(files, monkeypatch, capsys):
  """--regime widens the testbed pair, or the given --model / --head pair (glance_jax/testbed/regimes.py);
  an unknown one is an argparse error."""
  monkeypatch.setattr(sys, "argv", ["decode.py", "bench", "--model", "some/dir", "--regime", "gpu",
                                    "--methods", "ar", files["empty"]])
  with pytest.raises(SystemExit) as e:
    cli.cli_main()
  assert e.value.code == 2
  assert "--regime" in capsys.readouterr().err
  from glance_jax.testbed import regimes
  with pytest.raises(ValueError, match="unknown testbed regime 'gpu'"):
    regimes.check("gpu")
  assert regimes.resolve("memory", False) == "memory" and regimes.resolve(None, False) is None


def test_padding_keeps_the_tokens(bench):
  """Prompts are right-padded to a multiple of 32 tokens for fewer compiles; AR must not notice."""
  from glance_jax.bench.tasks import load_tasks
  from glance_jax.decode.generate import generate
  from glance_jax.qwen3_vl.inputs import Processor
  from glance_jax.qwen3_vl.target import load_target
  target = load_target(bench["report"]["config"]["model"])
  proc = Processor.from_pretrained(str(target.path))
  tasks, _ = load_tasks([bench["files"]["a"]], limit=1)
  (padded,), (plain,) = (runner.prepare_prompts(proc, tasks, k)[0]["synthetic"] for k in (32, 1))
  assert padded.inputs.input_ids.shape[1] % 32 == 0
  assert padded.inputs.input_ids.shape[1] > plain.inputs.input_ids.shape[1]
  out = [generate(target, p.inputs, method="ar", max_new_tokens=MAX_NEW).tokens[0] for p in (padded, plain)]
  np.testing.assert_array_equal(out[0], out[1])


def test_mismatch_and_interleaving_order():
  """The lossless flag and the interleaving order, on hand-made runs."""
  ms = [runner.Method("ar", "ar", 1), runner.Method("glance-15", "glance", 15)]
  tok = np.array([5, 6, 7])
  runs = {"ar": [runner.PromptRun([1.0], tok, np.zeros(3, int), np.ones(3)),
                 runner.PromptRun([1.0], tok, np.zeros(3, int), np.ones(3))],
          "glance-15": [runner.PromptRun([0.5], tok, np.array([2]), np.ones(1)),
                        runner.PromptRun([0.5], np.array([5, 6, 8]), np.array([8]), np.ones(1))]}
  s = rep.task_stats(runs, ms, ["p0", "p1"], depth=8)
  g = s["glance-15"]
  assert g["share_at_block_cap"] == pytest.approx(0.5) and s["ar"]["share_at_block_cap"] is None
  assert not g["lossless"] and g["mismatches"] == 1 and g["mismatch_ids"] == ["p1"]
  assert g["tau"] == pytest.approx(6.0) and g["share_a_ge_8"] == pytest.approx(0.5)
  assert g["speedup_vs_ar"]["speedup"] == pytest.approx(2.0)
  assert s["ar"]["lossless"]
  runs["ar"][1].stable = False   # AR itself not repeatable: nothing can be called lossless there
  assert not rep.task_stats(runs, ms, ["p0", "p1"])["ar"]["lossless"]
  # interleaving: a seeded permutation per run, so every method follows every other about equally
  # often (a rotation would give each method one fixed predecessor, and its cache state a bias)
  m4 = [runner.Method(x, "ar", 1) for x in "abcd"]
  orders = [[m.label for m in runner.run_order(m4, k)] for k in range(480)]
  assert all(sorted(o) == list("abcd") for o in orders)
  assert orders[:5] == [[m.label for m in runner.run_order(m4, k)] for k in range(5)]   # reproducible
  assert orders != [[m.label for m in runner.run_order(m4, k, seed=1)] for k in range(480)]
  follows = collections.Counter((o[j - 1], o[j]) for o in orders for j in range(1, 4))
  # 480 runs x 3 adjacent pairs over 12 ordered pairs: 120 expected each
  assert set(follows) == {(x, y) for x in "abcd" for y in "abcd" if x != y}
  assert all(80 <= n <= 160 for n in follows.values()), follows
  assert all(80 <= sum(o[0] == x for o in orders) <= 160 for x in "abcd")      # each goes first ~1/4
  with pytest.raises(ValueError, match="unknown method 'fast'.*glance-N"):
    runner.parse_methods("ar,fast", [15])
  assert [m.label for m in runner.parse_methods("glance,chain,glance-31", [15, 63])] == [
      "ar", "glance-15", "glance-63", "chain", "glance-31"]


def test_map_headroom_warning_names_the_limit(tmp_path, monkeypatch):
  """XLA:CPU maps each compiled kernel: near vm.max_map_count the next compile aborts the process,
  so the bench says so after its warm-up (read from /proc; silent where /proc is absent)."""
  maps, limit = tmp_path / "maps", tmp_path / "max_map_count"
  limit.write_text("100\n")
  maps.write_text("x\n" * 60)
  monkeypatch.setattr(runner, "MAP_COUNT_FILE", str(maps))
  monkeypatch.setattr(runner, "MAP_LIMIT_FILE", str(limit))
  assert runner.map_headroom_warning() is None                    # 60 of 100: below 3/4
  maps.write_text("x\n" * 80)
  w = runner.map_headroom_warning()
  assert "80 of vm.max_map_count = 100" in w and "sysctl -w vm.max_map_count" in w
  monkeypatch.setattr(runner, "MAP_LIMIT_FILE", str(tmp_path / "absent"))
  assert runner.map_headroom_warning() is None


def test_hot_timing_warms_each_method_then_times_its_repeats(monkeypatch):
  """hot: per prompt, each method (in a seeded random order) once untimed, then its repeats back to
  back; cold: every call after another method's, each repeat a fresh order."""
  calls = []

  def fake(target, head, p, m, kw, timings=None):
    calls.append((p, m.label))
    if timings is not None:   # the timed calls also time the loop alone
      timings["loop_s"] = 0.25
    return types.SimpleNamespace(tokens=[np.array([1, 2])], accepted=[np.zeros(1, int)], root_entropy=[np.ones(1)],
                                 record_widths=(), predicted=None, observed=None, widths=None,
                                 draft_passes_per_round=0)

  monkeypatch.setattr(runner, "_generate", fake)
  ms = [runner.Method(x, "ar", 1) for x in "abc"]
  runs = runner.time_task(None, None, ["p0", "p1"], ms, {}, repeats=3)
  assert len(calls) == 2 * 3 * 4 and all(len(runs[m.label][i].times) == 3 for m in ms for i in range(2))
  assert all(runs[m.label][i].loop_times == [0.25] * 3 for m in ms for i in range(2))
  for i, prompt in enumerate(["p0", "p1"]):
    mine = [label for p, label in calls[i * 12:(i + 1) * 12]]
    assert all(p == prompt for p, _ in calls[i * 12:(i + 1) * 12])
    order = [m.label for m in runner.run_order(ms, i)]
    assert mine == [x for x in order for _ in range(4)]          # warm call + 3 timed, back to back
  calls.clear()
  runs = runner.time_task(None, None, ["p0"], ms, {}, repeats=2, hot=False)
  assert [label for _, label in calls] == [m.label for r in range(2) for m in runner.run_order(ms, r)]
  assert all(len(runs[m.label][0].times) == 2 for m in ms)


@pytest.fixture(scope="module")
def rivals(files, tmp_path_factory):
  """One bench run with every rival arm beside glance on checkpoint directories (decode_checkpoints)."""
  from tests.decode_fixtures import decode_checkpoints
  root = tmp_path_factory.mktemp("rivals")
  decode_checkpoints(root)
  argv = ["bench", files["a"], "--model", str(root / "model"), "--head", str(root / "head"),
          "--eagle3-head", str(root / "eagle3_head"), "--draft", str(root / "draft"),
          "--methods", "glance-15,eagle3,eagle3-chain,two-model,glance-15[calibrated]", "--max-new-tokens", str(MAX_NEW),
          "--repeats", "1", "--draft-vocab", "64", "--markdown", str(root / "r.md")]
  so = io.StringIO()
  with contextlib.redirect_stdout(so), contextlib.redirect_stderr(io.StringIO()):
    report = cli.main(argv)
  return dict(report=report, root=root, table=(root / "r.md").read_text())


def test_the_rivals_run_in_the_bench_losslessly_with_their_passes(rivals):
  r = rivals["report"]
  assert validate_report(r) == []
  stats = r["tasks"]["synthetic"]["methods"]
  passes = {label: s["draft_passes_per_round"] for label, s in stats.items()}
  assert passes == {"ar": 0, "glance-15": 1, "eagle3": 8, "eagle3-chain": 3, "two-model": 4,
                    "glance-15[vocab-64]": 1, "glance-15[calibrated]": 1}, passes
  assert {label: s["budget"] for label, s in stats.items() if label != "ar"} == {
      "glance-15": 15, "eagle3": 31, "eagle3-chain": 3, "two-model": 4, "glance-15[vocab-64]": 15,
      "glance-15[calibrated]": 15}
  assert stats["glance-15[calibrated]"]["ablate"] == "calibrated"
  assert all(s["lossless"] for s in stats.values())
  vs = r["tasks"]["synthetic"]["glance_vs_rivals"]
  # GLANCE's arm: the fastest of its tree-score operating points (plain or calibrated), never the
  # draft-vocabulary variant
  ours = ("glance-15", "glance-15[calibrated]")
  assert vs["glance"] == max(ours, key=lambda lb: stats[lb]["speedup_vs_ar"]["speedup"])
  assert sorted(vs["rivals"]) == ["eagle3", "eagle3-chain", "two-model"]
  for label, v in vs["rivals"].items():
    assert v["tau"] == pytest.approx(stats[label]["tau"])
    # faster by = the rival's time over GLANCE's = the ratio of their speedups over AR (same prompts)
    assert v["glance_faster_by"] == pytest.approx(
        stats[vs["glance"]]["speedup_vs_ar"]["speedup"] / stats[label]["speedup_vs_ar"]["speedup"], rel=1e-6)
  assert "GLANCE against the rivals" in rivals["table"]
  assert f"| synthetic | {vs['glance']} |" in rivals["table"]


def test_the_draft_vocab_arm_reports_its_coverage(rivals):
  """--draft-vocab 64: glance-15[vocab-64] beside glance-15, lossless, never the arm GLANCE is
  compared with; its coverage of the head's token counts and of AR's tokens in this run."""
  from glance_jax.head import draft_vocab as dv
  r = rivals["report"]
  t = r["tasks"]["synthetic"]
  assert r["config"]["draft_vocab"] == 64 and t["methods"]["glance-15[vocab-64]"]["ablate"] == "vocab-64"
  v = t["draft_vocab"]
  counts = dv.load_counts(rivals["root"] / "head", 512)
  ids = dv.top_ids(counts, 64)
  assert v["label"] == "glance-15[vocab-64]" and v["size"] == 64
  assert v["train_coverage"] == pytest.approx(dv.coverage(counts, ids))
  assert 0 <= v["ar_coverage"] <= 1
  assert "Draft vocabulary" in rivals["table"] and "| synthetic | glance-15[vocab-64] | 64 |" in rivals["table"]


@pytest.mark.parametrize("args,words", [
    (["--methods", "two-model"], ["two-model need --draft"]),
    (["--methods", "eagle3", "--draft", "{root}/draft"], ["--draft is for --methods two-model"]),
])
def test_a_rival_without_its_drafter_is_an_error(rivals, files, args, words, monkeypatch, capsys):
  root = rivals["root"]
  argv = ["decode.py", "bench", files["a"], "--model", str(root / "model"), "--head", str(root / "head"),
          *[a.format(root=root) for a in args], "--max-new-tokens", "2", "--repeats", "1"]
  monkeypatch.setattr(sys, "argv", argv)
  with pytest.raises(SystemExit) as e:
    cli.cli_main()
  assert e.value.code == 2
  err = capsys.readouterr().err
  for w in words:
    assert w in err, err
