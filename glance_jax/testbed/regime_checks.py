"""Does a built testbed sit in the paper's regime? Issue 23's must-shows, read off the bench reports.

    python -m glance_jax.testbed.regime_checks --bench testbed/results/bench.json \
        --memory testbed/results/bench_memory.json --eval testbed/eval.json [--markdown out.md]

`--bench` is a compute-regime `decode.py bench` report with chain, glance-63, its zero-context
ablation, the entropy law and the image test (--ablate zero-context --image-test); `--memory` a
memory-regime report with glance-auto (plain and / or [parent]); `--eval` the build's held-out
evaluation (testbed/evaluate.py). Each check is computed from those numbers alone, per task, with
the threshold beside it; a check whose inputs are absent says so ("missing") instead of passing.
Nothing is re-measured here: the verdicts are exactly the reports' figures against the bounds.

The last row is the summary over the must-shows as the issue writes them: the zeroed-conditioning tau
is one figure over every task's rounds (as the paper's 1.11), and glance-auto is the arm running the
head's own trained tree scores where the report has it (`glance-auto[parent]`). Rows beside those (the
zeroed tau per task, another glance-auto arm) are shown, marked +, outside the summary.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
from typing import Any, Callable, Mapping

from glance_jax.analysis.law_report import isotonic_cell, law_checks

TAU_BAND = (2.5, 8.0)     # glance-63's tau, every task (the paper: 3.09-5.12 at 8B)
MAX_CAP_SHARE = 0.10      # rounds at the block cap (A = L), every task
MIN_ACCURACY = 0.95       # held-out clear fields read right, grounded tasks
MIN_TREE_OVER_CHAIN = 1.2  # lower CI bound of glance-63 tau / chain tau
MAX_ZEROED_TAU = 1.3      # glance-63 with the head's target features zeroed
AUTO_FLOOR = 0.97         # glance-auto's lower CI bound vs AR, every task
AUTO_BEST = 1.5           # glance-auto's speedup on the best grounded task
TREE = "glance-63"


def _num(v: Any, fmt: str = ".2f") -> str:
  return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)


def _row(name: str, bound: str, values: Mapping[str, str], ok: bool | None, note: str = "", must: bool = True) -> dict:
  """must: one of issue 23's must-shows as written; False: shown beside them (a stricter reading, or an
  arm the must-show does not name), outside the summary verdict."""
  return dict(check=name, bound=bound, values=dict(values), passes=ok, note=note, must=must)


def _per_task(tasks: Mapping[str, Any], get: Callable[[Mapping[str, Any]], Any]) -> dict[str, Any]:
  out = {}
  for name, t in tasks.items():
    try:
      out[name] = get(t)
    except (KeyError, TypeError):
      out[name] = None
  return out


def _all(vals: Mapping[str, Any], ok: Callable[[Any], bool]) -> bool | None:
  if not vals or any(v is None for v in vals.values()):
    return None
  return all(ok(v) for v in vals.values())


def _law_cell(c) -> str:
  """"8.8 (0.976 [0.95, 0.99])": b1/se, then the isotonic R^2 with its interval where the report has one."""
  return f"{_num(c['z_b1'], '.1f')} ({isotonic_cell(c)})" if c else "-"


def _identity_row(name: str, tasks: Mapping[str, Any]) -> dict:
  """Per task "yes", or "NO (k)" for k prompts some arm left AR on, with how many of them were only
  float ties of AR's own step where the bench diagnosed them (bench/audit.divergences). The check
  fails either way; the note names the ties."""
  vals, notes, ok = {}, [], {}
  for t, tt in tasks.items():
    arms = list(tt["methods"].values())
    ok[t] = all(s["lossless"] for s in arms)
    bad = {i for s in arms for i in s.get("mismatch_ids", [])}
    if ok[t]:
      vals[t] = "yes"
      continue
    if not bad or not any("divergences" in s for s in arms):
      vals[t] = f"NO ({len(bad)})" if bad else "NO"
      continue
    faults = set()          # prompts some arm left AR on without a tie (or without a diagnosis)
    for s in arms:
      divs = s.get("divergences")
      faults |= set(s.get("mismatch_ids", [])) if divs is None else {d["id"] for d in divs if not d["tie"]}
    vals[t] = f"NO ({len(bad)}: all fp ties)" if not faults else f"NO ({len(bad)}: {len(bad - faults)} fp ties)"
    ties = {d["id"]: d for s in arms for d in s.get("divergences", []) if d["tie"] and d["id"] not in faults}
    notes += [f"{t} {i} at token {d['at']}, AR's top-2 gap {d['gap']:.1e}" for i, d in sorted(ties.items())]
  note = ("fp ties, where AR's one-row step and the verify's many-row pass round apart: " + "; ".join(notes)
          if notes else "")
  return _row(name, "every prompt", vals, _all(ok, bool), note)


def check(bench: Mapping[str, Any] | None, memory: Mapping[str, Any] | None,
          evaluation: Mapping[str, Any] | None, grounded: tuple[str, ...], open_: tuple[str, ...]) -> list[dict]:
  """The must-shows as rows {check, bound, values (per task, formatted), passes (None: missing), note}."""
  rows = []
  if evaluation is not None:
    acc = {t: (evaluation.get(t) or {}).get("fields_clear") for t in grounded}
    rows.append(_row("held-out clear fields read right (grounded)", f">= {MIN_ACCURACY}",
                     {t: _num(v) for t, v in acc.items()}, _all(acc, lambda v: v >= MIN_ACCURACY)))
  else:
    rows.append(_row("held-out clear fields read right (grounded)", f">= {MIN_ACCURACY}", {}, None, "no --eval"))
  tasks = (bench or {}).get("tasks", {})
  tau = _per_task(tasks, lambda t: t["methods"][TREE]["tau"])
  rows.append(_row(f"{TREE} tau", f"{TAU_BAND[0]}-{TAU_BAND[1]}", {t: _num(v) for t, v in tau.items()},
                   _all(tau, lambda v: TAU_BAND[0] <= v <= TAU_BAND[1])))
  cap = _per_task(tasks, lambda t: t["methods"][TREE]["share_at_block_cap"])
  rows.append(_row("rounds at the block cap", f"<= {MAX_CAP_SHARE}", {t: _num(v) for t, v in cap.items()},
                   _all(cap, lambda v: v <= MAX_CAP_SHARE)))
  ent = _per_task(tasks, lambda t: t["methods"][TREE]["mean_root_entropy"])
  g = [ent.get(t) for t in grounded if t in ent]
  o = [ent.get(t) for t in open_ if t in ent]
  ok = None if not g or not o or None in g + o else max(g) < min(o)
  rows.append(_row("mean root entropy, grounded below open", "max grounded < min open",
                   {t: _num(v) for t, v in ent.items()}, ok))
  toc = _per_task(tasks, lambda t: t["tree_over_chain"])
  rows.append(_row("tree over chain at N = 63 [95% CI]", f"lower >= {MIN_TREE_OVER_CHAIN}",
                   {t: f"{v['ratio']:.2f} [{v['lo']:.2f}, {v['hi']:.2f}]" if v else "-" for t, v in toc.items()},
                   _all(toc, lambda v: v["lo"] >= MIN_TREE_OVER_CHAIN)))
  zero = _per_task(tasks, lambda t: t["methods"][f"{TREE}[zero-context]"]["tau"])
  # the must-show is one figure, as the paper's (1.11 over its benchmarks): the pooled row; per task is stricter
  rows.append(_row("zeroed-conditioning tau", f"<= {MAX_ZEROED_TAU}", {t: _num(v) for t, v in zero.items()},
                   _all(zero, lambda v: v <= MAX_ZEROED_TAU), must=False))
  pooled = pooled_tau(tasks, f"{TREE}[zero-context]")
  rows.append(_row("... over every task's rounds (the paper's one figure)", f"<= {MAX_ZEROED_TAU}", {},
                   None if pooled is None else pooled <= MAX_ZEROED_TAU, _num(pooled)))
  rows += _image_rows(tasks, grounded, open_)
  law = _per_task(tasks, lambda t: law_checks(t["entropy_law"]))
  rows.append(_row("entropy law: b1/se >= 3, isotonic R^2 >= 0.8 [95% CI over prompts]", "both, every task",
                   {t: _law_cell(c) for t, c in law.items()},
                   _all(law, lambda c: bool(c["passes"]))))
  rows.append(_identity_row("every arm identical to AR (compute bench)", tasks))
  rows += _speed_rows((memory or {}).get("tasks", {}), grounded)
  must = [r["passes"] for r in rows if r["must"]]
  rows.append(_row(SUMMARY, "every row not marked +", {},
                   None if None in must else all(must), "" if None in must else f"{sum(must)} of {len(must)}"))
  return rows


SUMMARY = "every must-show of issue 23"


def pooled_tau(tasks: Mapping[str, Any], label: str) -> float | None:
  """One method's tau over every task's rounds together: sum(tau_t * rounds_t) / sum(rounds_t)
  (tau is a mean over rounds), as the paper quotes its zeroed-conditioning tau, one figure over its
  benchmarks. None if a task lacks the method."""
  per = _per_task(tasks, lambda t: (t["methods"][label]["tau"], t["methods"][label]["rounds"]))
  if not per or any(v is None for v in per.values()):
    return None
  rounds = sum(r for _, r in per.values())
  return sum(tau * r for tau, r in per.values()) / rounds if rounds else None


def _image_rows(tasks, grounded, open_) -> list[dict]:
  """The drafter-side swap (bench/image_swap.py): gain = correct - swapped accepted length."""
  def gain(t):
    ch = t["image_test"]["change"]["drafter_accepted"]
    swapped = (t["image_test"].get("drafter_mismatched") or {}).get("accepted")
    return dict(d=-ch["diff"], lo=-ch["hi"], hi=-ch["lo"], rel=-ch["diff"] / swapped if swapped else None)
  gains = _per_task(tasks, gain)
  g = [gains[t]["d"] for t in grounded if gains.get(t)]
  o = [gains[t]["d"] for t in open_ if gains.get(t)]
  larger = None if len(g) != len([t for t in grounded if t in gains]) or not o else min(g) > max(o)
  return [
      _row("correct over swapped image (draft's view), accepted-length gain [95% CI] (/ swapped)", "lower > 0, every task",
           {t: f"{v['d']:+.2f} [{v['lo']:.2f}, {v['hi']:.2f}]" + (f" ({v['rel']:+.0%})" if v["rel"] is not None else "")
            if v else "-" for t, v in gains.items()},
           _all(gains, lambda v: v["lo"] > 0)),
      _row("... larger on the grounded tasks", "min grounded > max open", {}, larger),
  ]


def _speed_rows(tasks, grounded) -> list[dict]:
  """glance-auto (each variant the report holds) against AR, memory-bound regime."""
  rows = []
  labels = sorted({lb for t in tasks.values() for lb in t["methods"] if lb.startswith("glance-auto")})
  if not labels:
    return [_row("glance-auto vs AR, memory-bound", f"lower >= {AUTO_FLOOR}; best grounded >= {AUTO_BEST}", {}, None,
                 "no memory-regime report with glance-auto")]
  # the must-show's glance-auto runs the head's own trained tree scores where the report has them (the
  # parent-conditioned correction shipped beside the head), else the product of marginals
  named = next((lb for lb in labels if lb.endswith("[parent]")), "glance-auto" if "glance-auto" in labels else labels[0])
  for lb in labels:
    sp = _per_task(tasks, lambda t: t["methods"][lb]["speedup_vs_ar"])
    widths = _per_task(tasks, lambda t: t["methods"][lb].get("widths_used"))
    rows.append(_row(f"{lb} vs AR, memory-bound [95% CI] (widths)", f"lower >= {AUTO_FLOOR}",
                     {t: f"{v['speedup']:.2f} [{v['lo']:.2f}, {v['hi']:.2f}] ({'/'.join(map(str, widths[t] or []))})"
                      if v else "-" for t, v in sp.items()},
                     _all(sp, lambda v: v["lo"] >= AUTO_FLOOR), must=lb == named))
    best = [sp[t]["speedup"] for t in grounded if sp.get(t)]
    rows.append(_row(f"... {lb} on the best grounded task", f">= {AUTO_BEST}",
                     {}, None if not best else max(best) >= AUTO_BEST, f"best {max(best):.2f}" if best else "",
                     must=lb == named))
  rows.append(_identity_row("every arm identical to AR (memory bench)", tasks))
  return rows


def markdown(rows: list[dict], tasks: list[str]) -> str:
  lines = ["| must show | bound | " + " | ".join(tasks) + " | passes |", "|" + "---|" * (len(tasks) + 3)]
  for r in rows:
    verdict = {True: "yes", False: "**no**", None: "missing"}[r["passes"]]
    if r["note"]:
      verdict += f" ({r['note']})"
    name = r["check"] + ("" if r.get("must", True) else " +")
    lines.append(f"| {name} | {r['bound']} | " + " | ".join(r["values"].get(t, "") for t in tasks)
                 + f" | {verdict} |")
  if any(not r.get("must", True) for r in rows):
    lines.append("\n+ shown beside the must-shows, outside the summary: a stricter reading (the zeroed tau per task; "
                 "the issue's is one figure, as the paper's) or a glance-auto arm other than the one with the "
                 "head's own trained tree scores")
  return "\n".join(lines) + "\n"


def _load(path: str | None, flag: str) -> dict | None:
  if path is None:
    return None
  p = pathlib.Path(path)
  try:
    return json.loads(p.read_text())
  except FileNotFoundError:
    raise SystemExit(f"{flag} {p}: not found") from None
  except ValueError as e:
    raise SystemExit(f"{flag} {p}: not JSON ({e})") from None


def main(argv=None) -> list[dict]:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--bench", help="compute-regime bench report (JSON)")
  ap.add_argument("--memory", help="memory-regime bench report (JSON)")
  ap.add_argument("--eval", dest="evaluation", help="the build's eval.json")
  ap.add_argument("--suite", default=None, help="suite version naming the grounded / open tasks "
                  "(default: the shipped testbed's)")
  ap.add_argument("--markdown", help="also write the table here")
  args = ap.parse_args(argv)
  from glance_jax.testbed import paths, suites
  suite = suites.get(args.suite) if args.suite else paths.suite()
  bench, memory = _load(args.bench, "--bench"), _load(args.memory, "--memory")
  rows = check(bench, memory, _load(args.evaluation, "--eval"), tuple(suite.GROUNDED), tuple(suite.OPEN))
  md = markdown(rows, list(suite.TASKS))
  print(md, end="")
  if args.markdown:
    pathlib.Path(args.markdown).write_text(md)
  return rows


if __name__ == "__main__":
  main()
