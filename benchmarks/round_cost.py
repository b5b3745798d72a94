"""The cost of a round: t_round(N) / t_AR and its parts, and the budget N it predicts is fastest.

    python benchmarks/round_cost.py --sizes tiny,small,medium \
        [--budgets 1,15,31,63] [--taus bench.json | --taus 15:3.1,31:3.4,63:3.6] [--json OUT]

Per size of benchmarks/target_speed.py (tiny / small / medium: random fp32 "lively" weights, a
random 2-layer head by default), glance_jax.bench.round_split.split_size measures, on the state after a
~300-token prompt with one image (batch 1): each phase of a round alone (draft, tree, verify,
walk+commit; each its own jitted fori_loop, (T(R) - T(0)) / R) and the whole round through the
real jitted loop with the oracle drafter (generate(..., oracle_tokens=AR's continuation): every
round accepts L = 15, so ms/round is the cost of a full-acceptance round). The AR round is one
token, so t_round(N) / t_AR is the tau a budget needs to break even with AR on this machine.
Repeats are interleaved across everything compared; medians; ratios only within one run.

With taus (the mean tokens per round a trained head reaches at budget N, e.g. from
`decode.py bench`), the predicted speedup over AR is tau(N) * t_AR / t_round(N), and the
best budget is the N that maximises it (per size: the round costs differ by size).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import shlex
import sys
import time

if __package__ in (None, ""):  # run as `python benchmarks/round_cost.py`
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from glance_jax.bench import round_split, timing  # noqa: E402

SIZES = ("tiny", "small", "medium", "testbed")  # testbed: the shipped testbed target's shapes
BUDGETS = (1, 15, 31, 63)


# --- taus ------------------------------------------------------------------------------------------

def parse_taus(spec: str) -> dict[int, float]:
  """'15:3.1,31:3.4' -> {15: 3.1, 31: 3.4}; anything else is read as a bench JSON file."""
  if ":" in spec and not os.path.exists(spec):
    out = {}
    for part in spec.split(","):
      n, _, tau = part.strip().partition(":")
      try:
        out[int(n)] = float(tau)
      except ValueError:
        raise ValueError(f"--taus: {part!r} is not N:tau (e.g. 15:3.1)") from None
    return out
  return read_taus(spec)


def read_taus(path: str | os.PathLike) -> dict[int, float]:
  """Mean over tasks of each glance budget's tau in a `decode.py bench` JSON (docs/benchmarking.md
  schema: tasks.<task>.methods.<label> with method "glance", budget N and tau). Only the plain
  `glance-N` labels: glance-auto (budget 63 too) and ablations (`glance-63[zero-context]`) are not
  budget N's tau."""
  try:
    data = json.loads(pathlib.Path(path).read_text())
  except FileNotFoundError:
    raise ValueError(f"--taus: no such file {path}") from None
  except json.JSONDecodeError as e:
    raise ValueError(f"--taus: {path} is not JSON ({e.msg} at line {e.lineno})") from None
  found: dict[int, list[float]] = {}
  for task in (data.get("tasks") or {}).values():
    for label, stats in (task.get("methods") or {}).items():
      tau = stats.get("tau")
      plain = label == f"glance-{stats.get('budget')}" and not stats.get("ablate")
      if stats.get("method") == "glance" and plain and isinstance(tau, (int, float)) and math.isfinite(tau):
        found.setdefault(int(stats["budget"]), []).append(float(tau))
  if not found:
    raise ValueError(f"--taus: {path} holds no glance tau under tasks.<task>.methods (a decode.py bench report?)")
  return {n: sum(v) / len(v) for n, v in sorted(found.items())}


# --- the table -------------------------------------------------------------------------------------

def cost_rows(res: dict, taus: dict[int, float] | None = None) -> list[dict]:
  """round_split.split_size's result -> one row per method: parts, t_round / t_AR, and with
  taus the predicted speedup tau(N) * t_AR / t_round(N)."""
  rows = []
  for r in res["rows"]:
    row = dict(method=r["method"], budget=r["budget"], draft_ms=r["draft_ms"], tree_ms=r["tree_ms"],
               verify_ms=r["verify_ms"], walk_commit_ms=r["walk_commit_ms"], sum_ms=r["sum_ms"],
               round_ms=r["round_ms"], ratio_to_ar=r["ratio_to_ar"], oracle_tau=r["tau"])
    if "same_tokens_as_ar" in r:
      row["same_tokens_as_ar"] = r["same_tokens_as_ar"]
    if r["method"] == "glance" and taus and r["budget"] in taus:
      row["tau"] = taus[r["budget"]]
      row["predicted_speedup"] = taus[r["budget"]] / r["ratio_to_ar"]
    rows.append(row)
  return rows


