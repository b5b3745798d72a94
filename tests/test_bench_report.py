"""The bench report's entropy-law section, tree-over-chain ratio and ablation labels, on synthetic
per-round records where the truth is known (no decoding): entropy_laws carries analyze(...,
pooled=True)'s pooled entry, common slope and law_checks verdicts; tree_over_chain is the ratio of
the reported taus with a paired bootstrap interval; the markdown prints the law summary, every
task's deciles and the ratio; ablated methods never stand in for the plain ones."""

import json

import numpy as np
import pytest

from glance_jax.analysis import analyze, decile_markdown, paired_bootstrap_ratio_of_ratios, summary_markdown
from glance_jax.bench import report as rep
from glance_jax.bench import report_markdown
from glance_jax.bench import runner
from glance_jax.bench.cli import with_ablation
from glance_jax.bench.runner import Method, PromptRun

L = 15
AR, CHAIN = Method("ar", "ar", 1), Method("chain", "chain", 15)
G15, G63 = Method("glance-15", "glance", 15), Method("glance-63", "glance", 63)
G63_ZERO = runner.ablated(G63, "zero-context")


def _runs(a_per_prompt, h_per_prompt):
  """Runs whose token count is what their rounds emit (a prefill token, then a + 1 a round)."""
  return [PromptRun([1.0], np.arange(1 + int(np.sum(np.asarray(a) + 1))), np.asarray(a), np.asarray(h, np.float64))
          for a, h in zip(a_per_prompt, h_per_prompt)]


def _law_prompts(b0, b1, rng, n_prompts=8, rounds=250, shape=2.0, scale=0.5):
  """Per prompt: H ~ Gamma and a = consecutive survivals with p = sigmoid(b0 - b1 H), capped at L."""
  hs = [rng.gamma(shape, scale, rounds) for _ in range(n_prompts)]
  a = [np.minimum(rng.geometric(1.0 - 1.0 / (1.0 + np.exp(-(b0 - b1 * h)))) - 1, L) for h in hs]
  return a, hs


def _task(rng, b0):
  """glance-63 follows a steep law (b1 = 1.5); chain's acceptance does not depend on H (b1 = 0)."""
  a, h = _law_prompts(b0, 1.5, rng)
  flat, _ = _law_prompts(1.0, 0.0, rng)
  zero = [np.zeros_like(x) for x in a]
  return {"ar": _runs(zero, h), "chain": _runs(flat, h), "glance-63": _runs(a, h)}


def steep_ci(law, task):
  return law["law_checks"]["glance-63"]["tasks"][task]["isotonic_r2_ci"]


def test_entropy_laws_pooled_common_slope_and_verdicts():
  rng = np.random.default_rng(0)
  runs = {"grounded": _task(rng, 3.0), "open": _task(rng, 1.5)}
  law = rep.json_safe(rep.entropy_laws(runs, [AR, CHAIN, G63], L))
  json.dumps(law, allow_nan=False)
  errors = []
  rep._check(law, rep.SCHEMA["entropy_law"], "entropy_law", errors)
  assert errors == []
  assert law["method"] == "glance-63" and set(law["by_method"]) == {"chain", "glance-63"}
  recs = {t: (np.concatenate([r.root_entropy for r in rs["glance-63"]]),
              np.concatenate([r.accepted for r in rs["glance-63"]])) for t, rs in runs.items()}
  an = analyze(recs, L, 10, pooled=True)
  for name, entry in law["by_method"]["glance-63"].items():     # the primary method's R^2 interval
    lo, hi = entry["isotonic"].pop("r2_ci")
    assert lo <= entry["isotonic"]["r2"] <= hi
    assert steep_ci(law, name) == [lo, hi]
  assert "r2_ci" not in law["by_method"]["chain"]["grounded"]["isotonic"]
  assert law["by_method"]["glance-63"] == an["tasks"]
  assert law["pooled"]["glance-63"] == an["pooled"] and law["pooled"]["glance-63"]["n"] == 2 * 8 * 250
  cs = law["common_slope"]["glance-63"]
  assert abs(cs["b1"] - 1.5) < 4 * cs["se_b1"] and set(cs["b0"]) == {"grounded", "open"}
  steep, flat = law["law_checks"]["glance-63"], law["law_checks"]["chain"]
  for name in runs:
    assert steep["tasks"][name]["passes"] is True and steep["tasks"][name]["z_b1"] >= 3
    assert flat["tasks"][name]["slope_positive"] is False and flat["tasks"][name]["passes"] is False
  assert steep["pooled"]["passes"] is True
  one = rep.entropy_laws({"grounded": runs["grounded"]}, [AR, CHAIN, G63], L)   # one task: no pooling
  assert one["pooled"] == {} and one["common_slope"] == {}
  assert one["law_checks"]["glance-63"]["pooled"] is None
  assert set(one["law_checks"]["glance-63"]["tasks"]) == {"grounded"}


