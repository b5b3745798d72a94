"""`python decode.py`: decode one prompt (with images) with ar / ngram / chain / glance and print the
text and a one-line summary (new tokens, rounds, tau, ms/token, tokens/s).

With no arguments at all it runs the shipped CPU testbed's demo (glance_jax/testbed/demo.py): a few
grounded and open held-out prompts decoded with AR and GLANCE, in the testbed's default regime, memory
(the pair widened to a memory-bound size at load; `--regime compute` alone: the same demo with the
pair as trained). Without --model, a single-prompt run uses the testbed's target and head (and a
held-out table image and question unless --image / --prompt are given), in that regime or --regime;
if the testbed is absent, a tiny random checkpoint and a random head."""

from __future__ import annotations

import argparse
import json
import sys
import time

from glance_jax.config import DTYPES
from glance_jax.decode.methods import METHODS


def parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(prog="decode.py", description=__doc__)
  p.add_argument("--model", help="HF Qwen3-VL checkpoint directory or hub repo id (default: embedded tiny model)")
  p.add_argument("--head", help="DFlash-format head directory (default with no --model: a random head)")
  p.add_argument("--draft", help="the draft model of --method two-model: a smaller Qwen3-VL checkpoint directory "
                 "(same tokenizer and image geometry as the target)")
  p.add_argument("--draft-vocab", type=int, default=None, metavar="K",
                 help="chain / glance: the head drafts over the K most frequent tokens of its training rows "
                      "(token_counts.npz beside --head; head/draft_vocab.py), not the whole vocabulary")
  p.add_argument("--scores", choices=("marginals", "calibrated", "parent"), default="marginals",
                 help="glance: rank tree prefixes by the product of the head's marginals, by calibrated "
                      "node scores (tree_calibration.json beside --head; python -m glance_jax.bench.tree_calibration), "
                      "or expand each node's own children under its parent correction (parent_correction.json "
                      "beside --head; train.py with drafter=parent)")
  p.add_argument("--image", action="append", default=[], help="image path (repeatable, in prompt order)")
  p.add_argument("--prompt", default=None, help="user prompt text")
  p.add_argument("--method", choices=tuple(METHODS), default="glance")
  p.add_argument("--budget", type=_budget, default=63, help="the most draft tokens a round verifies: tree nodes N "
                 "(glance), draft depth cap (chain, ngram); or auto (glance-auto: the verify width chosen per round "
                 "by the cost table)")
  p.add_argument("--round-cost", help="cost table JSON for --budget auto and ngram (python -m "
                 "glance_jax.bench.calibrate; default: the built-in table for the call's batch), or 'device': "
                 "measured on this machine at first use and cached (glance_jax/bench/device_cost.py)")
  p.add_argument("--max-new-tokens", type=int, default=64)
  p.add_argument("--temperature", type=float, default=0.0)
  p.add_argument("--top-k", type=int, default=0)
  p.add_argument("--top-p", type=float, default=1.0)
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
  p.add_argument("--mesh", default=None, help="data,fsdp,tensor sizes, e.g. 1,1,8 (default: one device)")
  p.add_argument("--regime", choices=("compute", "memory"), default=None,
                 help="the testbed's cost regime (glance_jax/testbed/regimes.py: memory = the pair widened x8 "
                      "at load, a memory-bound AR step, the testbed's default; compute = as trained); alone, "
                      "`decode.py --regime compute` runs the demo in it")
  p.add_argument("--json", dest="json_out", help="write the result as JSON here")
  return p


def _cost_source(rc) -> str:
  """Whose round costs chose the widths: a file, the built-in table, or this device's measurement."""
  if rc is None:
    return "built-in table (the testbed's CPU)"
  return rc.meta.get("source") if str(rc.meta.get("source", "")).startswith("measured on this device") else rc.path