def best_budget(rows: list[dict]) -> dict | None:
  """The glance row with the largest predicted speedup (None without taus)."""
  cands = [r for r in rows if "predicted_speedup" in r]
  if not cands:
    return None
  b = max(cands, key=lambda r: r["predicted_speedup"])
  return dict(budget=b["budget"], tau=b["tau"], ratio_to_ar=b["ratio_to_ar"], predicted_speedup=b["predicted_speedup"])


def table(res: dict, rows: list[dict]) -> str:
  has_tau = any("tau" in r for r in rows)
  ar = next(r for r in rows if r["method"] == "ar")
  head = ("| N | draft ms | tree ms | verify ms | walk+commit ms | sum of parts ms | t_round ms (oracle, real loop) "
          "| t_round / t_AR" + (" | tau(N) | predicted speedup |" if has_tau else " |"))
  lines = [f"**{res['size']}** target ({res['params_m']:.1f}M params), head {res['head_layers']} layers "
           f"({res['head_params_m']:.1f}M), context {res['context']} tokens, t_AR = {ar['round_ms']:.3f} ms/token",
           "", head, "|" + "---|" * (8 + 2 * has_tau)]
  for r in rows:
    name = "AR" if r["method"] == "ar" else str(r["budget"])
    line = (f"| {name} | {r['draft_ms']:.3f} | {r['tree_ms']:.3f} | {r['verify_ms']:.3f} | {r['walk_commit_ms']:.3f} "
            f"| {r['sum_ms']:.3f} | {r['round_ms']:.3f} | {r['ratio_to_ar']:.2f} |")
    if has_tau:
      line += (f" {r['tau']:.2f} | {r['predicted_speedup']:.2f}x |" if "tau" in r else
               (" 1.00 | 1.00x |" if r["method"] == "ar" else " - | - |"))
    lines.append(line)
  best = best_budget(rows)
  if best:
    lines += ["", f"best budget: N = {best['budget']} (tau {best['tau']:.2f} / round cost {best['ratio_to_ar']:.2f} "
                  f"t_AR = {best['predicted_speedup']:.2f}x AR)"]
  return "\n".join(lines)


NOTES = """\
t_round / t_AR: a round of budget N costs this many AR tokens, so it is the tau (tokens per round)
N must reach to break even with AR on this machine. Parts are timed alone (sum / whole ~ 1 means
they account for the round). predicted speedup = tau(N) / (t_round / t_AR)."""


# --- the cost table glance-auto reads (decode/budget.py) ------------------------------------------

def cost_table(res: dict, config, head_layers: int, block_size: int = 16) -> dict:
  """One size's split -> the `--round-cost` JSON: t(w) / t_AR per verify width of a glance-auto round,
  from the sums of the timed parts (each phase timed over many in-program repetitions: far steadier
  on a shared machine than the few whole-loop runs, which are kept in the JSON as `whole_round_ms`).
  w > 0: draft + tree + verify + walk of glance-w; w = 0: AR's verify + walk plus the draft and the
  smallest tree (an auto round always drafts, even when it then verifies the root alone)."""
  import jax

  from glance_jax.decode.policies import COST_SCHEMA
  rows = [r for r in res["rows"]]
  t_ar = next(r for r in rows if r["method"] == "ar")["sum_ms"]
  glance = sorted((r for r in rows if r["method"] == "glance"), key=lambda r: r["budget"])
  widths = {str(r["budget"]): r["sum_ms"] / t_ar for r in glance}
  widths["0"] = (t_ar + glance[0]["draft_ms"] + glance[0]["tree_ms"]) / t_ar
  t = config.text
  return {"schema": COST_SCHEMA, "t_over_ar": dict(sorted(widths.items(), key=lambda kv: int(kv[0]))),
          "t_ar_ms": t_ar, "whole_round_ms": {("ar" if r["method"] == "ar" else str(r["budget"])): r["round_ms"]
                                                for r in rows},
          "meta": {"size": res["size"], "hidden_size": t.hidden_size, "num_layers": t.num_hidden_layers,
                   "vocab_size": t.vocab_size, "head_layers": head_layers, "block_size": block_size,
                   "backend": jax.default_backend(), "device": str(jax.devices()[0].device_kind),
                   "batch": 1, "context": res["context"]}}