def _chain_and_tree(rng, n_prompts, factor):
  """Per prompt, chain accepts x and the tree 2x + 1 (so tree a + 1 = 2 (x + 1)), same rounds."""
  chain = [rng.integers(0, 7, rng.integers(3, 12)) for _ in range(n_prompts)]
  tree = [factor * x + (factor - 1) for x in chain]
  h = [np.zeros(len(x)) for x in chain]
  zero = [np.zeros_like(x) for x in chain]
  return {"ar": _runs(zero, h), "chain": _runs(chain, h), "glance-15": _runs(chain, h),
          "glance-63": _runs(tree, h), "glance-63[zero-context]": _runs(zero, h), "glance-auto": _runs(chain, h)}


def test_tree_over_chain_is_the_ratio_of_the_reported_taus():
  rng = np.random.default_rng(1)
  methods = [AR, CHAIN, G15, G63, G63_ZERO, runner.AUTO]
  runs = _chain_and_tree(rng, 6, 2)
  toc = rep.tree_over_chain(runs, methods, seed=0)
  stats = rep.task_stats(runs, methods, [f"p{i}" for i in range(6)])
  assert toc["tree"] == "glance-63" and toc["budget"] == 63 and toc["chain"] == "chain"
  assert toc["tree_tau"] == pytest.approx(stats["glance-63"]["tau"])
  assert toc["chain_tau"] == pytest.approx(stats["chain"]["tau"])
  # every prompt's tree sum is exactly twice its chain sum over the same rounds, so every paired
  # resample gives 2: an unpaired bootstrap would spread
  assert toc["ratio"] == pytest.approx(2.0) and toc["lo"] == pytest.approx(2.0) and toc["hi"] == pytest.approx(2.0)
  # noisy: the interval spreads around the point
  noisy = {**runs, "glance-63": _runs([x + rng.integers(0, 4, len(x)) for x in
                                       (r.accepted for r in runs["chain"])], [r.root_entropy for r in runs["chain"]])}
  t = rep.tree_over_chain(noisy, methods, seed=0)
  assert t["lo"] < t["ratio"] < t["hi"] and t["ratio"] > 1
  one = {k: v[:1] for k, v in runs.items()}
  t1 = rep.tree_over_chain(one, methods)
  assert t1["lo"] is None and t1["hi"] is None and t1["ratio"] == pytest.approx(2.0)
  assert rep.tree_over_chain(runs, [AR, G15, G63]) is None                  # no chain
  assert rep.tree_over_chain(runs, [AR, CHAIN, G63_ZERO, runner.AUTO]) is None   # no plain fixed glance
  assert rep.tree_over_chain(runs, [AR, CHAIN, G15])["tree"] == "glance-15"


def test_ratio_of_ratios_bootstrap_is_paired():
  rng = np.random.default_rng(2)
  den = rng.integers(1, 20, 30).astype(float)
  num = den * rng.uniform(1, 5, 30)
  point, lo, hi = paired_bootstrap_ratio_of_ratios(3 * num, den, num, den, n_boot=500)
  assert (point, lo, hi) == pytest.approx((3.0, 3.0, 3.0))
  point, lo, hi = paired_bootstrap_ratio_of_ratios(num, den, num[::-1], den, n_boot=500)
  assert lo < point < hi and point == pytest.approx((num.sum() / den.sum()) / (num[::-1].sum() / den.sum()))
  with pytest.raises(ValueError, match="differ in length"):
    paired_bootstrap_ratio_of_ratios(num, den, num[:5], den[:5])


