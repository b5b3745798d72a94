"""The `decode.py bench` report: per-task statistics, the entropy law, the JSON schema (SCHEMA and
validate_report); its markdown tables are bench/report_markdown.py.

Definitions (per task and method, over its prompts; docs/benchmarking.md has the full schema):
  tau               mean tokens per round = mean(a + 1) over every round (a = accepted draft tokens)
  tokens_per_round  emitted tokens / rounds (differs from tau: it counts the prefill's first token
                    and the last round cut by max_new_tokens or a stop token)
  ms_per_token      1e3 * sum over prompts of the prompt's mean time over repeats / emitted tokens
  speedup           t_ar / t_method on per-prompt times, each method's time rescaled to AR's token
                    count for that prompt (t * n_ar / n), so it equals AR ms/token / method ms/token
                    when the method is lossless (same tokens); `lo`, `hi`: paired bootstrap 95%
                    percentile interval over prompts (None with fewer than 2 prompts)
  best other        the method other than this one with the lowest total time (best speedup)
  share_a_ge_8      share of rounds whose accepted length a (draft tokens accepted, not counting the
                    target's own token) is >= 8
  share_at_block_cap  share of rounds that accepted a whole block (a = L = block_size - 1): the draft,
                    not the target's uncertainty, ended them (None for AR)
  draft_passes_per_round  sequential draft forward passes a round (glance / chain 1, eagle3 S, two-model S)
  lossless          every timed run of every prompt emitted AR's tokens (AR: its own first run)
  tree_over_chain   tau of glance at the largest fixed budget N over chain's tau, with a paired
                    bootstrap 95% interval over prompts (the paper's 1.45-1.49x at N = 63)
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from glance_jax.analysis import (
    analyze, bootstrap_geomean_ratio, bootstrap_isotonic_r2, compare_methods, end_censoring, geometric_mean,
    law_checks, paired_bootstrap_ratio, paired_bootstrap_ratio_of_ratios)
from glance_jax.bench.runner import RIVALS, Method, PromptRun

SCHEMA_VERSION = "glance_jax.bench/1"
A_LONG = 8          # share_a_ge_8 threshold on the accepted length a
N_BOOT = 2000


# --- statistics ------------------------------------------------------------------------------------

def _ratio(base, method, *, n_boot=N_BOOT, alpha=0.05, seed=0):
  """paired_bootstrap_ratio, or the point alone when there are fewer than 2 prompts."""
  if len(base) >= 2:
    return paired_bootstrap_ratio(base, method, n_boot=n_boot, alpha=alpha, seed=seed)
  return float(np.sum(base) / np.sum(method)), None, None


def scaled_times(runs: Mapping[str, Sequence[PromptRun]], field: str = "times") -> dict[str, np.ndarray]:
  """label -> per-prompt mean time (s) rescaled to AR's token count for the prompt. field: "times"
  (generate() end to end) or "loop_times" (the decode loop alone)."""
  n_ar = np.array([len(r.tokens) for r in runs["ar"]], np.float64)
  out = {}
  for label, rs in runs.items():
    t = np.array([np.mean(getattr(r, field)) for r in rs], np.float64)
    n = np.array([max(len(r.tokens), 1) for r in rs], np.float64)
    out[label] = t * n_ar / n
  return out


def tau_interval(accepted: Sequence[np.ndarray], *, n_boot: int = N_BOOT, alpha: float = 0.05,
                 seed: int = 0) -> tuple[float | None, float | None]:
  """A bootstrap interval of tau (sum of a + 1 over rounds / rounds) with prompts resampled: per
  prompt accepted lengths `accepted` [rounds_i]; (None, None) below 2 prompts or rounds."""
  k = len(accepted)
  num = np.array([np.sum(np.asarray(a) + 1) for a in accepted], np.float64)
  den = np.array([len(a) for a in accepted], np.float64)
  if k < 2 or den.sum() == 0:
    return None, None
  idx = np.random.default_rng(seed).integers(0, k, size=(n_boot, k))
  boot = num[idx].sum(1) / np.maximum(den[idx].sum(1), 1)
  return float(np.quantile(boot, alpha / 2)), float(np.quantile(boot, 1 - alpha / 2))


def scaled_loop_times(runs: Mapping[str, Sequence[PromptRun]]) -> dict[str, np.ndarray] | None:
  """scaled_times of the decode loop alone (prefill excluded), or None where a run lacks them."""
  if not all(r.loop_times for rs in runs.values() for r in rs):
    return None
  return scaled_times(runs, "loop_times")


def decode_stats(label: str, runs: Mapping[str, Sequence[PromptRun]], loop: Mapping[str, np.ndarray] | None,
                 total: float, seed: int) -> dict[str, Any]:
  """The decode loop alone: ms/token, the prefill's share of the method's time (`total`: its seconds
  end to end, summed over prompts), and the loop's speedup over AR's loop with its paired bootstrap
  interval (empty where the loop was not timed)."""
  if loop is None:
    return {}
  rs = runs[label]
  loop_s = float(sum(np.mean(r.loop_times) for r in rs))
  point, lo, hi = _ratio(loop["ar"], loop[label], seed=seed)
  return {"decode_ms_per_token": 1e3 * loop_s / max(sum(len(r.tokens) for r in rs), 1),
          "prefill_share": max(0.0, 1.0 - loop_s / total) if total > 0 else None,
          "decode_speedup_vs_ar": {"other": "ar", "speedup": point, "lo": lo, "hi": hi}}


def method_stats(label: str, method: Method, runs: Mapping[str, Sequence[PromptRun]],
                 ids: Sequence[str], times: Mapping[str, np.ndarray], seed: int, depth: int = 15,
                 loop: Mapping[str, np.ndarray] | None = None) -> dict[str, Any]:
  rs = runs[label]
  a = np.concatenate([r.accepted for r in rs]).astype(np.int64)
  h = np.concatenate([r.root_entropy for r in rs]).astype(np.float64)
  new_tokens = int(sum(len(r.tokens) for r in rs))
  total_s = float(sum(np.mean(r.times) for r in rs))
  ref = runs["ar"]
  ok = [r.stable and ref[i].stable and np.array_equal(r.tokens, ref[i].tokens) for i, r in enumerate(rs)]
  cmp = compare_methods(times, label, "ar", seed=seed, ratio=_ratio) if len(times) > 1 else {
      "vs_base": {"other": "ar", "speedup": 1.0, "lo": None, "hi": None}}
  cmp.setdefault("vs_best_other", None)
  return {
      "method": method.method, "budget": method.budget, "ablate": method.ablate, "auto": bool(method.auto),
      # verify widths the rounds used (glance-auto: a subset of the widths its cost table compiles)
      "widths_used": sorted({int(w) for r in rs if r.widths is not None for w in r.widths}),
      "n_prompts": len(rs),
      "new_tokens": new_tokens, "rounds": int(a.size),
      "tau": float(np.mean(a + 1)) if a.size else 1.0,
      "tau_ci": dict(zip(("lo", "hi"), tau_interval([r.accepted for r in rs], seed=seed))),
      "tokens_per_round": new_tokens / a.size if a.size else None,
      "ms_per_token": 1e3 * total_s / max(new_tokens, 1),
      "speedup_vs_ar": cmp["vs_base"], "speedup_vs_best_other": cmp["vs_best_other"],
      "share_a_ge_8": float(np.mean(a >= A_LONG)) if a.size else None,
      # rounds that accepted a whole block (a = depth = block_size - 1): where the draft, not the
      # target's uncertainty, ended the round
      "share_at_block_cap": float(np.mean(a >= depth)) if a.size and method.method != "ar" else None,
      "mean_root_entropy": float(np.mean(h)) if h.size else None,
      "draft_passes_per_round": int(rs[0].passes) if rs else 0,
      "lossless": all(ok), "mismatches": int(len(ok) - sum(ok)),
      "mismatch_ids": [i for i, good in zip(ids, ok) if not good],
      **decode_stats(label, runs, loop, total_s, seed),
      "per_prompt": [{"id": pid, "new_tokens": int(len(r.tokens)), "rounds": int(len(r.accepted)),
                      "tau": float(np.mean(r.accepted + 1)) if len(r.accepted) else 1.0,
                      "times_s": [float(t) for t in r.times], "lossless": bool(good), **_round_records(r)}
                     for pid, r, good in zip(ids, rs, ok)],
  }


def _round_records(r: PromptRun) -> dict[str, Any]:
  """Per-round records of one prompt: accepted lengths, verify widths and, for glance, the predicted /
  observed accepted length per recorded width (python -m glance_jax.bench.calibrate --bench)."""
  out: dict[str, Any] = {"accepted": [int(a) for a in r.accepted]}
  if r.widths is not None:
    out["widths"] = [int(w) for w in r.widths]
  if r.predicted is not None:
    out["predicted"] = np.round(np.asarray(r.predicted, np.float64), 4).tolist()
    out["observed"] = np.asarray(r.observed).astype(int).tolist()
  return out


def task_stats(runs: Mapping[str, Sequence[PromptRun]], methods: Sequence[Method],
               ids: Sequence[str], seed: int = 0, depth: int = 15) -> dict[str, dict[str, Any]]:
  """depth: the drafters' block depth L = block_size - 1 (share_at_block_cap counts rounds at it)."""
  times, loop = scaled_times(runs), scaled_loop_times(runs)
  return {m.label: method_stats(m.label, m, runs, ids, times, seed, depth, loop) for m in methods}