def _config(size: str):
  if size == "testbed":
    from glance_jax.config import Qwen3VLConfig
    from glance_jax.testbed import paths
    return Qwen3VLConfig.from_json_file(paths.TARGET / "config.json")
  from benchmarks import target_speed
  return target_speed.make_config(size)


# --- CLI -------------------------------------------------------------------------------------------

def int_list(s: str) -> tuple[int, ...]:
  return tuple(int(x) for x in s.split(",") if x.strip())


def main(argv=None) -> dict:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--sizes", default=",".join(SIZES), help="comma-separated: tiny,small,medium")
  ap.add_argument("--budgets", default=",".join(map(str, BUDGETS)))
  ap.add_argument("--taus", default=None, help="bench JSON from `decode.py bench`, or N:tau,... (15:3.1,31:3.4)")
  ap.add_argument("--head-layers", type=int, default=2)
  ap.add_argument("--context", type=int, default=300, help="prompt tokens (one 64x96 image = 6 of them)")
  ap.add_argument("--new-tokens", type=int, default=129, help="tokens per whole-loop run")
  ap.add_argument("--repeats", type=int, default=5)
  ap.add_argument("--target-ms", type=float, default=25.0, help="each timed phase call lasts about this long")
  ap.add_argument("--widen", type=int, default=1, help="widen every random pair this many times "
                  "(glance_jax/qwen3_vl/widen.py; the testbed's memory-bound regime is testbed x8)")
  ap.add_argument("--json", default=None, help="write the results here")
  ap.add_argument("--cost-table", default=None,
                  help="write the glance-auto round-cost table (decode.py bench --round-cost) of the first "
                       "size here; --budgets should then hold auto's widths (e.g. 15,31,63)")
  args = ap.parse_args(argv)
  sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
  for s in sizes:
    if s not in SIZES:
      ap.error(f"unknown size {s!r}; choose from {', '.join(SIZES)}")
  budgets = int_list(args.budgets)
  if args.widen < 1:
    ap.error(f"--widen must be >= 1, got {args.widen}")
  if not budgets or min(budgets) < 1:
    ap.error(f"--budgets must be integers >= 1, got {args.budgets!r}")
  try:
    taus = parse_taus(args.taus) if args.taus else None
  except ValueError as e:
    ap.error(str(e))
  command = timing.command_line(argv, "benchmarks/round_cost.py")
  import jax
  print("$ " + shlex.join(command))
  print(f"jax {jax.__version__} on {jax.devices()[0].platform} ({os.cpu_count()} CPU cores)")
  t0 = time.perf_counter()
  s = round_split.split(sizes=sizes, budgets=budgets, context=args.context, head_layers={z: args.head_layers for z in sizes},
                          target_ms=args.target_ms, repeats=args.repeats, new_tokens=args.new_tokens, chain=False,
                          configs={z: _config(z) for z in sizes}, widen=args.widen)
  out = []
  print(f"\n## Cost of a round (oracle drafter: every round accepts 15), {args.repeats} interleaved repeats, medians\n")
  for res in s["results"]:
    rows = cost_rows(res, taus)
    out.append(dict(size=res["size"], params_m=res["params_m"], head_layers=res["head_layers"],
                    head_params_m=res["head_params_m"], context=res["context"], t_ar_ms=rows[0]["round_ms"],
                    rows=rows, best=best_budget(rows)))
    print(table(res, rows) + "\n")
  print(NOTES)
  if args.cost_table:
    config = _config(sizes[0])
    if args.widen > 1:
      from glance_jax.qwen3_vl.widen import widen_config
      config = widen_config(config, args.widen, args.widen)
    tab = cost_table(s["results"][0], config, args.head_layers)
    pathlib.Path(args.cost_table).write_text(json.dumps(tab, indent=1) + "\n")
    print(f"cost table ({sizes[0]}): t(w) / t_AR = {tab['t_over_ar']} -> {args.cost_table}")
  report = dict(command=command, platform=jax.devices()[0].platform, cpu_cores=os.cpu_count(), taus=taus,
                budgets=list(budgets), repeats=args.repeats, sizes=out, split=s)
  return timing.finish(report, t0, args.json)


if __name__ == "__main__":
  main()
