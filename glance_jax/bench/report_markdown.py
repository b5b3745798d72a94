"""The `decode.py bench` report (bench/report.py) as markdown tables: one row per task and method
with CIs, the geometric means, tree over chain, the draft vocabulary, GLANCE against the rivals, the
decode loop alone, and the entropy law's summary and deciles."""

from __future__ import annotations

from typing import Any, Mapping

from glance_jax.analysis import decile_markdown, summary_markdown


def _f(v: Any, digits: int = 2) -> str:
  return "-" if v is None else f"{v:.{digits}f}"


def _ci(s: Mapping[str, Any] | None, with_other: bool = False) -> str:
  if s is None:
    return "-"
  text = f"{s['speedup']:.2f}"
  if s.get("lo") is not None:
    text += f" [{s['lo']:.2f}, {s['hi']:.2f}]"
  return f"{text} vs {s['other']}" if with_other else text


def _tau(s: Mapping[str, Any]) -> str:
  ci = s.get("tau_ci") or {}
  if s["method"] == "ar" or ci.get("lo") is None:
    return f"{s['tau']:.2f}"
  return f"{s['tau']:.2f} [{ci['lo']:.2f}, {ci['hi']:.2f}]"


def _gain(change: Mapping[str, Any]) -> str:
  """correct - swapped from a change (swapped - correct) with its interval."""
  d, lo, hi = change["diff"], change.get("lo"), change.get("hi")
  if lo is None or hi is None:
    return f"{-d:+.2f}"
  return f"{-d:+.2f} [{-hi:.2f}, {-lo:.2f}]"


