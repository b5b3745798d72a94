"""The bench report's figures (`decode.py bench --plots DIR`): the entropy law's deciles and cap vs
floor, speedup against the budget, and the paper's panels, drawn from a finished report dict
(bench/report.py)."""

from __future__ import annotations

from typing import Any, Mapping


def write_plots(report: Mapping[str, Any], out_dir: str) -> list[str]:
  """deciles.png and cap_vs_floor.png (primary method's entropy law, when it has records / a fit)
  and speedup_vs_budget.png (glance-N per task and the geometric mean). Returns the paths."""
  import os

  from glance_jax.analysis import plot_cap_vs_floor, plot_deciles, plot_speedup_vs_budget
  paths = []
  law = report["entropy_law"]
  tasks = law["by_method"].get(law["method"] or "", {})
  if tasks:
    analysis = {"L": law["L"], "tasks": tasks}
    paths.append(plot_deciles(analysis, os.path.join(out_dir, "deciles.png")))
    if any(t["copy_regime"] for t in tasks.values()):
      paths.append(plot_cap_vs_floor(analysis, os.path.join(out_dir, "cap_vs_floor.png")))
  budget = {m["label"]: m["budget"] for m in report["methods"]
            if m["method"] == "glance" and not m.get("auto") and not m.get("ablate")}
  rows = [{"task": name, "N": budget[label], **_filled(t["methods"][label]["speedup_vs_ar"])}
          for name, t in report["tasks"].items() for label in budget]
  rows += [{"task": "geomean", "N": budget[label], **_filled(report["geomean"][label])}
           for label in budget if label in report["geomean"]]
  if rows:
    paths.append(plot_speedup_vs_budget(rows, os.path.join(out_dir, "speedup_vs_budget.png")))
  panels = paper_panel_rows(report)
  if panels:
    from glance_jax.analysis import plot_paper_panels
    paths.append(plot_paper_panels(panels, os.path.join(out_dir, "paper_panels.png"),
                                   title=f"regime: {report['config'].get('regime') or 'as loaded'}"))
  return [str(p) for p in paths]


def _filled(speedup: Mapping[str, Any]) -> dict[str, Any]:
  """A speedup entry with a missing interval bound (fewer than 2 prompts) set to the speedup."""
  return {k: (v if v is not None else speedup["speedup"]) for k, v in speedup.items()}


def paper_panel_rows(report: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
  """Per task, what plot_paper_panels draws: tree over chain, fused vs zeroed conditioning (the
  ablated method against the one it ablates), speedup against N; {} when no glance-N ran."""
  fixed = {m["label"]: m["budget"] for m in report["methods"]
           if m["method"] == "glance" and not m.get("auto") and not m.get("ablate")}
  zeroed = next((m["label"] for m in report["methods"] if m.get("ablate") == "zero-context"), None)
  fused = zeroed.split("[")[0] if zeroed else None     # the method the ablation ablates
  if not fixed:
    return {}
  out = {}
  for name, t in report["tasks"].items():
    ms = t["methods"]
    toc = t.get("tree_over_chain") or {}
    out[name] = {
        "chain_tau": ms["chain"]["tau"] if "chain" in ms else None, "tree_tau": toc.get("tree_tau"),
        "tree_label": toc.get("tree"), "ratio": toc.get("ratio"), "lo": toc.get("lo"), "hi": toc.get("hi"),
        "fused_tau": ms[fused]["tau"] if fused in ms else None,
        "zeroed_tau": ms[zeroed]["tau"] if zeroed in ms else None,
        "speedups": [(n, *(_filled(ms[label]["speedup_vs_ar"])[k] for k in ("speedup", "lo", "hi")))
                     for label, n in fixed.items() if label in ms]}
  return out
