"""Where the decode loop's time goes, op by op: XLA's own profiler on the testbed's real loop.

Runs `generate` once to capture the arguments it passes to the jitted decode loop, then calls the
loop alone --calls times (each on a fresh copy of the prefilled state) under `jax.profiler.trace`
and aggregates the executed kernels ("thunks" on XLA:CPU) by what they compute: the HLO op name
and output shape of each fused kernel, from the compiled program's text. Prints, per call: rounds,
kernels run, their summed time (on every thread: above the wall time where two threads overlap),
the host time from the call to the start of execution (dispatch), and the top kernels.

    python benchmarks/round_profile.py --method chain --task table
    python benchmarks/round_profile.py --method glance-15 --task lines --prompt 2 --top 60

CPU testbed regime (3M target, fp32). On an accelerator the same script profiles that backend's
kernels, but names and threads differ.
"""

import argparse
import collections
import glob
import gzip
import json
import pathlib
import re
import sys
import tempfile

if __package__ in (None, ""):
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from glance_jax.decode import generate as generate_lib  # noqa: E402
from glance_jax.bench.engine import generate
from glance_jax.head import Head  # noqa: E402

METHODS = {"ar": dict(method="ar"), "ngram": dict(method="ngram", budget=15), "chain": dict(method="chain", budget=15),
           "glance-15": dict(method="glance", budget=15), "glance-63": dict(method="glance", budget=63),
           "glance-auto": dict(method="glance", budget=63, auto=True)}


def kernel_names(hlo_text: str) -> dict[str, tuple[str, str]]:
  """Kernel (instruction) name -> (op name of what it computes, output shape). A fusion's op name is
  the first one inside its fused computation."""
  comp_ops, cur = {}, None
  for line in hlo_text.splitlines():
    head = re.match(r"^\s*(?:ENTRY )?%([\w.\-]+) .*\{\s*$", line)
    if head:
      cur = comp_ops.setdefault(head.group(1), [])
      continue
    op = re.search(r'op_name="([^"]*)"', line)
    if cur is not None and op:
      cur.append(op.group(1))
  out = {}
  for line in hlo_text.splitlines():
    m = re.match(r"\s*(?:ROOT )?%([\w.\-]+) = (\S+) ", line)
    if not m:
      continue
    op, calls = re.search(r'op_name="([^"]*)"', line), re.search(r"calls=%([\w.\-]+)", line)
    names = [op.group(1)] if op else comp_ops.get(calls.group(1), []) if calls else []
    label = re.sub(r"^jit\(decode_rounds\)/", "", names[0]) if names else "(no op name: copies, layouts)"
    out[m.group(1)] = (label, m.group(2).split("{")[0])
  return out


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--method", choices=sorted(METHODS), default="chain")
  p.add_argument("--task", default="table", help="a task of the shipped testbed")
  p.add_argument("--prompt", type=int, default=0, help="index of the held-out prompt")
  p.add_argument("--max-new-tokens", type=int, default=64)
  p.add_argument("--calls", type=int, default=30)
  p.add_argument("--top", type=int, default=40)
  args = p.parse_args(argv)

  from glance_jax.bench.runner import prepare_prompts
  from glance_jax.bench.tasks import load_tasks
  from glance_jax.qwen3_vl.inputs import Processor
  from glance_jax.qwen3_vl.target import load_target
  from glance_jax.testbed import paths
  target = load_target(str(paths.TARGET), dtype=jnp.float32)
  head = Head.load(str(paths.HEAD), target=target)
  tasks, _ = load_tasks([str(f) for f in paths.task_files()], args.prompt + 1)
  prompts, _ = prepare_prompts(Processor.from_pretrained(str(target.path)), tasks)
  if args.task not in prompts:
    raise SystemExit(f"--task {args.task!r}: the testbed has {sorted(prompts)}")
  if args.prompt >= len(prompts[args.task]):
    raise SystemExit(f"--prompt {args.prompt}: {args.task} has {len(prompts[args.task])} held-out prompts")
  inputs = prompts[args.task][args.prompt].inputs

  captured = {}
  loop_fn = generate_lib.decode_rounds

  def capture(*a, **k):  # the loop donates its state: keep a copy of the prefilled one
    captured["args"] = (a[:5] + (jax.tree.map(jnp.copy, a[5]),) + a[6:], k)
    return loop_fn(*a, **k)

  generate_lib.decode_rounds = capture   # the arguments generate passes (target, drafter, policy, state, cfg)
  try:
    res = generate(target, inputs, head=head, max_new_tokens=args.max_new_tokens, **METHODS[args.method])
  finally:
    generate_lib.decode_rounds = loop_fn
  a, k = captured["args"]
  state = a[5]
  names = kernel_names(loop_fn.lower(*a, **k).compile().as_text())

  def call():  # the loop donates its state: each call gets a fresh copy (copied before the trace)
    return loop_fn(*a[:5], states.pop(), *a[6:], **k).out

  states = [jax.tree.map(jnp.copy, state) for _ in range(args.calls + 3)]
  jax.block_until_ready(states)
  for _ in range(3):
    jax.block_until_ready(call())
  with tempfile.TemporaryDirectory() as d:
    with jax.profiler.trace(d):
      for _ in range(args.calls):
        jax.block_until_ready(call())
    trace = glob.glob(f"{d}/**/*.trace.json.gz", recursive=True)
    events = [e for e in json.load(gzip.open(trace[-1]))["traceEvents"] if e.get("ph") == "X"]

  events.sort(key=lambda e: e["ts"])
  dispatch = []
  for e in (x for x in events if x["name"] == "PjitFunction(decode_rounds)"):
    start = next((x for x in events if x["ts"] >= e["ts"] and x["name"].startswith("CommonPjRtLoadedExecutable::Execute")),
                 None)
    if start is not None:
      dispatch.append(start["ts"] - e["ts"])
  total, count = collections.Counter(), collections.Counter()
  for e in events:
    if e["name"] in names:
      total[names[e["name"]]] += e["dur"]
      count[names[e["name"]]] += 1
  n = args.calls
  rounds = len(res.accepted[0])
  print(f"{args.method} on {args.task}[{args.prompt}]: {len(res.tokens[0])} tokens in {rounds} rounds per call; "
        f"per call {sum(count.values()) / n:.0f} kernels, {sum(total.values()) / n / 1e3:.3f} ms summed over threads, "
        f"dispatch (call -> execution, under the profiler) {np.median(dispatch) / 1e3:.3f} ms")
  print(f"| ms per call | per round | kernels per call | op | output |\n|---|---|---|---|---|")
  for (label, shape), us in total.most_common(args.top):
    print(f"| {us / n / 1e3:.3f} | {us / n / 1e3 / rounds:.3f} | {count[(label, shape)] / n:.1f} | {label[:90]} | {shape} |")


if __name__ == "__main__":
  main()