def geomean_speedups(times_by_task: Mapping[str, Mapping[str, np.ndarray]], methods: Sequence[Method],
                     seed: int = 0) -> dict[str, dict[str, Any]]:
  """Per method: geometric mean over tasks of the speedup over AR, with a bootstrap interval
  (prompts resampled within each task; None when a task has fewer than 2 prompts)."""
  out = {}
  if not times_by_task:
    return out
  for m in methods:
    pairs = {t: (tm["ar"], tm[m.label]) for t, tm in times_by_task.items()}
    if all(len(b) >= 2 for b, _ in pairs.values()):
      point, lo, hi = bootstrap_geomean_ratio(pairs, n_boot=N_BOOT, seed=seed)
    else:
      point, lo, hi = geometric_mean([np.sum(b) / np.sum(x) for b, x in pairs.values()]), None, None
    out[m.label] = {"speedup": point, "lo": lo, "hi": hi, "n_tasks": len(pairs)}
  return out


def largest_glance(methods: Sequence[Method]) -> Method | None:
  """glance at the largest fixed budget, not ablated (glance-auto and ablations are not it)."""
  fixed = [m for m in methods if m.method == "glance" and not m.auto and m.ablate is None]
  return max(fixed, key=lambda m: m.budget) if fixed else None


def primary_method(methods: Sequence[Method]) -> str | None:
  """The entropy law's method: glance at the largest fixed budget, else glance-auto, else chain
  (never an ablated one), else None."""
  if (m := largest_glance(methods)) is not None:
    return m.label
  plain = [m for m in methods if m.ablate is None]
  return next((m.label for m in plain if m.method == "glance"),
              next((m.label for m in plain if m.method == "chain"), None))


