"""`python decode.py bench TASKFILE [TASKFILE ...]`: time ar / ngram / chain / glance-N on task files
in one process (interleaved, see bench/runner.py), check every method emits AR's tokens, and report
speedups with paired bootstrap intervals, the entropy law per task, a markdown table, JSON and plots.

Bad input never stops the other tasks: a missing, empty or unreadable task file and every skipped row
are one line on stderr and an entry of the report's `errors`; the exit status is non-zero only when
no task could run (or for a bad flag, before anything runs).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import tempfile
import time
from typing import Any

from glance_jax.bench import report as rep
from glance_jax.bench import report_markdown
from glance_jax.bench.runner import PAD_MULTIPLE, Method, ablated, method_choices, parse_methods

DEFAULT_METHODS = "ar,ngram,chain,glance"
DEFAULT_BUDGETS = "15,31,47,63,auto"


def default_bench_inputs(model: str | None, head: str | None, task_files: list[str]
                         ) -> tuple[str, str | None, list[str]]:
  """(model, head, task files) with what the command line left out filled in: the shipped CPU
  testbed (its target, head and held-out task files) when present; else the embedded tiny random
  checkpoint (head None = a random 2-layer head) and the synthetic val task file written to a new
  temp dir. The one place that chooses the defaults."""
  from glance_jax.testbed import paths as testbed
  if not model and testbed.available():
    return str(testbed.TARGET), head or str(testbed.HEAD), list(task_files) or [str(f) for f in testbed.task_files()]
  if not model:
    model = _tiny_checkpoint()
  if not task_files:
    from glance_jax.data import export_task_file
    workdir = tempfile.mkdtemp(prefix="glance_bench_")
    path = os.path.join(workdir, "synthetic_val.jsonl")
    export_task_file("synthetic", workdir, "val", path)
    task_files = [path]
  return model, head, list(task_files)


@functools.cache
def _tiny_checkpoint() -> str:
  """Written once per process (it takes seconds): later runs in the same process reuse it."""
  from glance_jax import demo
  return str(demo.default_checkpoint())


def _methods(text: str) -> str:
  try:
    parse_methods(text, [1])
  except ValueError as e:
    raise argparse.ArgumentTypeError(str(e)) from None
  return text


def _budgets(text: str) -> list[int | str]:
  """'15,63,auto' -> [15, 63, 'auto'] (auto = glance-auto, the width chosen per round)."""
  parts = [x.strip() for x in text.split(",") if x.strip()]
  try:
    out = [x if x == "auto" else int(x) for x in parts]
  except ValueError:
    raise argparse.ArgumentTypeError(f"expected comma-separated integers or 'auto', got {text!r}") from None
  if not out or min([x for x in out if x != "auto"] or [1]) < 1:
    raise argparse.ArgumentTypeError(f"budgets must be integers >= 1 or 'auto', got {text!r}")
  return out


def parser() -> argparse.ArgumentParser:
  from glance_jax.config import DTYPES
  from glance_jax.head import ABLATIONS
  p = argparse.ArgumentParser(prog="decode.py bench", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("task_files", nargs="*", metavar="TASKFILE",
                 help="JSONL task file, one per task (default: the testbed's held-out tasks)")
  p.add_argument("--model", help="HF Qwen3-VL checkpoint directory or hub id (default: the testbed target)")
  p.add_argument("--head", help="DFlash-format head directory (default with no --model: the testbed head)")
  p.add_argument("--eagle3-head", help="EAGLE-3 head directory (midlayer format) for --methods eagle3, eagle3-chain")
  p.add_argument("--draft", help="draft model directory (a smaller Qwen3-VL, the target's tokenizer) for --methods "
                 "two-model")
  p.add_argument("--methods", type=_methods, default=DEFAULT_METHODS,
                 help=f"comma-separated, from {method_choices()}; glance runs at every --budgets "
                      f"value; ar is always run (the base) (default {DEFAULT_METHODS})")
  p.add_argument("--budgets", type=_budgets, default=_budgets(DEFAULT_BUDGETS),
                 help=f"glance tree budgets N; auto = glance-auto, the verify width chosen per round from "
                      f"the tree's scores and --round-cost (default {DEFAULT_BUDGETS})")
  p.add_argument("--round-cost", help="round-cost table JSON for glance-auto (benchmarks/round_cost.py "
                                      "--cost-table; default: the built-in testbed table), or 'device': "
                                      "measured on this machine at first use and cached (bench/device_cost.py)")
  p.add_argument("--regime", choices=("compute", "memory"), default=None,
                 help="the shipped testbed's cost regime (glance_jax/testbed/regimes.py): compute = the "
                      "trained pair as it is, memory = widened x8 at load (every logit and draft "
                      "unchanged; a memory-bound AR step); default: regimes.DEFAULT; testbed only")
  p.add_argument("--max-new-tokens", type=int, default=None,
                 help="default: the shipped testbed suite's ANSWER_TOKENS (every answer runs to its end) "
                      "on the testbed, else 64")
  p.add_argument("--limit", type=int, default=None, help="first N prompts of each task")
  p.add_argument("--repeats", type=int, default=3, help="timed runs per prompt and method")
  p.add_argument("--cold", action="store_true", help="time each call right after another method's (per "
                 "prompt and repeat, every method once in a fresh order) instead of hot: one untimed call, "
                 "then the repeats back to back (bench/runner.py time_task)")
  p.add_argument("--seed", type=int, default=0, help="random head, sampling key and bootstrap seed")
  p.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
  p.add_argument("--pad-multiple", type=int, default=PAD_MULTIPLE,
                 help="right-pad prompts to a multiple of this many tokens (fewer compiles; 1 = off)")
  p.add_argument("--ablate", choices=ABLATIONS, default=None,
                 help="also run the primary head method (glance at the largest fixed budget, else "
                      "glance-auto, else chain) with the head ablated, as its own method: zero-context = "
                      "the target features the head reads zeroed (label e.g. glance-63[zero-context]); "
                      "other methods can be named in --methods as METHOD[zero-context]")
  p.add_argument("--draft-vocab", type=int, default=None, metavar="K",
                 help="also run the primary head method drafting over the K most frequent tokens of the "
                      "head's training rows (token_counts.npz beside --head), label e.g. glance-63[vocab-K]; "
                      "the report gives its coverage of the training rows and of AR's tokens in this run")
  p.add_argument("--image-test", action="store_true",
                 help="also run glance_jax.bench.image_swap.run_image_swap per task")
  p.add_argument("--json", dest="json_out", help="write the report (schema: docs/benchmarking.md) here")
  p.add_argument("--markdown", dest="markdown_out", help="write the markdown tables here")
  p.add_argument("--plots", dest="plots_dir", help="write deciles / cap-vs-floor / speedup PNGs here")
  return p


def _rival_drafts(args, target, methods, regime):
  """The rivals' drafters (runner.Drafts without the block head), loaded for `target` and, in a
  widened testbed regime, widened with it (the draft model by the same transformation here; an
  EAGLE-3 head once the target is widened, by regimes.widen_eagle3). A rival without its flag, or a
  flag without its rival, is an error."""
  from glance_jax.bench import runner
  from glance_jax.config import DTYPES
  rivals = {m.method for m in methods if m.method in runner.RIVALS}
  for flag, value, users in (("--eagle3-head", args.eagle3_head, {"eagle3", "eagle3-chain"}),
                             ("--draft", args.draft, {"two-model"})):
    if value and not rivals & users:
      raise ValueError(f"{flag} is for --methods {' / '.join(sorted(users))}, which --methods does not name")
  e3 = draft = None
  if args.eagle3_head and rivals & {"eagle3", "eagle3-chain"}:
    from glance_jax.eagle3 import load_eagle3
    e3 = load_eagle3(args.eagle3_head, target.config, dtype=target.dtype)
  if args.draft and "two-model" in rivals:
    from glance_jax.qwen3_vl.target import load_target
    draft = load_target(args.draft, dtype=DTYPES[args.dtype])
    if regime:
      from glance_jax.testbed import regimes
      draft, _ = regimes.widen_pair(draft, None, regime)
  missing = runner.Drafts(eagle3=e3, draft=draft).missing(methods)
  if missing:
    raise ValueError(f"--methods {', '.join(sorted(rivals))} need {' and '.join(missing)}")
  return runner.Drafts(eagle3=e3, draft=draft)


def with_ablation(methods: list[Method], kind: str | None) -> list[Method]:
  """methods plus, for --ablate KIND, the primary head method (report.primary_method) ablated."""
  if kind is None:
    return methods
  base = rep.primary_method(methods)
  if base is None:
    raise ValueError(f"--ablate / --draft-vocab ({kind}) needs a head method (chain or glance) in --methods")
  extra = ablated(next(m for m in methods if m.label == base), kind)
  return methods + [extra] if extra not in methods else methods


def with_variants(methods: list[Method], args) -> list[Method]:
  """methods plus the primary head method under --ablate and under --draft-vocab K (vocab-K)."""
  methods = with_ablation(methods, args.ablate)
  if args.draft_vocab is not None:
    if args.draft_vocab < 1:
      raise ValueError(f"--draft-vocab must be >= 1, got {args.draft_vocab}")
    methods = with_ablation(methods, f"vocab-{args.draft_vocab}")
  return methods


def _vocab_coverage(drafts, methods: list[Method], runs, target) -> dict | None:
  """For the --draft-vocab arm: its size, its coverage of the head's training rows, and of the
  tokens AR emitted on this task's prompts (what its tau can lose: a target token outside it is
  never drafted); None without one."""
  from glance_jax.bench.runner import draft_vocab_size
  arm = next((m for m in methods if draft_vocab_size(m.ablate)), None)
  if arm is None or drafts.block is None:
    return None
  import numpy as np
  head = drafts.for_method(arm, target)
  ar = np.concatenate([r.tokens for r in runs["ar"]]) if runs.get("ar") else np.zeros(0, np.int64)
  inside = np.isin(ar, np.asarray(head.draft_vocab.ids))
  return {"label": arm.label, "size": head.draft_vocab.size, "train_coverage": head.draft_coverage,
          "ar_coverage": float(inside.mean()) if ar.size else None}


def _say(line: str, progress=None) -> None:
  if progress is not None:
    progress.write(f"decode.py bench: {line}")
  else:
    print(f"decode.py bench: {line}", file=sys.stderr)


def _check_args(args) -> None:
  for flag, value, low in (("--max-new-tokens", args.max_new_tokens, 1), ("--repeats", args.repeats, 1),
                           ("--pad-multiple", args.pad_multiple, 1)):
    if value is not None and value < low:
      raise ValueError(f"{flag} must be >= {low}, got {value}")
  if args.limit is not None and args.limit < 1:
    raise ValueError(f"--limit must be >= 1, got {args.limit}")


def _diagnose_divergences(target, prompts, runs, stats: dict, max_new_tokens: int, cache: dict) -> None:
  """Beside each arm's mismatches, where it left AR and whether that was a float tie of AR's own step
  (bench/audit.divergences): stats[label]["divergences"], ["float_ties"]."""
  from glance_jax.bench.audit import divergences
  inputs = {p.id: p.inputs for p in prompts}
  ar = {p.id: r.tokens for p, r in zip(prompts, runs["ar"])}
  for label, s in stats.items():
    if label == "ar" or not s["mismatches"]:
      continue
    other = {p.id: r.tokens for p, r in zip(prompts, runs[label]) if p.id in s["mismatch_ids"]}
    s["divergences"] = divergences(target, inputs, ar, other, max_new_tokens=max_new_tokens, cache=cache)
    s["float_ties"] = sum(d["tie"] for d in s["divergences"])


def _image_test(target, head, records, args, budget: int) -> tuple[dict | None, str | None]:
  try:
    from glance_jax.bench.image_swap import run_image_swap  # another module; may be absent
  except ImportError as e:
    return None, f"--image-test: glance_jax.bench.image_swap is not available ({e})"
  try:
    return run_image_swap(target, head, records, budget=budget, max_new_tokens=args.max_new_tokens,
                          seed=args.seed), None
  except Exception as e:  # the image test is extra: its failure must not lose the timings
    return None, f"--image-test failed: {type(e).__name__}: {e}"


def _round_cost(path: str | None, target, block_size: int):
  """The cost table glance-auto uses: --round-cost FILE or the built-in one; a table measured for
  another target size or device is a warning naming the file and what differs (not fatal: the choice
  of width never changes tokens, only speed)."""
  import jax

  from glance_jax.decode import policies
  rc = policies.read_round_cost(path) if path else policies.default_round_cost()
  t = target.config.text
  expect = {"hidden_size": t.hidden_size, "num_layers": t.num_hidden_layers, "vocab_size": t.vocab_size,
            "backend": jax.default_backend(), "block_size": block_size}
  if expect["backend"] == "cpu":   # a round's cost in AR steps differs from one CPU to another
    from glance_jax.bench.host import cpu_host
    expect["host"] = cpu_host()
  stale = rc.check_matches(expect)
  for line in stale:
    _say(f"warning: {line}")
  if stale and rc.plain_ar:
    _say(f"warning: {rc.path} finds no width that beats AR where it was measured, so glance-auto runs AR's "
         "loop by it here too; --round-cost device times this machine")
  return rc


def run(args) -> dict[str, Any]:
  import jax

  from glance_jax.bench import runner
  from glance_jax.progress import Progress
  from glance_jax.bench.tasks import load_tasks, problem
  from glance_jax.config import DTYPES
  from glance_jax.head import Head
  from glance_jax.qwen3_vl.inputs import Processor
  from glance_jax.qwen3_vl.target import load_target

  t_start = time.perf_counter()
  _check_args(args)
  wanted = with_variants(parse_methods(args.methods, args.budgets), args)
  if args.model and not args.head and any(m.method in ("chain", "glance") for m in wanted):
    raise ValueError("--methods with chain / glance need --head with --model (or use --methods ar,ngram)")
  model, head_path, files = default_bench_inputs(args.model, args.head, args.task_files)
  from glance_jax.testbed import paths as testbed_paths
  from glance_jax.testbed import regimes
  if not args.model and testbed_paths.available():   # the shipped testbed's rivals, where it ships them
    named = {m.method for m in wanted}
    if not args.eagle3_head and named & {"eagle3", "eagle3-chain"}:
      args.eagle3_head = testbed_paths.rival("eagle3")
    if not args.draft and "two-model" in named:
      args.draft = testbed_paths.rival("draft")
  regime = regimes.resolve(args.regime, not args.model and testbed_paths.available())
  if args.max_new_tokens is None:
    args.max_new_tokens = testbed_paths.suite().ANSWER_TOKENS if regime else 64

  target = load_target(model, dtype=DTYPES[args.dtype])
  head = Head.load(head_path, target=target) if head_path else (
      None if args.model else Head.random(target, seed=args.seed, num_layers=2))
  drafts = _rival_drafts(args, target, wanted, regime)
  e3 = drafts.eagle3
  if regime:
    target, head = regimes.widen_pair(target, head, regime)
    e3 = None if e3 is None else regimes.widen_eagle3(e3, regime, target=target)
    _say(f"testbed regime: {regimes.LABEL[regime]}")
  drafts = runner.Drafts(block=head, eagle3=e3, draft=drafts.draft)
  block_size = head.config.block_size if head is not None else 16
  methods = with_variants(parse_methods(args.methods, args.budgets, depth=block_size - 1), args)
  processor = Processor.from_pretrained(str(target.path))

  tasks, errors = load_tasks(files, args.limit)
  for e in errors:
    _say(e["message"])
  prompts, probs = runner.prepare_prompts(processor, tasks, args.pad_multiple)
  for e in probs:
    _say(e["message"])
  errors += probs

  kw = dict(max_new_tokens=args.max_new_tokens, seed=args.seed)
  if any(m.auto for m in methods):
    if args.round_cost == "device":   # measured on this machine at first use, then cached
      from glance_jax.bench.device_cost import device_round_cost
      first = next(p for ps in prompts.values() for p in ps)
      kw["round_cost"] = device_round_cost(target, head, first.inputs, batch=1, log=_say)
      _say(f"glance-auto's round costs: {kw['round_cost'].meta['source']}")
    else:
      kw["round_cost"] = _round_cost(args.round_cost, target, block_size)
  n_sig = runner.num_signatures(prompts)
  total = len(methods) * (n_sig + args.repeats * sum(len(p) for p in prompts.values()))
  progress = Progress(total, desc="compile") if total else None
  t0 = time.perf_counter()
  probs = runner.warm_up(target, drafts, prompts, methods, kw, progress)
  compile_s = time.perf_counter() - t0
  for e in probs:
    _say(e["message"], progress)
  maps = runner.map_headroom_warning()
  if maps:
    _say(f"warning: {maps}", progress)
  errors += probs

  runs_by_task, tasks_out, times_by_task, tie_cache = {}, {}, {}, {}
  for t in tasks:
    ps = prompts[t.name]
    if not ps:
      e = problem(f"{t.file}: no prompt of task {t.name!r} could run", file=t.file, task=t.name, fatal=True)
      _say(e["message"], progress)
      errors.append(e)
      continue
    runs = runner.time_task(target, drafts, ps, methods, kw, repeats=args.repeats, progress=progress,
                            hot=not args.cold)
    ids = [p.id for p in ps]
    runs_by_task[t.name] = runs
    stats = rep.task_stats(runs, methods, ids, seed=args.seed, depth=block_size - 1)
    _diagnose_divergences(target, ps, runs, stats, args.max_new_tokens, tie_cache)
    times_by_task[t.name] = rep.scaled_times(runs)
    tasks_out[t.name] = {"file": t.file, "n_prompts": len(ps), "prompt_ids": ids,
                         "skipped_rows": t.skipped_rows,
                         "methods": stats,
                         "entropy_law": None, "image_test": None,
                         "tree_over_chain": rep.tree_over_chain(runs, methods, seed=args.seed),
                         "glance_vs_rivals": rep.glance_vs_rivals(runs, methods, seed=args.seed),
                         "draft_vocab": _vocab_coverage(drafts, methods, runs, target)}
  if progress is not None:
    progress.close()

  if args.image_test:
    budget = max(m.budget for m in methods if m.method == "glance") if any(
        m.method == "glance" for m in methods) else 63
    for t in tasks:
      if t.name not in tasks_out:
        continue
      _say(f"image test on {t.name} ({len(t.records)} prompts, N = {budget})")
      result, err = _image_test(target, head, t.records, args, budget)
      tasks_out[t.name]["image_test"] = result
      if err:
        errors.append(problem(f"{t.file}: {err}", file=t.file, task=t.name))
        _say(errors[-1]["message"])

  law = rep.entropy_laws(runs_by_task, methods, L=block_size - 1)
  for name, entry in law["by_method"].get(law["method"] or "", {}).items():
    tasks_out[name]["entropy_law"] = entry
  report = {
      "schema": rep.SCHEMA_VERSION,
      "config": {"model": str(model), "head": head_path, "eagle3_head": args.eagle3_head, "draft": args.draft,
                 "task_files": [str(f) for f in files],
                 "methods": [m.label for m in methods],
                 "budgets": [b for b in args.budgets if b != "auto"], "round_cost": args.round_cost,
                 "regime": regime, "max_new_tokens": args.max_new_tokens, "repeats": args.repeats, "limit": args.limit,
                 "seed": args.seed, "dtype": args.dtype, "pad_multiple": args.pad_multiple,
                 "block_size": block_size, "image_test": bool(args.image_test), "ablate": args.ablate,
                 "draft_vocab": args.draft_vocab,
                 "round_cost_source": None if "round_cost" not in kw else (
                     kw["round_cost"].meta["source"] if args.round_cost == "device" else kw["round_cost"].path),
                 "timing": "cold" if args.cold else "hot"},
      "environment": {"jax": jax.__version__, "backend": jax.default_backend(),
                      "device": str(jax.devices()[0].device_kind), "cpu_count": os.cpu_count(),
                      "compiles": n_sig * len(methods), "compile_s": compile_s, "wall_s": 0.0},
      "methods": [{"label": m.label, "method": m.method, "budget": m.budget, "auto": m.auto, "ablate": m.ablate}
                  for m in methods],
      "tasks": tasks_out,
      "geomean": rep.geomean_speedups(times_by_task, methods, seed=args.seed),
      "entropy_law": law,
      "errors": errors,
      "plots": [],
  }
  report = rep.json_safe(report)
  if args.plots_dir and tasks_out:
    from glance_jax.bench.report_plots import write_plots
    report["plots"] = write_plots(report, args.plots_dir)
  report["environment"]["wall_s"] = time.perf_counter() - t_start
  table = report_markdown.markdown(report) if tasks_out else ""
  print(table, end="")
  if args.markdown_out and tasks_out:
    with open(args.markdown_out, "w") as f:
      f.write(table)
  if args.json_out:
    with open(args.json_out, "w") as f:
      json.dump(report, f, indent=1, allow_nan=False)
  if not tasks_out:
    raise ValueError("no task could run (see the errors above)")
  return report


def main(argv=None) -> dict[str, Any]:
  return run(parser().parse_args(argv))
