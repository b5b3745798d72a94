"""Replayed acceptance at a memory-bound size: the testbed bench's per-round accepted lengths, replayed
through the real decode loop of a random `medium` (221M) target, timed against AR in one run.

    python benchmarks/replay.py [--bench testbed/results/bench.json] [--methods chain,glance-15,...]
        [--prompts 2] [--max-new-tokens 64] [--repeats 2] [--round-cost FILE] [--json OUT] [--markdown OUT]

Per task of the bench JSON and per replayed method (chain, glance-N, glance-auto: the labels it
holds), each replayed prompt runs the recorded rounds of the task's prompts in order (prompt k's
first, spilling into the next, until --max-new-tokens tokens; glance_jax/bench/replay.py), each round
accepting exactly its recorded length through an oracle drafter, at the recorded verify width
(glance-auto: the width recorded for each round). Checked on every timed run: tokens == AR's and
accepted lengths (and auto's widths) == the recorded ones. Prompts: random text around one 64x96
image, --context tokens (round_cost.py's prompt), one per (task, k); no stop token.

Timing: for each prompt and repeat, AR and every method once, in a fresh seeded order (as decode.py bench);
a prompt's time is its mean over repeats; speedup = sum of AR's times / sum of the method's
(every run emits the same tokens). End to end = prefill + loop + copy back; loop = the decode loop
alone. Predicted (round_cost's model): tokens / sum over rounds of t(w) / t_AR with t from a cost
table measured at this size (`benchmarks/round_cost.py --sizes medium --budgets 15,31,47,63
--cost-table FILE`); it is a decode-loop figure (no prefill), so compare it with the loop column.
"""

from __future__ import annotations

import argparse
import math
import os
import pathlib
import shlex
import sys
import time

if __package__ in (None, ""):  # run as `python benchmarks/replay.py`
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from glance_jax.bench import replay, timing  # noqa: E402
from glance_jax.bench.runner import run_order  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_BENCH = ROOT / "testbed" / "results" / "bench.json"
DEFAULT_COST = ROOT / "glance_jax" / "bench" / "round_cost_medium.json"
DEFAULT_METHODS = "chain,glance-15,glance-31,glance-63,glance-auto"
REGIME = "medium random target, replayed acceptance, CPU, shared machine"


def predicted(acc: np.ndarray, wid: np.ndarray, cost: dict[int, float]) -> float | None:
  """round_cost's speedup: tokens / sum of the rounds' costs in AR steps (the widths' t(w) / t_AR)."""
  if any(int(w) not in cost for w in wid):
    return None
  return float(np.sum(acc + 1) / sum(cost[int(w)] for w in wid))


def _mean_times(runs: list[list[float]]) -> np.ndarray:
  return np.asarray([np.mean(r) for r in runs])


def summarise(task_runs: dict, specs: list, cost: dict[int, float] | None) -> dict:
  """task -> label -> stats (see the module doc)."""
  out = {}
  for task, by in task_runs.items():
    ar_e2e, ar_loop = _mean_times(by["ar"]["e2e"]), _mean_times(by["ar"]["loop"])
    rows = {}
    for s in specs:
      r = by[s.label]
      e2e, lp = _mean_times(r["e2e"]), _mean_times(r["loop"])
      acc, wid = np.concatenate(r["accepted"]), np.concatenate(r["widths"])
      rows[s.label] = dict(
          method=s.method, budget=s.budget, auto=s.auto, n_prompts=len(e2e), rounds=int(len(acc)),
          mean_accepted=float(np.mean(acc)) if len(acc) else 0.0, tau=float(np.mean(acc + 1)) if len(acc) else 1.0,
          recorded_tau=r.get("recorded_tau"), ms_per_token=1e3 * float(np.sum(e2e)) / r["tokens"],
          speedup=float(np.sum(ar_e2e) / np.sum(e2e)), speedup_loop=float(np.sum(ar_loop) / np.sum(lp)),
          per_prompt_speedup=[float(x) for x in ar_e2e / e2e],
          widths={str(w): int(n) for w, n in zip(*np.unique(wid, return_counts=True))},
          predicted_speedup=predicted(acc, wid, cost) if cost and s.method != "ar" else None,
          checked_runs=r["checked"])
    out[task] = rows
  return out


def geomeans(stats: dict, labels: list[str]) -> dict:
  return {lb: float(math.exp(np.mean([math.log(stats[t][lb]["speedup"]) for t in stats if lb in stats[t]])))
          for lb in labels if any(lb in stats[t] for t in stats)}


