"""PNG panels for the entropy law and the benchmark (matplotlib, Agg canvas, no pyplot state).

matplotlib is imported inside each function so glance_jax.analysis imports without it; the
figures draw on an explicit Agg canvas, so no display or global backend switch is involved.
"""

from __future__ import annotations

import math
import pathlib
from collections import defaultdict
from typing import Any, Iterable, Mapping

import numpy as np

from glance_jax.analysis.entropy_law import expected_accepted


def _figure(n_panels: int, ncols: int, size: tuple[float, float] = (3.6, 3.0)):
  from matplotlib.backends.backend_agg import FigureCanvasAgg
  from matplotlib.figure import Figure

  ncols = max(1, min(ncols, n_panels))
  nrows = max(1, math.ceil(n_panels / ncols))
  fig = Figure(figsize=(size[0] * ncols, size[1] * nrows), layout="constrained")
  FigureCanvasAgg(fig)
  axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
  for ax in axes[n_panels:]:
    ax.set_visible(False)
  return fig, axes


def _save(fig: Any, path: str | pathlib.Path) -> pathlib.Path:
  path = pathlib.Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  fig.savefig(path, format="png", dpi=120)
  return path


def _nan(v: Any) -> float:
  return math.nan if v is None else float(v)


def plot_deciles(analysis: Mapping[str, Any], path: str | pathlib.Path, *, ncols: int = 3,
                 x: str = "entropy") -> pathlib.Path:
  """Accepted length per entropy decile, one panel per task (the output of analyze()).

  Points: decile means +- 1 s.e.; dashed: the isotonic fit; solid: the fitted E[a | H]. With
  x = "entropy" the x axis is the decile's mean H and the law is drawn as a curve; with
  x = "decile" it is the decile index and the law is the model's mean over each decile's rounds."""
  if x not in ("entropy", "decile"):
    raise ValueError(f"x must be 'entropy' or 'decile', got {x!r}")
  tasks = analysis["tasks"]
  L = int(analysis["L"])
  fig, axes = _figure(len(tasks), ncols)
  for ax, (name, t) in zip(axes, tasks.items()):
    d = t["deciles"]
    xs = np.asarray(d["centres"]) if x == "entropy" else np.arange(1, len(d["centres"]) + 1)
    ax.errorbar(xs, d["mean_a"], yerr=d["sem_a"], fmt="o", ms=4, color="C0", label="decile mean")
    ax.plot(xs, t["isotonic"]["fitted"], "--", drawstyle="steps-mid", color="C2",
            label=f"isotonic (R$^2$={_nan(t['isotonic']['r2']):.2f})")
    title = name
    if t["fit"] is not None:
      f = t["fit"]
      if x == "entropy":
        grid = np.linspace(0.0, max(float(np.max(d["h_hi"])), 1e-6), 200)
        ax.plot(grid, expected_accepted(f["b0"], f["b1"], grid, L), "-", color="C3",
                label="E[a|H] fit")
      else:
        ax.plot(xs, t["model"]["bin_mean"], "-", color="C3", label="E[a|H] fit")
      title += f"\nb0={f['b0']:.2f}, b1={f['b1']:.2f}"
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("root entropy H (nats)" if x == "entropy" else "entropy decile")
    ax.set_ylabel("accepted length a")
    ax.set_ylim(0, L + 0.5)
    ax.legend(fontsize=7)
  return _save(fig, path)


def plot_cap_vs_floor(analysis: Mapping[str, Any], path: str | pathlib.Path, *,
                      cap: str = "both") -> pathlib.Path:
  """The law's cap against the lowest-decile mean accepted length, one point per task, with y = x.

  cap: "exp_b0" (e^{b0}, +- its delta-method s.e.), "L" (the horizon-L cap E[a | H = 0]) or
  "both". Points above the line: the law's cap exceeds what the lowest decile reaches; below it:
  the floor beats the law (a copy regime). Log axes when the values span more than 20x."""
  if cap not in ("exp_b0", "L", "both"):
    raise ValueError(f"cap must be 'exp_b0', 'L' or 'both', got {cap!r}")
  rows = [(n, t["copy_regime"]) for n, t in analysis["tasks"].items() if t["copy_regime"]]
  fig, (ax,) = _figure(1, 1, (4.6, 4.2))
  vals: list[float] = []
  for i, (name, c) in enumerate(rows):
    fx, fse = _nan(c["floor_mean"]), _nan(c["floor_sem"])
    if cap in ("exp_b0", "both"):
      y = _nan(c["cap_exp_b0"])
      ax.errorbar(fx, y, xerr=fse, yerr=_nan(c["se_cap_exp_b0"]), fmt="o", color=f"C{i % 10}",
                  label=f"{name}: e^b0")
      vals += [fx, y]
    if cap in ("L", "both"):
      y = _nan(c["cap_L"])
      ax.errorbar(fx, y, xerr=fse, fmt="s", mfc="none", color=f"C{i % 10}",
                  label=f"{name}: cap_L")
      vals += [fx, y]
    ax.annotate(name, (fx, y), fontsize=7, xytext=(4, 4), textcoords="offset points")
  finite = [v for v in vals if math.isfinite(v) and v > 0]
  lo, hi = (min(finite), max(finite)) if finite else (0.1, float(analysis.get("L", 15)))
  if hi / lo > 20:
    ax.set_xscale("log")
    ax.set_yscale("log")
    line = np.geomspace(lo / 1.5, hi * 1.5, 50)
  else:
    line = np.linspace(0, hi * 1.1, 50)
  ax.plot(line, line, ":", color="gray", label="y = x")
  ax.set_xlabel("lowest-decile mean accepted length (floor)")
  ax.set_ylabel("cap")
  ax.set_title("cap vs floor (copy-regime test)", fontsize=9)
  ax.legend(fontsize=6)
  return _save(fig, path)


