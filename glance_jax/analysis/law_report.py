"""Reading an entropy-law analysis (the dict analyze(..., pooled=True) returns) against the paper's
findings, and writing it as markdown.

  law_checks(entry)            per task: does H spread, is b1 > 0 with b1 / se >= 3, isotonic R^2
                               >= 0.8 (issue 14's "must show"), and the cap e^{b0} vs the floor
  slope_difference(e1, e2)     b1 of one task minus another's, its se and z ("steeper where
                               grounding is stronger")
  summary_markdown(analysis)   one row per task and one pooled: b0, b1 (se), z, isotonic and law
                               R^2, e^{b0}, lowest-decile mean a (its E[a] at the survival rate
                               when rounds reached the answer's end), floor / e^{b0}
  isotonic_cell(checks)        "0.797 [0.74, 0.84]": the isotonic R^2 and its interval
  decile_markdown(entry)       one task's decile table: H range, mean H, n, mean a (se), isotonic
                               and law values

An "entry" is analysis["tasks"][name] or analysis["pooled"]; every function takes the JSON form.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

MIN_Z = 3.0            # b1 / se(b1) at least this
MIN_ISO_R2 = 0.8       # isotonic R^2 on the deciles at least this
MIN_BINS = 5           # H "spreads" when ties leave at least this many entropy bins ...
MIN_H_RANGE = 0.25     # ... and the highest bin's mean H exceeds the lowest's by this many nats


def _f(v: Any) -> float:
  return math.nan if v is None else float(v)


def law_checks(entry: Mapping[str, Any], *, min_z: float = MIN_Z, min_iso_r2: float = MIN_ISO_R2,
               min_bins: int = MIN_BINS, min_h_range: float = MIN_H_RANGE) -> dict[str, Any]:
  """One task's (or the pooled) verdicts. "spreads": enough distinct entropy bins over enough of a
  range for a slope to mean anything; "slope_positive": b1 > 0 and b1 / se >= min_z (False when
  there is no fit); "monotone": isotonic R^2 >= min_iso_r2; "passes": all three, or None when H
  does not spread (the law is not tested there). Also z_b1, h_range, law_r2 and the copy-regime
  pair cap_exp_b0 / floor_mean (None without a fit)."""
  d = entry["deciles"]
  centres = [_f(c) for c in d["centres"]]
  h_range = max(centres) - min(centres) if centres else 0.0
  spreads = len(centres) >= min_bins and h_range >= min_h_range
  fit = entry.get("fit")
  z = _f(fit["b1"]) / _f(fit["se_b1"]) if fit and _f(fit["se_b1"]) > 0 else math.nan
  slope_ok = bool(fit) and _f(fit["b1"]) > 0 and z >= min_z
  iso = _f(entry["isotonic"]["r2"])
  monotone = iso >= min_iso_r2
  cr = entry.get("copy_regime") or {}
  return {
      "spreads": spreads, "n_bins": len(centres), "h_range": h_range,
      "b1": _f(fit["b1"]) if fit else math.nan, "z_b1": z, "slope_positive": slope_ok,
      "isotonic_r2": iso, "isotonic_r2_ci": entry["isotonic"].get("r2_ci"), "monotone": monotone,
      "law_r2": _f((entry.get("model") or {}).get("r2")),
      "cap_exp_b0": cr.get("cap_exp_b0"), "floor_mean": cr.get("floor_mean"),
      "floor_over_cap": cr.get("floor_over_cap"),
      "passes": (slope_ok and monotone) if spreads else None,
  }


def slope_difference(entry_a: Mapping[str, Any], entry_b: Mapping[str, Any]) -> dict[str, float]:
  """b1(a) - b1(b), its standard error (independent samples: the tasks' rounds are disjoint) and
  z = diff / se; nan when either task has no fit."""
  fa, fb = entry_a.get("fit"), entry_b.get("fit")
  if not fa or not fb:
    return {"diff": math.nan, "se": math.nan, "z": math.nan}
  diff = _f(fa["b1"]) - _f(fb["b1"])
  se = math.hypot(_f(fa["se_b1"]), _f(fb["se_b1"]))
  return {"diff": diff, "se": se, "z": diff / se if se > 0 else math.nan}


def _num(v: Any, fmt: str = ".2f") -> str:
  v = _f(v)
  return "" if math.isnan(v) else format(v, fmt)


def isotonic_cell(c: Mapping[str, Any]) -> str:
  """The isotonic R^2, with its interval over prompts where the entry has one ("0.797 [0.74, 0.84]")."""
  ci = c.get("isotonic_r2_ci")
  return _num(c["isotonic_r2"], ".3f") + (f" [{_num(ci[0])}, {_num(ci[1])}]" if ci else "")   # 0.797, not "0.80"


def summary_markdown(analysis: Mapping[str, Any]) -> str:
  """The entropy-law table: every task, then the pooled row and the common slope if present."""
  head = ("| task | rounds | mean a | b0 (se) | b1 (se) | b1/se | isotonic R^2 [95% CI] | law R^2 | e^b0 | "
          "lowest-decile mean a | floor / e^b0 | H spreads | passes |")
  lines = [head, "|" + "---|" * 13]
  rows = list(analysis["tasks"].items())
  if analysis.get("pooled"):
    rows.append(("all tasks (pooled)", analysis["pooled"]))
  for name, e in rows:
    c = law_checks(e)
    floor = e["deciles"][e.get("target", "mean_a")][0]
    n = f"{e['n']} ({e['n_censored']} at the end)" if e.get("n_censored") else f"{e['n']}"
    fit = e.get("fit")
    if fit:
      b0, b1 = f"{_num(fit['b0'])} ({_num(fit['se_b0'])})", f"{_num(fit['b1'])} ({_num(fit['se_b1'])})"
    else:
      b0, b1 = f"no fit: {e.get('error')}", ""
    verdict = {None: "-", True: "yes", False: "no"}[c["passes"]]
    lines.append(f"| {name} | {n} | {_num(e['mean_a'])} | {b0} | {b1} | {_num(c['z_b1'], '.1f')} | "
                 f"{isotonic_cell(c)} | {_num(c['law_r2'])} | {_num(c['cap_exp_b0'])} | "
                 f"{_num(floor)} | {_num(c['floor_over_cap'])} | "
                 f"{'yes' if c['spreads'] else 'no'} | {verdict} |")
  cs = analysis.get("common_slope")
  if cs and "b1" in cs:
    lines.append(f"\nCommon slope over tasks (one intercept per task): b1 = {_num(cs['b1'])} "
                 f"(se {_num(cs['se_b1'])}), n = {cs['n']}.")
  elif cs:
    lines.append(f"\nCommon slope over tasks: no fit: {cs['error']}")
  return "\n".join(lines) + "\n"


def decile_markdown(entry: Mapping[str, Any]) -> str:
  """One task's decile table (ascending H); with rounds censored at the answer's end, also each
  bin's censored count and E[a] at its survival rate (what the isotonic and law columns fit)."""
  d = entry["deciles"]
  iso = entry["isotonic"]["fitted"]
  law = (entry.get("model") or {}).get("bin_mean") or [None] * len(d["centres"])
  surv = "survival_a" in d
  head = "| bin | H range | mean H | rounds | mean a (se) |"
  head += " at the end | E[a] at the bin's survival rate |" if surv else ""
  lines = [head + " isotonic | law E[a] |", "|" + "---|" * (9 if surv else 7)]
  extra = zip(d["censored"], d["survival_a"]) if surv else [(None, None)] * len(d["centres"])
  for j, (lo, hi, c, n, m, se, i, f, (k, e)) in enumerate(zip(d["h_lo"], d["h_hi"], d["centres"], d["counts"],
                                                              d["mean_a"], d["sem_a"], iso, law, extra)):
    cells = f" {k} | {_num(e)} |" if surv else ""
    lines.append(f"| {j + 1} | {_num(lo, '.3f')}-{_num(hi, '.3f')} | {_num(c, '.3f')} | {n} | "
                 f"{_num(m)} ({_num(se)}) |{cells} {_num(i)} | {_num(f)} |")
  return "\n".join(lines) + "\n"