def markdown(stats: dict, header: str) -> str:
  lines = [header, "", "| task | method | widths (rounds) | rounds | mean a | tau (recorded) | ms/token "
           "| speedup vs AR, end to end | per prompt | speedup, loop only | predicted (round_cost) |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
  for task, rows in stats.items():
    for lb, r in rows.items():
      if lb == "ar":
        lines.append(f"| {task} | ar | 0 | - | 0 | 1.00 | {r['ms_per_token']:.1f} (loop {r['loop_ms_per_token']:.1f}; "
                     f"prefill {100 * r['prefill_share']:.0f}% of AR's time) | 1.00x | - | 1.00x | - |")
        continue
      pred = f"{r['predicted_speedup']:.2f}x" if r["predicted_speedup"] else "-"
      rec = f" ({r['recorded_tau']:.2f})" if r["recorded_tau"] else ""
      widths = ", ".join(f"{w}: {n}" for w, n in r["widths"].items())
      pp = " / ".join(f"{x:.2f}" for x in r["per_prompt_speedup"])
      lines.append(f"| {task} | {lb} | {widths} | {r['rounds']} | {r['mean_accepted']:.2f} | {r['tau']:.2f}{rec} "
                   f"| {r['ms_per_token']:.1f} | **{r['speedup']:.2f}x** | {pp} | {r['speedup_loop']:.2f}x | {pred} |")
  return "\n".join(lines)


def main(argv=None) -> dict:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--bench", default=str(DEFAULT_BENCH), help="decode.py bench JSON with per-round records")
  ap.add_argument("--methods", default=DEFAULT_METHODS, help="bench labels to replay (chain, glance-N, glance-auto)")
  ap.add_argument("--tasks", default="", help="comma-separated tasks (default: every task of the bench)")
  ap.add_argument("--size", default="medium", help="random target size of benchmarks/round_cost.py")
  ap.add_argument("--head-layers", type=int, default=2)
  ap.add_argument("--prompts", type=int, default=2, help="replayed prompts per task")
  ap.add_argument("--context", type=int, default=300, help="prompt tokens (one 64x96 image = 6 of them)")
  ap.add_argument("--max-new-tokens", type=int, default=64)
  ap.add_argument("--repeats", type=int, default=2)
  ap.add_argument("--round-cost", default=str(DEFAULT_COST), help="round_cost.py --cost-table JSON at this size "
                  "(for the predicted column; 'none' to skip)")
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--json", default=None)
  ap.add_argument("--markdown", default=None)
  args = ap.parse_args(argv)
  labels = [s.strip() for s in args.methods.split(",") if s.strip()]
  try:
    records = replay.read_records(args.bench, labels)
  except ValueError as e:
    ap.error(f"--bench: {e}")
  if args.tasks:
    want = [t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = [t for t in want if t not in records]
    if unknown:
      ap.error(f"--tasks: {unknown} not in {args.bench} (has {sorted(records)})")
    records = {t: records[t] for t in want}
  if args.prompts < 1 or args.repeats < 1 or args.max_new_tokens < 2:
    ap.error("--prompts and --repeats must be >= 1, --max-new-tokens >= 2")
  from benchmarks.round_cost import _config
  from glance_jax.bench.random_models import long_prompt, make_head, make_target
  from glance_jax.decode import policies
  cfg = _config(args.size)
  cost, cost_meta, warnings = None, None, []
  if args.round_cost != "none":
    try:
      rc = policies.read_round_cost(args.round_cost)
    except ValueError as e:
      ap.error(str(e))
    warnings = rc.check_matches({"size": args.size, "hidden_size": cfg.text.hidden_size,
                                 "num_layers": cfg.text.num_hidden_layers, "head_layers": args.head_layers})
    cost, cost_meta = rc.widths, rc.meta
  import jax
  command = timing.command_line(argv, "benchmarks/replay.py")
  print("$ " + shlex.join(command))
  print(f"jax {jax.__version__} on {jax.devices()[0].platform} ({os.cpu_count()} CPU cores); regime: {REGIME}")
  for w in warnings:
    print("warning: " + w)
  t0 = time.perf_counter()
  target = make_target(cfg, args.seed)
  head = make_head(target, args.seed, args.head_layers)
  depth, m_new, vocab = head.config.block_size - 1, args.max_new_tokens, cfg.text.vocab_size
  present = [lb for lb in labels if any(lb in r for r in records.values())]
  kinds = {lb: next(r[lb] for r in records.values() if lb in r) for lb in present}
  specs = [replay.Spec("ar", "ar", 1)] + [replay.Spec(lb, k.method, k.budget, k.auto) for lb, k in kinds.items()]
  cost_for = lambda s: tuple(cost.get(w, 1.0) for w in policies.auto_widths(s.budget)) if cost else ()  # noqa: E731
  cfgs = {s.label: replay.loop_config(target, head, s, m_new, cost_for(s)) for s in specs}
  max_length = max(c.slots_needed(args.context) for c in cfgs.values()) + depth + 1
  ref_cfg = replay.loop_config(target, head, specs[0], m_new + depth + 1)
  tasks = list(records)
  prompts = {(t, k): replay.prepare(target, long_prompt(cfg, args.context, seed=args.seed + 1000 * i + k))
             for i, t in enumerate(tasks) for k in range(args.prompts)}
  refs, plans = {}, {}
  for key, p in prompts.items():  # AR's continuation, L + 1 tokens past the end, and every schedule
    refs[key] = replay.run(target, head, p, ref_cfg, max_length)[2]
    for s in specs[1:]:
      if s.label in records[key[0]]:
        acc, wid = replay.schedule(records[key[0]][s.label], key[1], m_new)
        plans[key + (s.label,)] = (acc, wid, replay.oracle_tokens(refs[key], acc, vocab, depth))
  print(f"[replay] target {args.size}, {len(prompts)} prompts, references in {time.perf_counter() - t0:.0f}s", flush=True)

  def one(key, s):
    p = prompts[key]
    if s.method == "ar":
      dt, lp, tokens, acc, wid = replay.run(target, head, p, cfgs["ar"], max_length)
      replay.check("ar", tokens, acc, wid, refs[key][:m_new], np.zeros(m_new - 1, np.int64))
      return dt, lp, acc, wid
    want_a, want_w, orc = plans[key + (s.label,)]
    dt, lp, tokens, acc, wid = replay.run(target, head, p, cfgs[s.label], max_length, orc,
                                          want_w if s.auto else None)
    replay.check(f"{key[0]} prompt {key[1]} {s.label}", tokens, acc, wid, refs[key][:m_new], want_a,
                 want_w if s.auto else None)
    return dt, lp, acc, wid

  first = (tasks[0], 0)
  for s in specs:  # compile (one loop per spec; every prompt has the same shapes)
    one(first, s)
  print(f"[replay] compiled {len(specs)} loops in {time.perf_counter() - t0:.0f}s", flush=True)
  runs = {}
  for t in tasks:
    active = [s for s in specs if s.method == "ar" or s.label in records[t]]
    by = {s.label: dict(e2e=[], loop=[], accepted=[], widths=[], tokens=args.prompts * m_new, checked=0,
                        recorded_tau=records[t][s.label].tau if s.label in records[t] else None) for s in active}
    for k in range(args.prompts):
      cur = {s.label: ([], []) for s in active}
      for r in range(args.repeats):
        for s in run_order(active, k * args.repeats + r):
          dt, lp, acc, wid = one((t, k), s)
          cur[s.label][0].append(dt)
          cur[s.label][1].append(lp)
          by[s.label]["checked"] += 1
          if r == 0:
            by[s.label]["accepted"].append(acc)
            by[s.label]["widths"].append(wid)
      for lb, (e, lp) in cur.items():
        by[lb]["e2e"].append(e)
        by[lb]["loop"].append(lp)
    runs[t] = by
    print(f"[replay] {t} done ({time.perf_counter() - t0:.0f}s)", flush=True)
  stats = summarise(runs, [s for s in specs[1:]], cost)
  for t, by in runs.items():  # AR's own figures, for the prefill's share of the end-to-end time
    e2e, lp = _mean_times(by["ar"]["e2e"]), _mean_times(by["ar"]["loop"])
    stats[t]["ar"] = dict(method="ar", ms_per_token=1e3 * float(np.sum(e2e)) / by["ar"]["tokens"],
                          loop_ms_per_token=1e3 * float(np.sum(lp)) / by["ar"]["tokens"],
                          prefill_share=float(1 - np.sum(lp) / np.sum(e2e)), checked_runs=by["ar"]["checked"])
  gm = geomeans(stats, [s.label for s in specs[1:]])
  header = (f"Replayed acceptance ({REGIME}): {args.size} target, {args.prompts} prompt(s) per task x "
            f"{m_new} new tokens, {args.repeats} interleaved repeats; every run checked: tokens == AR, "
            "accepted lengths (auto: widths) == recorded")
  md = markdown(stats, header)
  md += "\n\ngeometric mean over tasks (end to end): " + ", ".join(f"{lb} {v:.2f}x" for lb, v in gm.items())
  best = {t: max((lb for lb in rows if lb != "ar"), key=lambda lb: rows[lb]["speedup"]) for t, rows in stats.items()}
  md += "\n\nbest per task: " + ", ".join(f"{t} {lb} {stats[t][lb]['speedup']:.2f}x" for t, lb in best.items())
  print("\n" + md)
  if args.markdown:
    pathlib.Path(args.markdown).write_text(md + "\n")
  report = dict(command=command, regime=REGIME, label="replayed acceptance", bench=str(args.bench), size=args.size,
                params_m=sum(int(np.prod(x.shape)) for x in jax.tree.leaves(target.params)) / 1e6,
                prompts=args.prompts, context=args.context, max_new_tokens=m_new, repeats=args.repeats,
                round_cost=args.round_cost, round_cost_meta=cost_meta, round_cost_warnings=warnings,
                platform=jax.devices()[0].platform, cpu_cores=os.cpu_count(), tasks=stats, geomean=gm, best=best)
  return timing.finish(report, t0, args.json)


if __name__ == "__main__":
  main()