def test_markdown_prints_the_law_summary_deciles_and_tree_over_chain():
  rng = np.random.default_rng(3)
  runs = {"grounded": _task(rng, 3.0), "open": _task(rng, 1.5)}
  methods = [AR, CHAIN, G63]
  report = rep.json_safe({
      "tasks": {t: {"methods": rep.task_stats(r, methods, [f"p{i}" for i in range(8)]),
                    "tree_over_chain": rep.tree_over_chain(r, methods)} for t, r in runs.items()},
      "geomean": {}, "entropy_law": rep.entropy_laws(runs, methods, L)})
  md = report_markdown.markdown(report)
  law = report["entropy_law"]
  an = {"tasks": law["by_method"]["glance-63"], "pooled": law["pooled"]["glance-63"],
        "common_slope": law["common_slope"]["glance-63"]}
  assert summary_markdown(an) in md + "\n" and "all tasks (pooled)" in md and "Common slope over tasks" in md
  for name in runs:
    assert f"Deciles of {name} (glance-63):\n\n" + decile_markdown(an["tasks"][name]) in md
    toc = report["tasks"][name]["tree_over_chain"]
    assert (f"| {name} | {toc['tree_tau']:.2f} | {toc['chain_tau']:.2f} | {toc['ratio']:.2f} "
            f"[{toc['lo']:.2f}, {toc['hi']:.2f}] |") in md
  assert "Tree over chain (glance-63 tau / chain tau" in md
  for t in report["tasks"].values():
    t["tree_over_chain"] = None
  assert "Tree over chain" not in report_markdown.markdown(report)


def test_ablated_labels_and_primary_method():
  ms = runner.parse_methods("chain[zero-context],glance[zero-context],glance-31", [15, "auto"])
  assert [m.label for m in ms] == ["ar", "chain[zero-context]", "glance-15[zero-context]",
                                   "glance-auto[zero-context]", "glance-31"]
  assert all(m.ablate == "zero-context" for m in ms[1:4]) and ms[4].ablate is None
  assert ms[3].auto and ms[2].budget == 15
  with pytest.raises(ValueError, match="needs a head method.*'ngram'"):
    runner.parse_methods("ngram[zero-context]", [15])
  with pytest.raises(ValueError, match="unknown head variant 'noise'.*zero-context, vocab-K .K >= 1., calibrated"):
    runner.parse_methods("glance-15[noise]", [15])
  with pytest.raises(ValueError, match="unknown head variant 'vocab-0'"):
    runner.parse_methods("glance-15[vocab-0]", [15])
  (v,) = runner.parse_methods("glance-63[vocab-128]", [15])[1:]
  assert v.label == "glance-63[vocab-128]" and v.ablate == "vocab-128" and runner.draft_vocab_size(v.ablate) == 128
  assert rep.primary_method([AR, v, G15]) == "glance-15"      # a head variant is never the primary method
  (c,) = runner.parse_methods("glance-63[calibrated]", [15])[1:]
  assert c.ablate == "calibrated" and rep.primary_method([AR, c, G15]) == "glance-15"
  # the ablated copy of glance-63 is never the primary method nor the tree of tree-over-chain
  assert rep.primary_method([AR, G63_ZERO, G15]) == "glance-15"
  assert rep.primary_method([AR, G63_ZERO, CHAIN]) == "chain"
  assert rep.primary_method([AR, G63_ZERO]) is None
  assert rep.primary_method([AR, runner.AUTO, CHAIN]) == "glance-auto"
  assert [m.label for m in with_ablation([AR, CHAIN, G15, G63, runner.AUTO], "zero-context")][-1] == \
      "glance-63[zero-context]"
  assert [m.label for m in with_ablation([AR, CHAIN], "zero-context")][-1] == "chain[zero-context]"
  assert with_ablation([AR, G63, G63_ZERO], "zero-context") == [AR, G63, G63_ZERO]
  with pytest.raises(ValueError, match=r"--ablate / --draft-vocab \(zero-context\) needs a head method"):
    with_ablation([AR, Method("ngram", "ngram", 15)], "zero-context")
  assert with_ablation([AR, G63], None) == [AR, G63]