def entropy_laws(runs_by_task: Mapping[str, Mapping[str, Sequence[PromptRun]]],
                 methods: Sequence[Method], L: int, n_bins: int = 10, seed: int = 0) -> dict[str, Any]:
  """analysis.analyze(..., pooled=True) per drafting method (not ar: a = 0 always) over each
  task's rounds: by_method[label] = its "tasks", pooled[label] its "pooled" entry and
  common_slope[label] its "common_slope" (both only with >= 2 tasks: the law across tasks, over
  the entropy range one task alone rarely spans), law_checks[label] = law_report.law_checks of
  every task ("tasks") and of the pooled entry ("pooled", None with one task).
  A round whose accepted run reached the end of its answer is right-censored
  (analysis.entropy_law.end_censoring): it counts its survivals and no failure. A task with no
  rounds is left out; a task whose MLE does not exist keeps its deciles with
  "fit": None and the reason in "error" (analyze's contract). The primary method's tasks also get
  "isotonic"["r2_ci"]: a 95% interval of the isotonic R^2 over prompts resampled (the decile fit
  moves by several hundredths between samples of 64 prompts)."""
  by_method, pooled, common, checks = {}, {}, {}, {}
  primary = primary_method(methods)
  for m in methods:
    if m.method == "ar":
      continue
    recs, rows = {}, {}
    for task, runs in runs_by_task.items():
      rs = runs[m.label]
      cut = [end_censoring(r.accepted, len(r.tokens)) for r in rs]   # rounds that reached the end
      rows[task] = [(np.asarray(r.root_entropy, np.float64), np.minimum(x, L), c) for r, (x, c) in zip(rs, cut)]
      a = np.concatenate([x for x, _ in cut] or [np.zeros(0)]).astype(np.int64)
      if a.size:
        recs[task] = tuple(np.concatenate([row[i] for row in rows[task]]) for i in range(3))
    an = analyze(recs, L, n_bins, pooled=len(recs) > 1) if recs else {"tasks": {}}
    if m.label == primary:
      for task, entry in an["tasks"].items():      # the law's sampling spread, over prompts
        if len(rows[task]) >= 2 and entry["isotonic"]["r2"] is not None:
          entry["isotonic"]["r2_ci"] = list(bootstrap_isotonic_r2(rows[task], L, n_bins, seed=seed))
    by_method[m.label] = an["tasks"]
    if "pooled" in an:
      pooled[m.label], common[m.label] = an["pooled"], an["common_slope"]
    checks[m.label] = {"tasks": {t: law_checks(e) for t, e in an["tasks"].items()},
                      "pooled": law_checks(an["pooled"]) if "pooled" in an else None}
  return {"method": primary, "L": int(L), "n_bins": int(n_bins), "by_method": by_method,
          "pooled": pooled, "common_slope": common, "law_checks": checks}


