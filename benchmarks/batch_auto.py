"""Batch 8 vs batch 1 tokens/s on the testbed's held-out prompts, per task (ar, glance-15, glance-auto).

    python benchmarks/batch_auto.py [--rows 8] [--repeats 3] [--max-new-tokens 64] [--json OUT]

Per task, the first `rows` held-out prompts run once as one batch and once as `rows` batch-1 calls;
repeats interleaved (a fresh seeded method order per repeat); compile excluded (one warm-up each). Time is
generate() end to end (prefill + loop + copy back). Reported: tokens/s at batch `rows` over tokens/s
at batch 1 (median over repeats), and whether every batch row equals its batch-1 output. glance-auto
uses the built-in cost table of each call's batch (policies.default_round_cost: batch 1 and batch 8
tables ship; at batch 8 on the testbed it says no width beats AR, so those calls run the AR loop);
--round-cost-batch FILE gives its batch calls another table (`python -m glance_jax.bench.calibrate
--batch B ...`). The widths each glance-auto call used are reported.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import time

if __package__ in (None, ""):
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

METHODS = {"ar": dict(method="ar"), "glance-15": dict(method="glance", budget=15),
           "glance-auto": dict(method="glance", budget=63, auto=True)}


def main(argv=None) -> dict:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--rows", type=int, default=8)
  p.add_argument("--repeats", type=int, default=3)
  p.add_argument("--max-new-tokens", type=int, default=64)
  p.add_argument("--json", dest="json_out")
  p.add_argument("--round-cost-batch", help="cost table for glance-auto's batch calls (default: the built-in one)")
  args = p.parse_args(argv)

  from glance_jax.bench.runner import run_order
  from glance_jax.bench.tasks import load_tasks
  from glance_jax.bench.engine import generate
  from glance_jax.head import Head
  from glance_jax.qwen3_vl.inputs import Processor, prepare_inputs
  from glance_jax.qwen3_vl.target import load_target
  from glance_jax.testbed import paths

  target = load_target(str(paths.TARGET))
  head = Head.load(str(paths.HEAD), target=target)
  proc = Processor.from_pretrained(str(target.path))
  tasks, errors = load_tasks([str(f) for f in paths.task_files()], args.rows)
  if errors:
    raise SystemExit("; ".join(e["message"] for e in errors))
  from glance_jax.decode import policies
  batch_table = policies.read_round_cost(args.round_cost_batch) if args.round_cost_batch else None
  out = {}
  for t in tasks:
    recs = t.records
    batch = prepare_inputs(proc, [r.prompt for r in recs], [list(r.images) for r in recs])
    singles = [prepare_inputs(proc, r.prompt, list(r.images)) for r in recs]

    def run(label, inputs):
      kw = dict(METHODS[label])
      if kw.get("auto") and batch_table is not None and inputs.input_ids.shape[0] > 1:
        kw["round_cost"] = batch_table
      return generate(target, inputs, head=head if kw["method"] == "glance" else None,
                      max_new_tokens=args.max_new_tokens, **kw)

    for label in METHODS:  # compile
      run(label, batch)
      for s in {x.input_ids.shape: x for x in singles}.values():
        run(label, s)
    times = {label: {"b": [], "1": []} for label in METHODS}
    equal, tokens, used = {}, {}, {}
    for r in range(args.repeats):
      for label in run_order(list(METHODS), r):
        t0 = time.perf_counter()
        res_b = run(label, batch)
        times[label]["b"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        res_1 = [run(label, s) for s in singles]
        times[label]["1"].append(time.perf_counter() - t0)
        equal[label] = all(np.array_equal(res_b.tokens[i], res_1[i].tokens[0]) for i in range(len(singles)))
        used[label] = (sorted({int(w) for w in res_b.widths}), sorted({int(w) for x in res_1 for w in x.widths}))
        tokens[label] = (res_b.num_tokens, sum(x.num_tokens for x in res_1))
    entry = {}
    for label in METHODS:
      tb, t1 = statistics.median(times[label]["b"]), statistics.median(times[label]["1"])
      nb, n1 = tokens[label]
      entry[label] = {"tok_s_batch": nb / tb, "tok_s_1": n1 / t1, "ratio": (nb / tb) / (n1 / t1),
                      "rows_equal_batch1": equal[label], "widths_batch": used[label][0],
                      "widths_1": used[label][1]}
    out[t.name] = entry
    print(t.name, json.dumps({k: {kk: round(vv, 3) if isinstance(vv, float) else vv for kk, vv in v.items()}
                              for k, v in entry.items()}), flush=True)
  if args.json_out:
    pathlib.Path(args.json_out).write_text(json.dumps(out, indent=1))
  return out


if __name__ == "__main__":
  main()