def _budget(text: str):
  """'auto' or an integer N."""
  if text == "auto":
    return text
  try:
    return int(text)
  except ValueError:
    raise argparse.ArgumentTypeError(f"expected an integer or 'auto', got {text!r}") from None


def run(args) -> dict:
  from glance_jax import demo
  from glance_jax.data.records import read_task_file
  from glance_jax.bench.engine import generate
  from glance_jax.head import Head
  from glance_jax.testbed import paths as testbed
  from glance_jax.qwen3_vl.inputs import Processor, prepare_inputs
  from glance_jax.qwen3_vl.target import load_target
  from glance_jax.sharding import make_mesh

  from glance_jax.decode.methods import check_budget
  auto = check_budget(args.budget, args.method, names=("--budget", "--method")) == "auto"
  if args.scores != "marginals" and args.method != "glance":
    raise ValueError(f"--scores {args.scores} ranks a glance tree's prefixes, not {args.method!r}'s")
  if args.draft_vocab is not None and args.method not in ("chain", "glance"):
    raise ValueError(f"--draft-vocab is the block head's (--method chain / glance), not {args.method!r}'s")
  if args.draft and args.method != "two-model":
    raise ValueError(f"--draft is the draft model of --method two-model, not of {args.method!r}")
  from glance_jax.bench.device_cost import DEVICE
  round_cost = None
  if args.round_cost and args.round_cost != DEVICE:
    from glance_jax.decode.policies import read_round_cost
    round_cost = read_round_cost(args.round_cost)
  if args.temperature < 0:
    raise ValueError(f"--temperature must be >= 0, got {args.temperature}")
  if args.max_new_tokens < 1:
    raise ValueError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
  mesh = make_mesh([int(x) for x in args.mesh.split(",")]) if args.mesh else None
  use_testbed = args.model is None and testbed.available()
  from glance_jax.testbed import regimes
  # the testbed's default regime (memory: the pair widened) unless --regime says; other models: as given
  regime = regimes.resolve(args.regime, use_testbed)
  if use_testbed:
    example = read_task_file(testbed.task_files()[0], on_error="raise")[0]
    path = testbed.TARGET
    images = list(args.image) or list(example.images)
    prompt = args.prompt or example.prompt
  else:
    path = args.model or demo.default_checkpoint()
    images = list(args.image) if args.model or args.image else [demo.default_image()]
    prompt = args.prompt or demo.DEFAULT_PROMPT
  target = load_target(path, dtype=DTYPES[args.dtype], mesh=mesh)
  processor = Processor.from_pretrained(str(target.path))
  inputs = prepare_inputs(processor, prompt, images or None)
  head = None
  if args.method in ("chain", "glance"):
    if args.head:
      head = Head.load(args.head, target=target)
    elif use_testbed:
      head = Head.load(testbed.HEAD, target=target)
    elif args.model:
      raise ValueError(f"--method {args.method} needs --head with --model (or use --method ar / ngram)")
    else:
      head = Head.random(target, seed=0, num_layers=2)
  elif args.method.startswith("eagle3"):
    eagle3_dir = args.head or (testbed.rival("eagle3") if use_testbed else None)
    if not eagle3_dir:
      raise ValueError(f"--method {args.method} needs --head: an EAGLE-3 head directory (midlayer format)")
    from glance_jax.eagle3 import load_eagle3
    head = load_eagle3(eagle3_dir, target.config, dtype=target.dtype, mesh=mesh)
  elif args.method == "two-model":
    args.draft = args.draft or (testbed.rival("draft") if use_testbed else None)
    if not args.draft:
      raise ValueError("--method two-model needs --draft: a smaller Qwen3-VL checkpoint directory")
    head = load_target(args.draft, dtype=DTYPES[args.dtype], mesh=mesh)
    if regime:   # the draft model is a target too: widened by the same transformation (as the bench does)
      head, _ = regimes.widen_pair(head, None, regime)
  if regime:
    block_head = args.method in ("chain", "glance")
    target, widened = regimes.widen_pair(target, head if block_head else None, regime)
    head = widened if block_head else head
    if args.method.startswith("eagle3"):   # widened for the widened target (eagle3/widen.py)
      head = regimes.widen_eagle3(head, regime, target=target)
  if args.draft_vocab is not None:   # the rows gathered from the target it drafts for (widened or not)
    head = head.with_draft_vocab(target, args.draft_vocab)
  if args.scores == "calibrated":
    head = head.with_calibrated_scores()
  elif args.scores == "parent":
    head = head.with_parent_correction()
  if args.round_cost == DEVICE and auto:   # measured on this machine at first use, then cached
    from glance_jax.bench.device_cost import device_round_cost
    round_cost = device_round_cost(target, head, inputs, batch=1)
  kw = dict(head=head, method=args.method, budget=args.budget, max_new_tokens=args.max_new_tokens,
            temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed,
            round_cost=round_cost)
  generate(target, inputs, **kw)  # compile (one trace per method, budget and shapes)
  t0 = time.perf_counter()
  res = generate(target, inputs, **kw)
  dt = time.perf_counter() - t0
  new = [int(t) for t in res.tokens[0]]
  text = processor.tokenizer.decode(new, skip_special_tokens=True)
  result = dict(method=args.method, budget=args.budget, prompt=prompt, text=text, tokens=new,
                new_tokens=len(new), rounds=int(res.rounds[0]), tau=res.tau, ms_per_token=1e3 * dt / len(new),
                tokens_per_s=len(new) / dt, accepted=[int(a) for a in res.accepted[0]],
                root_entropy=[float(h) for h in res.root_entropy[0]],
                widths=sorted({int(w) for w in res.widths}) if res.widths is not None else None,
                round_cost=_cost_source(round_cost) if auto or args.method == "ngram" else None)
  print(text)
  if auto and round_cost is None and res.method == "ar":
    from glance_jax.decode.policies import default_round_cost
    host = default_round_cost(1).meta.get("host", "the testbed's CPU")
    print(f"decode.py: note: the built-in cost table (measured on {host}, the testbed's in-cache target) finds "
          "no width that beats AR, so glance-auto ran AR's loop; --round-cost device times this machine",
          file=sys.stderr)
  used = f" widths={result['widths']} (costs: {result['round_cost']})" if auto else ""
  print(f"[{args.method} N={args.budget}{used}] new_tokens={len(new)} rounds={result['rounds']} tau={res.tau:.2f} "
        f"ms/token={result['ms_per_token']:.2f} tokens/s={result['tokens_per_s']:.1f}")
  if args.json_out:
    with open(args.json_out, "w") as f:
      json.dump(result, f, indent=2)
  return result


def main(argv=None) -> dict:
  argv = sys.argv[1:] if argv is None else list(argv)
  if argv[:1] == ["bench"]:  # `decode.py bench ...`: the benchmark (glance_jax/bench/cli.py)
    from glance_jax.bench.cli import main as bench_main
    return bench_main(argv[1:])
  if not argv:
    from glance_jax.testbed import paths as testbed
    if testbed.available():  # the embedded default: the testbed demo, AR vs GLANCE
      from glance_jax.testbed.demo import run_demo
      return {"demo": run_demo()}
  args = parser().parse_args(argv)
  defaults = {**vars(parser().parse_args([])), "regime": args.regime}
  if args.regime and vars(args) == defaults:   # `decode.py --regime R` alone: the demo in that regime
    from glance_jax.testbed import paths as testbed
    if testbed.available():
      from glance_jax.testbed.demo import run_demo
      return {"demo": run_demo(regime=args.regime)}
  return run(args)


def cli_main() -> None:
  """Entry point: bad input is one line on stderr and exit status 2, not a traceback."""
  try:
    main()
  except (ValueError, FileNotFoundError) as e:
    print(f"decode.py: error: {e}", file=sys.stderr)
    sys.exit(2)