def tree_over_chain(runs: Mapping[str, Sequence[PromptRun]], methods: Sequence[Method],
                    seed: int = 0) -> dict[str, Any] | None:
  """One task's tau of glance at the largest fixed budget over chain's tau, with a paired bootstrap
  95% interval over prompts (None with fewer than 2 prompts); None without both methods. tau as in
  method_stats: mean(a + 1) over the task's rounds, so ratio = the two reported taus' ratio."""
  tree = largest_glance(methods)
  if tree is None or not any(m.label == "chain" for m in methods):
    return None
  cols = [(np.array([float(np.sum(r.accepted + 1)) for r in runs[label]]),
           np.array([float(len(r.accepted)) for r in runs[label]])) for label in (tree.label, "chain")]
  (nx, dx), (ny, dy) = cols
  if min(nx.sum(), dx.sum(), ny.sum(), dy.sum()) <= 0:
    return None
  if len(nx) >= 2:
    ratio, lo, hi = paired_bootstrap_ratio_of_ratios(nx, dx, ny, dy, n_boot=N_BOOT, seed=seed)
  else:
    ratio, lo, hi = float((nx.sum() / dx.sum()) / (ny.sum() / dy.sum())), None, None
  return {"tree": tree.label, "chain": "chain", "budget": tree.budget, "tree_tau": float(nx.sum() / dx.sum()),
          "chain_tau": float(ny.sum() / dy.sum()), "ratio": ratio, "lo": lo, "hi": hi}


# head variants that only change how GLANCE's tree ranks its nodes (same draft pass, same verify):
# operating points of GLANCE itself, so the rival table may pick them as GLANCE's best arm
TREE_SCORES = ("calibrated", "parent")


def glance_vs_rivals(runs: Mapping[str, Sequence[PromptRun]], methods: Sequence[Method],
                     seed: int = 0) -> dict[str, Any] | None:
  """The paper's layout for one task: GLANCE at its best operating point on this task (the glance
  arm, fixed or auto, with the product of marginals or a tree-score variant of TREE_SCORES, with the
  lowest total time; never an ablation or a draft vocabulary) against each rival arm run: both
  taus and "GLANCE faster by" = t_rival / t_glance on per-prompt times rescaled to AR's tokens, with
  a paired bootstrap 95% interval over prompts. None without a glance arm and a rival."""
  times = scaled_times(runs)
  ours = [m for m in methods if m.method == "glance" and m.ablate in (None, *TREE_SCORES)]
  rivals = [m for m in methods if m.method in RIVALS]
  if not ours or not rivals:
    return None
  best = min(ours, key=lambda m: float(np.sum(times[m.label])))
  tau = {m.label: float(np.mean(np.concatenate([r.accepted for r in runs[m.label]]) + 1)) for m in [best, *rivals]}
  faster = {m.label: _ratio(times[m.label], times[best.label], seed=seed) for m in rivals}
  return {"glance": best.label, "glance_tau": tau[best.label], "rivals": {
      k: {"tau": tau[k], "glance_faster_by": r, "lo": lo, "hi": hi} for k, (r, lo, hi) in faster.items()}}