def plot_speedup_vs_budget(rows: Iterable[Mapping[str, Any]], path: str | pathlib.Path, *,
                           title: str = "speedup vs budget") -> pathlib.Path:
  """Speedup against the tree budget N, one line per task, with bootstrap error bars.

  rows: mappings with "task", "N", "speedup" and optionally "lo", "hi" (the interval). A task
  named "geomean" is drawn in black, heavier. The dotted line at 1 is AR."""
  by_task: dict[str, list[tuple[float, float, float, float]]] = defaultdict(list)
  for r in rows:
    s = float(r["speedup"])
    by_task[str(r["task"])].append(
        (float(r["N"]), s, _nan(r.get("lo", s)), _nan(r.get("hi", s))))
  fig, (ax,) = _figure(1, 1, (5.0, 3.8))
  for i, (task, pts) in enumerate(sorted(by_task.items(), key=lambda kv: kv[0] == "geomean")):
    pts.sort()
    n, s, lo, hi = (np.array(c) for c in zip(*pts))
    yerr = np.vstack([np.nan_to_num(s - lo), np.nan_to_num(hi - s)]).clip(min=0)
    geo = task.lower() == "geomean"
    ax.errorbar(n, s, yerr=yerr, fmt="-o", ms=4, capsize=3, lw=2.2 if geo else 1.2,
                color="black" if geo else f"C{i % 10}", label=task)
  ax.axhline(1.0, ls=":", color="gray")
  if by_task and min(min(p[0] for p in v) for v in by_task.values()) > 0:
    ax.set_xscale("log", base=2)
  ax.set_xlabel("budget N (tree nodes)")
  ax.set_ylabel("speedup over AR")
  ax.set_title(title, fontsize=9)
  ax.legend(fontsize=7)
  return _save(fig, path)


def plot_paper_panels(tasks: Mapping[str, Mapping[str, Any]], path: str | pathlib.Path, *,
                      title: str = "") -> pathlib.Path:
  """The paper's three comparisons in one figure, per task: (a) tree against chain (tau of chain and
  of glance at the largest budget, the ratio's 95% interval written above), (b) fused against zeroed
  conditioning (tau of the head with and without the target's features), (c) speedup over AR
  against the budget N with bootstrap intervals.

  tasks: name -> {"chain_tau", "tree_tau", "tree_label", "ratio", "lo", "hi" (tree over chain;
  any may be None), "fused_tau", "zeroed_tau" (None when not run), "speedups": [(N, s, lo, hi)]}."""
  names = list(tasks)
  fig, axes = _figure(3, 3, (4.2, 3.4))
  x = np.arange(len(names))
  w = 0.38
  ax = axes[0]
  chain = [_nan(tasks[n].get("chain_tau")) for n in names]
  tree = [_nan(tasks[n].get("tree_tau")) for n in names]
  ax.bar(x - w / 2, chain, w, label="chain", color="C7")
  ax.bar(x + w / 2, tree, w, label=next((tasks[n]["tree_label"] for n in names if tasks[n].get("tree_label")),
                                        "tree"), color="C0")
  for i, n in enumerate(names):
    t = tasks[n]
    if t.get("ratio") is not None:
      ci = f"\n[{t['lo']:.2f}, {t['hi']:.2f}]" if t.get("lo") is not None else ""
      ax.annotate(f"{t['ratio']:.2f}x{ci}", (i, np.nanmax([chain[i], tree[i], 0])), ha="center",
                  va="bottom", fontsize=6)
  ax.set_title("(a) tree vs chain: tau", fontsize=9)
  ax2 = axes[1]
  fused = [_nan(tasks[n].get("fused_tau")) for n in names]
  zeroed = [_nan(tasks[n].get("zeroed_tau")) for n in names]
  ax2.bar(x - w / 2, fused, w, label="fused conditioning", color="C0")
  ax2.bar(x + w / 2, zeroed, w, label="zeroed", color="C3")
  ax2.set_title("(b) fused vs zeroed conditioning: tau", fontsize=9)
  for a in (ax, ax2):
    a.set_xticks(x, names, fontsize=7)
    a.set_ylabel("tau (tokens per round)")
    a.legend(fontsize=7)
  ax3 = axes[2]
  for i, n in enumerate(names):
    pts = sorted(tasks[n].get("speedups") or [])
    if not pts:
      continue
    nn, s, lo, hi = (np.array([_nan(v) for v in c]) for c in zip(*pts))
    yerr = np.vstack([np.nan_to_num(s - lo), np.nan_to_num(hi - s)]).clip(min=0)
    ax3.errorbar(nn, s, yerr=yerr, fmt="-o", ms=3, capsize=2, lw=1.2, color=f"C{i % 10}", label=n)
  ax3.axhline(1.0, ls=":", color="gray")
  ax3.set_xscale("log", base=2)
  ax3.set_xlabel("budget N (tree nodes)")
  ax3.set_ylabel("speedup over AR")
  ax3.set_title("(c) speedup vs N", fontsize=9)
  ax3.legend(fontsize=7)
  if title:
    fig.suptitle(title, fontsize=9)
  return _save(fig, path)