def test_decode_alone_stats_and_their_markdown():
  """task_stats with loop times: the prefill's share, decode ms/token and the loop-only speedup are the
  arithmetic of the recorded times (token counts equal, so no rescaling); without them, no such keys."""
  tok = np.arange(11)
  runs = {"ar": [PromptRun([2.0], tok, np.zeros(10, int), np.ones(10), loop_times=[1.0]) for _ in range(3)],
          "glance-15": [PromptRun([1.5], tok, np.array([4, 4]), np.ones(2), loop_times=[0.5]) for _ in range(3)]}
  stats = rep.task_stats(runs, [AR, G15], ["a", "b", "c"])
  ar, g = stats["ar"], stats["glance-15"]
  assert ar["prefill_share"] == pytest.approx(0.5) and g["prefill_share"] == pytest.approx(2 / 3)
  assert ar["decode_ms_per_token"] == pytest.approx(1e3 * 3 / 33)
  assert g["decode_speedup_vs_ar"]["speedup"] == pytest.approx(2.0)
  assert g["speedup_vs_ar"]["speedup"] == pytest.approx(2.0 / 1.5)
  md = report_markdown.markdown({"tasks": {"t": {"methods": stats}}, "geomean": {},
                     "entropy_law": {"method": None, "by_method": {}}})
  assert "The decode loop alone" in md and "| t | 0.50 | 90.909 | 2.00" in md
  for r in runs["ar"] + runs["glance-15"]:
    r.loop_times = []
  assert "decode_speedup_vs_ar" not in rep.task_stats(runs, [AR, G15], ["a", "b", "c"])["glance-15"]


def test_tau_interval_resamples_prompts():
  """tau_interval: a bootstrap over prompts of sum(a + 1) / rounds; equal prompts give a point interval,
  different ones an interval around tau that holds both prompts' own taus' range."""
  same = [np.array([3, 3]), np.array([3, 3, 3])]
  assert rep.tau_interval(same) == (4.0, 4.0)
  lo, hi = rep.tau_interval([np.array([0, 0, 0]), np.array([7, 7]), np.array([1, 2])])
  tau = (3 + 16 + 5) / 7
  assert 1.0 <= lo < tau < hi <= 8.0
  assert rep.tau_interval([np.array([1])]) == (None, None)


def test_markdown_prints_the_image_test_gains():
  """Gain = correct - swapped, its interval the change's negated; a pre-drafter-swap report (no
  drafter_mismatched) prints '-' there; a task without a real image test prints no row."""
  def res(correct, drf, both):
    def ch(x):
      return dict(diff=x - correct, lo=x - correct - 0.5, hi=x - correct + 0.25)
    return dict(budget=63, positions=120, correct=dict(accepted=correct), mismatched=dict(accepted=both),
                drafter_mismatched=dict(accepted=drf),
                change=dict(accepted=ch(both), drafter_accepted=ch(drf), entropy=ch(0.0)))
  old = res(6.0, 0.0, 5.0)
  del old["drafter_mismatched"], old["change"]["drafter_accepted"]
  report = {"tasks": {"grounded": {"methods": {}, "image_test": res(6.74, 3.80, 6.77)},
                      "open": {"methods": {}, "image_test": old},
                      "stub": {"methods": {}, "image_test": {"records": 2, "budget": 63}}},
            "geomean": {}, "entropy_law": {"method": None}}
  md = report_markdown.markdown(report)
  assert "Image test (glance N = 63" in md
  assert "| grounded | 120 | 6.74 | 3.80 | +2.94 [2.69, 3.44] (+77%) | 6.77 | -0.03 [-0.28, 0.47] (-0%) |" in md
  assert "| open | 120 | 6.00 | - | - | 5.00 | +1.00 [0.75, 1.50] (+20%) |" in md
  assert "| stub |" not in md