def markdown(report: Mapping[str, Any]) -> str:
  """One row per task and method, then one per method for the geometric mean over tasks, the
  tree-over-chain tau ratio per task, then the entropy law of the primary method: the summary
  (law_report.summary_markdown: per task, pooled, common slope) and each task's decile table."""
  head = ("| task | method | N | passes | prompts | tau [95% CI] | tokens/round | ms/token | speedup vs AR [95% CI] "
          "| vs best other [95% CI] | a>=8 share | mean H | lossless |")
  lines = [head, "|" + "---|" * 13]
  for name, t in report["tasks"].items():
    for label, s in t["methods"].items():
      ties = s.get("float_ties") or 0       # mismatches the bench found to be float ties of AR's step
      tie_note = f": {ties} fp tie{'s' * (ties > 1)}" if ties else ""
      lossless = "yes" if s["lossless"] else f"NO ({s['mismatches']}{tie_note})"
      n = "-" if s["method"] == "ar" else (
          "/".join(map(str, s["widths_used"])) if s.get("auto") and s.get("widths_used") else s["budget"])
      lines.append(f"| {name} | {label} | {n} | {s.get('draft_passes_per_round', '-')} | "
                   f"{s['n_prompts']} | {_tau(s)} | {_f(s['tokens_per_round'])} | "
                   f"{s['ms_per_token']:.3f} | {_ci(s['speedup_vs_ar'])} | "
                   f"{_ci(s['speedup_vs_best_other'], True)} | {_f(s['share_a_ge_8'], 3)} | "
                   f"{_f(s['mean_root_entropy'])} | {lossless} |")
  for label, g in report["geomean"].items():
    lines.append(f"| geomean ({g['n_tasks']} tasks) | {label} | | | | | | | "
                 f"{_ci({**g, 'other': 'ar'})} | | | | |")
  toc = {name: t.get("tree_over_chain") for name, t in report["tasks"].items()}
  if any(toc.values()):
    first = next(v for v in toc.values() if v)
    lines += ["", f"Tree over chain ({first['tree']} tau / chain tau; paper: 1.45-1.49x at N = 63):", "",
              "| task | tree tau | chain tau | ratio [95% CI] |", "|" + "---|" * 4]
    for name, v in toc.items():
      if v:
        lines.append(f"| {name} | {v['tree_tau']:.2f} | {v['chain_tau']:.2f} | "
                     f"{_ci({'speedup': v['ratio'], 'lo': v['lo'], 'hi': v['hi']})} |")
  img = {name: t.get("image_test") for name, t in report["tasks"].items()}
  img = {name: v for name, v in img.items() if v and "correct" in v}
  if img:
    first = next(v for v in img.values() if v)
    lines += ["", f"Image test (glance N = {first['budget']}, teacher-forced along the correct-image answer; "
              "gain = correct minus swapped accepted length, paired over positions; the draft's image swapped: "
              "the head drafts from another image's features, the correct-image target verifies; both "
              "swapped: the target too, bench/image_swap.py; (x%) = gain / swapped, the paper's measure):", "",
              "| task | positions | accepted, correct | draft's image swapped | gain [95% CI] "
              "| both swapped | gain [95% CI] |", "|" + "---|" * 7]
    for name, v in img.items():
        cells = []
        for cond, key in (("drafter_mismatched", "drafter_accepted"), ("mismatched", "accepted")):
          ch = v.get("change", {}).get(key)
          if cond not in v or not ch:
            cells.append("- | -")
            continue
          swapped = v[cond]["accepted"]   # the paper's "lengthens accepted blocks by x%": gain / swapped
          rel = f" ({-ch['diff'] / swapped:+.0%})" if swapped else ""
          cells.append(f"{_f(swapped)} | {_gain(ch)}{rel}")
        lines.append(f"| {name} | {v['positions']} | {_f(v['correct']['accepted'])} | " + " | ".join(cells) + " |")
  dvs = {name: (t, t.get("draft_vocab")) for name, t in report["tasks"].items()}
  if any(v for _, v in dvs.values()):
    lines += ["", "Draft vocabulary (the arm's head drafts over K tokens; coverage = share inside them):", "",
              "| task | arm | K | coverage, training rows | coverage, AR's tokens | tau | tau, whole vocabulary |",
              "|" + "---|" * 7]
    for name, (t, v) in dvs.items():
      if v:
        base = t["methods"].get(v["label"].split("[")[0], {}).get("tau")
        cov = "-" if v["ar_coverage"] is None else f"{v['ar_coverage']:.4f}"
        lines.append(f"| {name} | {v['label']} | {v['size']} | {v['train_coverage']:.4f} | {cov} | "
                     f"{t['methods'][v['label']]['tau']:.2f} | {'-' if base is None else f'{base:.2f}'} |")
  vs = {name: t.get("glance_vs_rivals") for name, t in report["tasks"].items()}
  if any(vs.values()):
    rivals = sorted({r for v in vs.values() if v for r in v["rivals"]})
    lines += ["", "GLANCE against the rivals (the paper's layout: GLANCE at its fastest arm per task; "
              "faster by = rival time / GLANCE time, same prompts):", "",
              "| task | GLANCE arm | GLANCE tau | " + " | ".join(f"{r} tau | GLANCE faster by [95% CI]" for r in rivals)
              + " |", "|" + "---|" * (3 + 2 * len(rivals))]
    for name, v in vs.items():
      if v:
        cells = [f"{v['rivals'][r]['tau']:.2f} | "
                 f"{_ci({'speedup': v['rivals'][r]['glance_faster_by'], 'lo': v['rivals'][r]['lo'], 'hi': v['rivals'][r]['hi']})}"
                 if r in v["rivals"] else "- | -" for r in rivals]
        lines.append(f"| {name} | {v['glance']} | {v['glance_tau']:.2f} | " + " | ".join(cells) + " |")
  dec = {name: t["methods"] for name, t in report["tasks"].items()
         if t["methods"] and "ar" in t["methods"] and all("decode_speedup_vs_ar" in s for s in t["methods"].values())}
  if dec:
    labels = [lb for lb in next(iter(dec.values())) if lb != "ar"]
    lines += ["", "The decode loop alone (prefill excluded; what the same rounds give on a long answer), "
              "speedup vs AR's loop [95% CI]:", "",
              "| task | AR prefill share | AR decode ms/token | " + " | ".join(labels) + " |",
              "|" + "---|" * (3 + len(labels))]
    for name, ms in dec.items():
      lines.append(f"| {name} | {_f(ms['ar']['prefill_share'])} | {ms['ar']['decode_ms_per_token']:.3f} | "
                   + " | ".join(_ci(ms[lb]["decode_speedup_vs_ar"]) for lb in labels) + " |")
  law = report["entropy_law"]
  primary = law["method"]
  if primary and law["by_method"].get(primary):
    an = {"tasks": law["by_method"][primary], "pooled": law.get("pooled", {}).get(primary),
          "common_slope": law.get("common_slope", {}).get(primary)}
    lines += ["", f"Entropy law ({primary}, L = {law['L']}; logit p = b0 - b1 H):", "",
              summary_markdown(an).rstrip("\n")]
    for name, e in an["tasks"].items():
      lines += ["", f"Deciles of {name} ({primary}):", "", decile_markdown(e).rstrip("\n")]
  return "\n".join(lines) + "\n"
