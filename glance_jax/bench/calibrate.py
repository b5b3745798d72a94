"""The round-cost table and the E[A] calibration that glance-auto and ngram choose widths with.

    python -m glance_jax.bench.calibrate --out TABLE.json [--per-task 6] [--reps 2]
        [--heldout 8] [--bench BENCH.json --label glance-63] [--no-cost] [--no-calibration]

1. Cost (`t_over_ar`, `ngram_t_over_ar`): the real decode loop, timed alone (generate's `timings`,
   prefill excluded) with the verify width forced (a cost table that makes one width the only
   choice), per round = loop seconds / rounds, for every glance-auto width and every ngram width,
   glance-auto's in the loop it runs under the base table (its paying widths plus the forced one,
   the tree as wide as the widest of them; --full-tree: every width, a 63-node tree),
   over the testbed's train prompts, against AR's loop; runs interleaved (a fresh random order per prompt
   and repeat), ratio of sums. A round's cost here is what the loop pays: draft, tree, the switch,
   verify, walk, commit and the records, not a sum of separately timed parts.
2. Calibration (`calibration: {predicted, observed}`): glance at the widest budget records, per
   round and width w in its recorded widths (decode.methods.recorded_widths), the factorised E[A] of the top-w tree and the
   accepted length the top-w tree would have had (decode/policies/base.py calibration_record). An isotonic
   (monotone, pool-adjacent-violators) fit of observed on predicted gives the knots the loop maps
   E[A] through (jnp.interp). Fitted on the testbed's *train* split (never the held-out prompts the
   bench evaluates), or on a bench JSON's records (--bench, per_prompt predicted / observed).
   Printed: predicted vs observed per decile of the prediction, raw and calibrated, in-sample and,
   with --heldout N, on N held-out prompts per task.
3. The compiled set (`auto_set`, `auto_sets`): which widths glance-auto compiles. Every non-empty
   subset S of the widths that could pay (policies.paying_widths) is timed in its own loop (the tree
   of max S nodes, each w in S forced in turn: t_S(w)), and the policy is replayed on the
   calibration rounds (glance at the widest budget verifies every recorded width, so the accepted
   length of the top-w tree is known for each w): per round it picks argmax_{w in S}
   (1 + E[A](w)) / t_S(w) with the calibrated E[A], as the loop does at batch 1, and earns
   1 + A(w) tokens for t_S(w) AR steps. The S with the most tokens per AR step is written as
   `auto_set`, its t_S as the `t_over_ar` of its widths. A wider tree lets the policy pick a wide
   width on the rounds that pay for it, but every round of that loop pays for building it; the
   replay weighs the two on measured costs. (Switching widths between rounds costs a little more
   than the forced runs measure; not modelled.) With --no-cost the sets are not timed again: the
   policy is replayed on the new rounds at the base table's stored t_S (its `auto_sets`), so the
   written set always follows the rounds written beside it.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import tempfile
import time

import numpy as np

from glance_jax.bench.auto_set import (REPLAY_KEY, apply_choice, candidate_sets, replay_payload,
                                       round_records, set_key, stored_set_costs, table_width_knots)
from glance_jax.analysis.isotonic import apply, pav


def deciles(pred, obs, knots=(), n_bins: int = 10) -> list[dict]:
  """Per decile of the raw prediction: rounds, mean raw prediction, mean calibrated, mean observed."""
  pred, obs = np.asarray(pred, np.float64), np.asarray(obs, np.float64)
  edges = np.quantile(pred, np.linspace(0, 1, n_bins + 1))
  idx = np.clip(np.searchsorted(edges, pred, side="right") - 1, 0, n_bins - 1)
  cal = apply(knots, pred)
  return [{"n": int(np.sum(idx == i)), "predicted": float(pred[idx == i].mean()),
           "calibrated": float(cal[idx == i].mean()), "observed": float(obs[idx == i].mean())}
          for i in range(n_bins) if np.any(idx == i)]


def decile_markdown(rows_raw: list[dict], title: str) -> str:
  lines = [f"{title}", "", "| decile | rounds | predicted E[A] (raw) | calibrated | observed A |", "|---|---|---|---|---|"]
  lines += [f"| {i + 1} | {r['n']} | {r['predicted']:.2f} | {r['calibrated']:.2f} | {r['observed']:.2f} |"
            for i, r in enumerate(rows_raw)]
  return "\n".join(lines)


def mean_abs_error(pred, obs, knots=()) -> float:
  return float(np.mean(np.abs(apply(knots, pred) - np.asarray(obs, np.float64))))


# --- calibration data ------------------------------------------------------------------------------


def pairs_from_results(results, width: int | None = None) -> tuple[np.ndarray, np.ndarray]:
  """GenerationResults (glance) -> (predicted, observed) over every row, round and recorded width
  where the width was verified (observed >= 0); `width`: that recorded width only."""
  p, o = [], []
  for res in results:
    cols = [res.record_widths.index(width)] if width is not None else slice(None)
    for pr, ob in zip(res.predicted or [], res.observed or []):
      pr, ob = pr[:, cols], ob[:, cols]
      keep = ob >= 0
      p.append(pr[keep])
      o.append(ob[keep])
  if not p:
    return np.zeros(0), np.zeros(0)
  return np.concatenate(p).astype(np.float64), np.concatenate(o).astype(np.float64)


def pairs_from_bench(path: str, label: str) -> tuple[np.ndarray, np.ndarray]:
  """A `decode.py bench` JSON's per-round records of method `label` (per_prompt predicted /
  observed, [rounds][widths]) -> (predicted, observed)."""
  try:
    data = json.loads(pathlib.Path(path).read_text())
  except (OSError, json.JSONDecodeError) as e:
    raise ValueError(f"--bench: cannot read {path} ({e})") from None
  p, o = [], []
  for task, t in data.get("tasks", {}).items():
    m = t.get("methods", {}).get(label)
    if m is None:
      raise ValueError(f"--bench: {path}: task {task!r} has no method {label!r}")
    for pp in m["per_prompt"]:
      if "predicted" not in pp:
        raise ValueError(f"--bench: {path}: tasks.{task}.methods.{label}.per_prompt has no 'predicted' "
                         "records (a bench run before per-round records, or not a glance method)")
      pr, ob = np.asarray(pp["predicted"], np.float64), np.asarray(pp["observed"], np.float64)
      keep = ob >= 0
      p.append(pr[keep])
      o.append(ob[keep])
  if not p:
    raise ValueError(f"--bench: {path}: no rounds of {label!r}")
  return np.concatenate(p), np.concatenate(o)


# --- the real loop, forced widths ------------------------------------------------------------------

FORCE = 1e6  # the cost of every width but the forced one


def forced_table(widths: tuple[int, ...], w: int, method: str, base=None, compiled: tuple[int, ...] = ()):
  """A table under which `method` runs only width w. glance: `base` (a RoundCost) with force = w,
  so the loop compiles `compiled` (default: base's paying widths) plus w and builds the tree it
  really builds (the widest of them): w's cost is timed in the policy's own loop."""
  import dataclasses

  from glance_jax.decode import policies
  if method != "ngram" and base is not None:
    return dataclasses.replace(base, force=w, compiled=tuple(compiled))
  table = {x: (1.0 if x == w else FORCE) for x in widths}
  return policies.RoundCost(table, ngram=table) if method == "ngram" else policies.RoundCost(table)


def measure_costs(target, head, prompts, *, budget: int = 63, reps: int = 2, max_new_tokens: int = 64,
                  base=None, fixed: tuple[int, ...] = (), sets: list[tuple[int, ...]] = (), only_sets: bool = False,
                  log=print) -> dict:
  """t(w) / t_AR of the real loop per forced width (module doc, 1.), interleaved. base: the RoundCost
  whose paying widths fix the tree glance-auto builds (forced_table); None = every width, a 63-node
  tree. fixed: also time plain glance at these budgets (one width, no choice; `fixed_t_over_ar`), what
  auto's flexibility is measured against. sets: compiled sets S to time each w of in S's own loop
  (module doc, 3.; `set_t_over_ar`: {"15,31": {w: t_S(w)}}); only_sets: time AR and the sets only."""
  from glance_jax.bench.runner import run_order
  from glance_jax.decode import policies
  from glance_jax.bench.engine import generate
  depth = head.config.block_size - 1
  configs = [("ar", 0)] + [("set", w, st) for st in sets for w in st]
  if not only_sets:
    configs += [("glance", w) for w in policies.auto_widths(budget)] + \
               [("ngram", w) for w in policies.ngram_widths(depth)] + [("fixed", w) for w in fixed]

  if sets and base is None:
    raise ValueError("timing compiled sets needs a base table")

  def run(p, method, w, compiled=()):
    kw = dict(max_new_tokens=max_new_tokens, stop_tokens=())  # no stop: every run emits max_new tokens
    if method in ("glance", "set"):
      kw.update(head=head, budget=budget, auto=True,
                round_cost=forced_table(policies.auto_widths(budget), w, "glance", base, compiled))
    elif method == "ngram":
      kw.update(budget=depth, round_cost=forced_table(policies.ngram_widths(depth), w, method))
    elif method == "fixed":
      kw.update(head=head, budget=w)
    timings = {}
    res = generate(target, p.inputs, method="glance" if method in ("fixed", "set") else method, timings=timings,
                   **kw)
    if method != "ar" and set(res.widths.tolist()) != {w}:
      raise RuntimeError(f"forced width {w} of {method} ran widths {sorted(set(res.widths.tolist()))}")
    return timings["loop_s"], len(res.widths)

  seen = set()
  for p in prompts:  # compile every config for every shape first
    if p.signature not in seen:
      seen.add(p.signature)
      for c in configs:
        run(p, *c)
  secs = {c: 0.0 for c in configs}
  rounds = {c: 0 for c in configs}
  t0 = time.perf_counter()
  for i, p in enumerate(prompts):
    for r in range(reps):
      for c in run_order(configs, i * reps + r):
        s, n = run(p, *c)
        secs[c] += s
        rounds[c] += n
  per_round = {c: secs[c] / max(rounds[c], 1) for c in configs}
  t_ar = per_round[("ar", 0)]
  log(f"cost: {len(prompts)} prompts x {reps} reps x {len(configs)} configs in {time.perf_counter() - t0:.0f}s; "
      f"AR {1e3 * t_ar:.3f} ms/round")
  return {"t_over_ar": {str(c[1]): per_round[c] / t_ar for c in configs if c[0] == "glance"},
          "ngram_t_over_ar": {str(c[1]): per_round[c] / t_ar for c in configs if c[0] == "ngram"},
          **({"fixed_t_over_ar": {str(w): per_round[("fixed", w)] / t_ar for w in fixed}} if fixed else {}),
          **({"set_t_over_ar": {set_key(st): {str(w): per_round[("set", w, st)] / t_ar for w in st}
                                for st in sets}} if sets else {}),
          "t_ar_ms": 1e3 * t_ar,
          "loop_ms_per_round": {"-".join(map(str, (c[0], c[1]) + ((set_key(c[2]),) if len(c) > 2 else ()))):
                                1e3 * v for c, v in per_round.items()}}


def collect(target, head, prompts, *, budget: int = 63, max_new_tokens: int = 64, results: list | None = None):
  """glance at budget `budget` (every recorded width verified) on each prompt -> (predicted, observed);
  the GenerationResults are appended to `results` when given (per-width fits)."""
  from glance_jax.bench.engine import generate
  res = [generate(target, p.inputs, head=head, method="glance", budget=budget, max_new_tokens=max_new_tokens)
         for p in prompts]
  if results is not None:
    results.extend(res)
  return pairs_from_results(res)


def fit_per_width(results) -> dict:
  """Recorded width -> isotonic knots of observed A(w) on predicted E[A](w), that width's rounds only:
  the top-w tree's extra nodes are less likely than its first ones, so one pooled map over-predicts
  wide trees against narrow ones at equal raw E[A]."""
  out = {}
  for w in results[0].record_widths if results else ():
    p, o = pairs_from_results(results, w)
    if p.size:
      xs, ys = pav(p, o)
      out[str(w)] = {"predicted": list(xs), "observed": list(ys), "rounds": int(p.size)}
  return out


def write_table(path, table: dict) -> None:
  """The table as indented JSON, its 'replay' rounds on one line (some thousand numbers)."""
  rest = {k: v for k, v in table.items() if k != REPLAY_KEY}
  text = json.dumps(rest, indent=1)
  if REPLAY_KEY in table:
    text = text[:-2] + f',\n "{REPLAY_KEY}": ' + json.dumps(table[REPLAY_KEY], separators=(",", ":")) + "\n}"
  pathlib.Path(path).write_text(text + "\n")


# --- command line ----------------------------------------------------------------------------------


def testbed_prompts(split: str, per_task: int, processor, workdir: str, batch: int = 1):
  """`per_task` records of each testbed task as bench Prompts: the shipped held-out files, or train-split
  records the head never saw (the train stream, from index 2 x TRAIN_PER_TASK). batch > 1: each
  task's records in calls of `batch` rows (inputs, signature), per_task a multiple of batch."""
  from glance_jax.bench.runner import prepare_prompts
  from glance_jax.bench.tasks import load_tasks
  from glance_jax.testbed import paths
  if split == "heldout":
    files = [str(f) for f in paths.task_files()]
  else:
    from glance_jax.testbed.build import TRAIN_PER_TASK
    # past the records the head was trained on (the build's first TRAIN_PER_TASK), from the suite the
    # shipped testbed was built with (its train stream excludes held-out scenes itself)
    s = paths.suite()
    files = [s.write_task(t, split, per_task, workdir, start=2 * TRAIN_PER_TASK) for t in s.TASKS]
  tasks, errors = load_tasks(files, per_task)
  if errors:
    raise ValueError("; ".join(e["message"] for e in errors))
  if batch > 1:
    import types

    from glance_jax.bench.runner import signature
    from glance_jax.qwen3_vl.inputs import prepare_inputs
    if per_task % batch:
      raise ValueError(f"--per-task {per_task} is not a multiple of --batch {batch}")
    calls = []
    for t in tasks:
      for i in range(0, len(t.records), batch):
        recs = t.records[i: i + batch]
        inputs = prepare_inputs(processor, [r.prompt for r in recs], [list(r.images) for r in recs])
        calls.append(types.SimpleNamespace(inputs=inputs, signature=signature(inputs)))
    return calls
  prompts, problems = prepare_prompts(processor, tasks)
  if problems:
    raise ValueError("; ".join(e["message"] for e in problems))
  return [p for ps in prompts.values() for p in ps]


def parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(prog="python -m glance_jax.bench.calibrate", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--out", required=True, help="cost table JSON to write (schema glance-round-cost/1)")
  p.add_argument("--base", help="start from this table (default: the built-in one)")
  p.add_argument("--per-task", type=int, default=6, help="testbed train prompts per task")
  p.add_argument("--batch", type=int, default=1, help="rows per call: the cost table and the compiled set for "
                 "this batch size (table meta 'batch'; glance-auto picks one width per round for all rows)")
  p.add_argument("--max-new-tokens", type=int, default=64, help="tokens per calibration call (glance at the "
                 "widest budget; its rounds are the calibration and the replay)")
  p.add_argument("--reps", type=int, default=2, help="timed repeats per prompt and width (cost)")
  p.add_argument("--heldout", type=int, default=0, help="also report the calibration on N held-out prompts per task")
  p.add_argument("--bench", help="fit the calibration on this bench JSON's records instead of a train run")
  p.add_argument("--label", default="glance-63", help="the bench method whose records to fit (--bench)")
  p.add_argument("--no-cost", action="store_true", help="keep the base table's costs (its compiled set is "
                 "chosen again on the new calibration rounds at its stored set costs)")
  p.add_argument("--fixed", type=lambda t: [int(x) for x in t.split(",")], default=[],
                 help="also time plain glance at these comma-separated budgets (table key fixed_t_over_ar)")
  p.add_argument("--full-tree", action="store_true", help="time every width with the 63-node tree built "
                 "(default: with the tree glance-auto builds under the base table's paying widths)")
  p.add_argument("--no-calibration", action="store_true", help="keep the base table's calibration")
  p.add_argument("--no-auto-set", action="store_true", help="do not time and replay the compiled sets "
                 "(glance-auto then compiles the widths that could pay; module doc, 3.)")
  p.add_argument("--markdown", help="write the decile tables here")
  return p


def main(argv=None) -> dict:
  args = parser().parse_args(argv)
  import jax

  from glance_jax.bench.host import cpu_host
  from glance_jax.decode import policies
  from glance_jax.head import Head
  from glance_jax.qwen3_vl.inputs import Processor
  from glance_jax.qwen3_vl.target import load_target
  from glance_jax.testbed import paths

  base = pathlib.Path(args.base) if args.base else policies.DEFAULT_TABLE
  policies.read_round_cost(base)  # checked before any work
  table = json.loads(base.read_text())
  if not paths.available():
    raise ValueError("the testbed (testbed/target, testbed/head) is not present")
  target = load_target(str(paths.TARGET))
  head = Head.load(str(paths.HEAD), target=target)
  processor = Processor.from_pretrained(str(target.path))
  workdir = tempfile.mkdtemp(prefix="glance_calib_")
  need_train = not args.no_cost or (not args.no_calibration and not args.bench)
  train = testbed_prompts("train", args.per_task, processor, workdir, args.batch) if need_train else []
  md = []
  sets = []
  if not args.no_cost:
    base_rc = None if args.full_tree else policies.read_round_cost(base)
    if base_rc is not None and not args.no_calibration and not args.bench and not args.no_auto_set:
      allowed = policies.auto_widths(63)
      sets = candidate_sets(policies.paying_widths({w: base_rc.widths[w] for w in allowed},
                                                     head.config.block_size - 1))
    for k in ("fixed_t_over_ar", "set_t_over_ar", "auto_set", "auto_sets", "auto_plain_ar"):
      table.pop(k, None)
    table.update(measure_costs(target, head, train, reps=args.reps, base=base_rc, fixed=tuple(args.fixed),
                               sets=sets))
    t = target.config.text
    table.setdefault("meta", {}).update(
        backend=jax.default_backend(), device=str(jax.devices()[0].device_kind), hidden_size=t.hidden_size,
        num_layers=t.num_hidden_layers, vocab_size=t.vocab_size, block_size=head.config.block_size, batch=args.batch,
        source="python -m glance_jax.bench.calibrate (real loop, forced widths, testbed train prompts)",
        **({"host": cpu_host()} if jax.default_backend() == "cpu" else {}))
    table.pop("whole_round_ms", None)
  if not args.no_calibration:
    results = []
    pred, obs = pairs_from_bench(args.bench, args.label) if args.bench else collect(
        target, head, train, max_new_tokens=args.max_new_tokens, results=results)
    # the rounds themselves, for a table timed on another device to replay (bench/device_cost.py)
    table.pop(REPLAY_KEY, None)
    if results:
      table[REPLAY_KEY] = replay_payload(*round_records(results))
    knots = pav(pred, obs)
    table["calibration"] = {"predicted": list(knots[0]), "observed": list(knots[1]),
                            "source": f"bench {args.bench} {args.label}" if args.bench else
                            f"testbed train split, {args.per_task} prompts per task, glance-63",
                            "rounds": int(pred.size)}
    if results:
      table["calibration"]["per_width"] = fit_per_width(results)
    src = "bench records" if args.bench else "train split"
    md.append(decile_markdown(deciles(pred, obs, knots), f"Fit ({src}, in-sample, {pred.size} round-widths): "
                              f"mean |E[A] - A| raw {mean_abs_error(pred, obs):.2f}, calibrated "
                              f"{mean_abs_error(pred, obs, knots):.2f}"))
    if args.heldout:
      held = []
      hp, ho = collect(target, head, testbed_prompts("heldout", args.heldout, processor, workdir, args.batch),
                       max_new_tokens=args.max_new_tokens, results=held)
      md.append(decile_markdown(deciles(hp, ho, knots), f"Held-out ({args.heldout} prompts per task, "
                                f"{hp.size} round-widths): mean |E[A] - A| raw {mean_abs_error(hp, ho):.2f}, "
                                f"calibrated {mean_abs_error(hp, ho, knots):.2f}"))
      for w, kw in table["calibration"].get("per_width", {}).items():
        wp, wo = pairs_from_results(held, int(w))
        kn = (tuple(kw["predicted"]), tuple(kw["observed"]))
        md.append(f"Held-out, width {w} ({wp.size} rounds): mean |E[A] - A| raw {mean_abs_error(wp, wo):.2f}, "
                  f"pooled map {mean_abs_error(wp, wo, knots):.2f}, width-{w} map {mean_abs_error(wp, wo, kn):.2f}; "
                  f"mean A {wo.mean():.2f}, pooled {apply(knots, wp).mean():.2f}, width-{w} {apply(kn, wp).mean():.2f}")
  # the compiled set: from the sets timed now, or, where only the calibration is refitted (--no-cost),
  # chosen again on the new rounds at the base table's stored set costs, so a table's auto_set always
  # follows the rounds written beside it (a refit that kept its base's set once shipped [15], chosen
  # on an earlier head's rounds, where the new head's own rounds said AR: docs/rounds.md)
  set_costs = table.pop("set_t_over_ar", None) if sets else (
      stored_set_costs(table) if args.no_cost and not args.no_auto_set else None)
  if set_costs and results:
    rounds_pred, rounds_obs, rw = round_records(results)
    rows = apply_choice(table, set_costs, rounds_pred, rounds_obs, rw, table_width_knots(table, rw))
    md.append("Compiled sets, the policy replayed on the calibration rounds (tokens per AR step, best "
              f"first; batch {args.batch}):\n\n| auto_set | t_S(w) / t_AR | tokens / round | tokens / AR step | "
              "x AR (per row) | share of rounds |\n|---|---|---|---|---|---|\n" + "\n".join(
                  f"| {r['auto_set']} | {', '.join(f'{w}: {t:.2f}' for w, t in r['t_over_ar'].items())} | "
                  f"{r['tokens_per_round']:.2f} | {r['tokens_per_ar_step']:.3f} | {r['vs_ar']:.2f} | "
                  f"{', '.join(f'{w}: {x:.2f}' for w, x in r['share'].items())} |" for r in rows) +
              ("\n\nNo set beats AR at this batch: `auto_plain_ar` (glance-auto runs the AR loop)."
               if table["auto_plain_ar"] else ""))
  write_table(args.out, table)
  policies.read_round_cost(args.out)  # what we wrote reads back
  text = "\n\n".join(md)
  print(json.dumps({k: table[k] for k in ("t_over_ar", "ngram_t_over_ar", "fixed_t_over_ar", "loop_ms_per_round")
                    if k in table}, indent=1))
  print(text)
  if args.markdown:
    pathlib.Path(args.markdown).write_text(text + "\n")
  return table


if __name__ == "__main__":
  try:
    main()
  except ValueError as e:
    print(f"calibrate: {e}", file=sys.stderr)
    sys.exit(2)