def json_safe(v: Any) -> Any:
  """numpy -> Python, non-finite floats -> None (strict JSON)."""
  if isinstance(v, Mapping):
    return {str(k): json_safe(x) for k, x in v.items()}
  if isinstance(v, (list, tuple, np.ndarray)):
    return [json_safe(x) for x in (v.tolist() if isinstance(v, np.ndarray) else v)]
  if isinstance(v, (bool, np.bool_)):
    return bool(v)
  if isinstance(v, np.integer):
    return int(v)
  if isinstance(v, (float, np.floating)):
    return float(v) if math.isfinite(v) else None
  return v


# --- schema ----------------------------------------------------------------------------------------

class Opt:
  """`spec` or null."""

  def __init__(self, spec: Any):
    self.spec = spec


class Num:
  """int or float, not bool."""


NUM, OPT_NUM, OPT_STR, OPT_INT = Num, Opt(Num), Opt(str), Opt(int)
SPEEDUP = {"other": str, "speedup": NUM, "lo": OPT_NUM, "hi": OPT_NUM}
PER_PROMPT = {"id": str, "new_tokens": int, "rounds": int, "tau": NUM, "times_s": [NUM], "lossless": bool}
METHOD_STATS = {
    "method": str, "budget": int, "ablate": OPT_STR, "n_prompts": int, "new_tokens": int, "rounds": int, "tau": NUM,
    "tokens_per_round": OPT_NUM, "ms_per_token": NUM, "speedup_vs_ar": SPEEDUP,
    "speedup_vs_best_other": Opt(SPEEDUP), "share_a_ge_8": OPT_NUM, "share_at_block_cap": OPT_NUM,
    "mean_root_entropy": OPT_NUM, "draft_passes_per_round": int,
    "lossless": bool, "mismatches": int, "mismatch_ids": [str], "per_prompt": [PER_PROMPT],
}
# One task's entropy-law entry: analysis.entropy_law.analyze()["tasks"][task] (see its docstring).
ENTROPY_TASK = {
    "n": int, "mean_a": NUM, "mean_H": NUM,
    "deciles": {"centres": [NUM], "mean_a": [NUM], "sem_a": [NUM], "counts": [int], "h_lo": [NUM],
                "h_hi": [NUM]},
    "isotonic": {"fitted": [NUM], "r2": OPT_NUM},   # + "r2_ci" [lo, hi] on the primary method (2026-12-07)
    "fit": Opt({"b0": NUM, "b1": NUM, "se_b0": OPT_NUM, "se_b1": OPT_NUM, "loglik": NUM, "n": int,
                "L": int, "cov_b0_b1": OPT_NUM}),
    "model": Opt({"bin_mean": [NUM], "r2": OPT_NUM}),
    "copy_regime": Opt({k: OPT_NUM for k in (
        "p0", "cap_exp_b0", "se_cap_exp_b0", "cap_L", "floor_mean", "floor_h", "floor_sem",
        "model_at_floor", "floor_over_cap", "floor_over_cap_L", "floor_resid_z")}),
    "error": OPT_STR,
}
# law_report.law_checks(entry): issue 14's verdicts on one entropy-law entry (passes None: H does not
# spread, the law is not tested there).
LAW_CHECKS = {
    "spreads": bool, "n_bins": int, "h_range": OPT_NUM, "b1": OPT_NUM, "z_b1": OPT_NUM,
    "slope_positive": bool, "isotonic_r2": OPT_NUM, "monotone": bool, "law_r2": OPT_NUM,
    "cap_exp_b0": OPT_NUM, "floor_mean": OPT_NUM, "floor_over_cap": OPT_NUM, "passes": Opt(bool),
}
TREE_OVER_CHAIN = {"tree": str, "chain": str, "budget": int, "tree_tau": NUM, "chain_tau": NUM,
                   "ratio": NUM, "lo": OPT_NUM, "hi": OPT_NUM}
TASK = {
    "file": str, "n_prompts": int, "prompt_ids": [str], "skipped_rows": int,
    "methods": {"*": METHOD_STATS}, "entropy_law": Opt(ENTROPY_TASK), "image_test": Opt(dict),
    "tree_over_chain": Opt(TREE_OVER_CHAIN),
    # glance_vs_rivals (written since 2026-12-02; absent from earlier reports); draft_vocab (since
    # 2026-12-02: None, or the --draft-vocab arm's {label, size, train_coverage, ar_coverage})
}
ERROR = {"file": OPT_STR, "line": OPT_INT, "id": OPT_STR, "task": OPT_STR, "message": str, "fatal": bool}
SCHEMA = {
    "schema": str,
    "config": {"model": str, "head": OPT_STR, "task_files": [str], "methods": [str], "budgets": [int],
               "max_new_tokens": int, "repeats": int, "limit": OPT_INT, "seed": int, "dtype": str,
               "pad_multiple": int, "block_size": int, "image_test": bool, "ablate": OPT_STR},
    # config.timing ("hot" / "cold") is written since 2026-12-01 and not required (earlier reports,
    # timed in a rotated order, lack it; extra keys are allowed)
    "environment": {"jax": str, "backend": str, "device": str, "cpu_count": OPT_INT, "compiles": int,
                    "compile_s": NUM, "wall_s": NUM},
    "methods": [{"label": str, "method": str, "budget": int, "ablate": OPT_STR}],
    "tasks": {"*": TASK},
    "geomean": {"*": {"speedup": NUM, "lo": OPT_NUM, "hi": OPT_NUM, "n_tasks": int}},
    "entropy_law": {"method": OPT_STR, "L": int, "n_bins": int, "by_method": {"*": {"*": ENTROPY_TASK}},
                    "pooled": {"*": ENTROPY_TASK},
                    # fit_common_slope's dict {b0: {task: .}, se_b0, b1, se_b1, loglik, n, L} or {error}
                    "common_slope": {"*": dict},
                    "law_checks": {"*": {"tasks": {"*": LAW_CHECKS}, "pooled": Opt(LAW_CHECKS)}}},
    "errors": [ERROR],
    "plots": [str],
}


def _check(value: Any, spec: Any, path: str, out: list[str]) -> None:
  if isinstance(spec, Opt):
    if value is not None:
      _check(value, spec.spec, path, out)
  elif spec is Num:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
      out.append(f"{path}: expected a number, got {type(value).__name__}")
  elif isinstance(spec, list):
    if not isinstance(value, list):
      out.append(f"{path}: expected a list, got {type(value).__name__}")
      return
    for i, v in enumerate(value):
      _check(v, spec[0], f"{path}[{i}]", out)
  elif isinstance(spec, dict):
    if not isinstance(value, dict):
      out.append(f"{path}: expected an object, got {type(value).__name__}")
    elif set(spec) == {"*"}:
      for k, v in value.items():
        _check(v, spec["*"], f"{path}.{k}", out)
    else:
      for k in spec:
        if k not in value:
          out.append(f"{path}: missing key {k!r}")
        else:
          _check(value[k], spec[k], f"{path}.{k}", out)
  elif spec is int:
    if isinstance(value, bool) or not isinstance(value, int):
      out.append(f"{path}: expected an integer, got {type(value).__name__}")
  elif not isinstance(value, spec):
    out.append(f"{path}: expected {spec.__name__}, got {type(value).__name__}")


def validate_report(report: Any) -> list[str]:
  """Problems of `report` against SCHEMA plus the cross-checks a table relies on (every task holds
  every method label, ar among them); [] when valid. Extra keys are allowed (later versions)."""
  out: list[str] = []
  _check(report, SCHEMA, "report", out)
  if out:
    return out
  labels = [m["label"] for m in report["methods"]]
  if report["config"]["methods"] != labels:
    out.append("report.config.methods: differs from report.methods labels")
  if "ar" not in labels:
    out.append("report.methods: no 'ar' (the speedup base)")
  if report["schema"] != SCHEMA_VERSION:
    out.append(f"report.schema: expected {SCHEMA_VERSION!r}, got {report['schema']!r}")
  for name, t in report["tasks"].items():
    if sorted(t["methods"]) != sorted(labels):
      out.append(f"report.tasks.{name}.methods: labels {sorted(t['methods'])} != {sorted(labels)}")
    for label, s in t["methods"].items():
      if len(s["per_prompt"]) != t["n_prompts"]:
        out.append(f"report.tasks.{name}.methods.{label}.per_prompt: {len(s['per_prompt'])} entries "
                   f"for {t['n_prompts']} prompts")
  for label in report["geomean"]:
    if label not in labels:
      out.append(f"report.geomean.{label}: not a method label")
  return out

