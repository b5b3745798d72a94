"""What a task's rounds look like: each glance-N round's root entropy, accepted length and text, by
entropy band, and what the head still gets accepted with its target features zeroed.

    python benchmarks/round_anatomy.py testbed/tasks/table_heldout.jsonl [--limit 8] [--budget 63]
        [--bands 0.01,1.1] [--show 12] [--zeroed] [--dtype float32] [--json OUT]

The bench's entropy law and zeroed-conditioning tau are averages; this prints the rounds behind them
(docs/testbed.md uses it for suite v5b's table and caption): per band of root entropy H (the
entropy of the head's first drafted position) the rounds, their mean H and accepted length a, and the
first --show of them as `H a 'the 3 tokens before' | 'accepted + bonus'`; with --zeroed, the head
under the zero-context ablation decodes the same prompts and its accepted runs are tallied by text,
most accepted first. Every decode is checked against AR's tokens (lossless) before it is read.

Round accounting (as decode.loop emits): token 0 comes from the prefill and is the first root;
a round with root at index t accepts tokens t+1 .. t+a and emits the bonus t+a+1, the next root.
"""

from __future__ import annotations

import argparse
import collections
import json
import pathlib
import sys

import numpy as np


def rounds_of(tokens, accepted, root_entropy, decode) -> list[dict]:
  """One dict per round of one row: root_entropy, accepted, before (text of the 3 tokens up to
  the root), text (accepted tokens + bonus). decode: token ids -> text."""
  toks = [int(t) for t in tokens]
  out, t = [], 0
  for a, h in zip(accepted, root_entropy):
    a = int(a)
    if t + 1 >= len(toks):
      break
    out.append({"root_entropy": float(h), "accepted": a, "before": decode(toks[max(0, t - 2):t + 1]),
                "text": decode(toks[t + 1:t + a + 2])})
    t += a + 1
  return out


def bands_of(rounds: list[dict], edges: tuple[float, ...]) -> list[dict]:
  """Rounds grouped by root entropy: [0, e0), [e0, e1), ..., [e_last, inf)."""
  lo = (0.0,) + tuple(edges)
  hi = tuple(edges) + (float("inf"),)
  out = []
  for a, b in zip(lo, hi):
    rs = [r for r in rounds if a <= r["root_entropy"] < b]
    out.append({"band": [a, b], "rounds": len(rs),
                "mean_H": float(np.mean([r["root_entropy"] for r in rs])) if rs else None,
                "mean_a": float(np.mean([r["accepted"] for r in rs])) if rs else None, "examples": rs})
  return out


def zeroed_tally(rounds: list[dict]) -> list[tuple[str, str, int]]:
  """(before, accepted text, accepted tokens) of every round that accepted, summed by text."""
  c = collections.Counter()
  for r in rounds:
    if r["accepted"] > 0:
      c[(r["before"], r["text"])] += r["accepted"]
  return [(b, t, n) for (b, t), n in c.most_common()]


def anatomy(target, head, prompts, *, budget: int, max_new_tokens: int, edges, zeroed: bool) -> dict:
  """prompts: [(prompt, images)]. Decodes each with AR, glance-budget and (zeroed) the ablated head."""
  from glance_jax.decode.generate import generate
  from glance_jax.qwen3_vl.inputs import Processor, prepare_inputs
  processor = Processor.from_pretrained(str(target.path))
  decode = processor.tokenizer.decode
  heads = {"glance": head} | ({"zeroed": head.ablated("zero-context")} if zeroed else {})
  rounds = {k: [] for k in heads}
  accepted = {k: [] for k in heads}       # every round's a, as the bench's tau counts them
  for prompt, images in prompts:
    inputs = prepare_inputs(processor, prompt, list(images))
    ar = np.asarray(generate(target, inputs, method="ar", max_new_tokens=max_new_tokens).tokens[0])
    for k, h in heads.items():
      res = generate(target, inputs, head=h, method="glance", budget=budget, max_new_tokens=max_new_tokens)
      if not np.array_equal(np.asarray(res.tokens[0]), ar):
        raise AssertionError(f"{k} at budget {budget} is not AR's output on prompt {prompt[:40]!r}")
      rounds[k] += rounds_of(res.tokens[0], res.accepted[0], res.root_entropy[0], decode)
      accepted[k].append(np.asarray(res.accepted[0]))
  out = {"budget": budget, "prompts": len(prompts), "bands": bands_of(rounds["glance"], edges)}
  if zeroed:
    a = np.concatenate(accepted["zeroed"])
    out["zeroed"] = {"rounds": int(a.size), "accepted": int(a.sum()),
                     "tau": float(np.mean(a + 1)) if a.size else 1.0,   # GenerationResult.tau, pooled
                     "by_text": zeroed_tally(rounds["zeroed"])}
  return out


def markdown(rep: dict, show: int) -> str:
  lines = [f"glance-{rep['budget']}, {rep['prompts']} prompts"]
  for b in rep["bands"]:
    lo, hi = b["band"]
    if not b["rounds"]:
      lines.append(f"== H in [{lo}, {hi}): no rounds")
      continue
    lines.append(f"== H in [{lo}, {hi}): {b['rounds']} rounds, mean H {b['mean_H']:.3f}, mean a {b['mean_a']:.2f}")
    lines += [f"  {r['root_entropy']:.3f} {r['accepted']:2d} {r['before']!r} | {r['text']!r}" for r in b["examples"][:show]]
  if "zeroed" in rep:
    z = rep["zeroed"]
    lines.append(f"== zeroed head: {z['accepted']} accepted in {z['rounds']} rounds (tau {z['tau']:.2f}); by text:")
    lines += [f"  {n:4d} {b!r} -> {t!r}" for b, t, n in z["by_text"][:show]]
  return "\n".join(lines)


def main(argv=None, *, target=None, head=None) -> dict:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("task", help="a task JSONL (decode.py bench's format)")
  p.add_argument("--model", default="testbed/target")
  p.add_argument("--head", dest="head_dir", default="testbed/head")
  p.add_argument("--limit", type=int, default=8)
  p.add_argument("--budget", type=int, default=63)
  p.add_argument("--max-new-tokens", type=int, default=224)
  p.add_argument("--bands", default="0.01,1.1", help="root-entropy band edges, nats")
  p.add_argument("--show", type=int, default=12)
  p.add_argument("--zeroed", action="store_true")
  p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                 help="the target's (decode.py bench's default: float32; in bfloat16 near-tie forks of the "
                      "trained testbed flip between AR's and the verify's paths)")
  p.add_argument("--json")
  args = p.parse_args(argv)
  from glance_jax.bench.tasks import load_tasks
  if target is None:
    from glance_jax.head import Head
    from glance_jax.qwen3_vl.target import load_target
    import jax.numpy as jnp
    target = load_target(args.model, dtype=getattr(jnp, args.dtype))
    head = Head.load(args.head_dir, target=target)
  tasks, errors = load_tasks([args.task], args.limit)
  if not tasks:
    sys.exit(f"round_anatomy: no task read from {args.task}: {errors}")
  prompts = [(r.prompt, r.images) for r in tasks[0].records]
  edges = tuple(float(x) for x in args.bands.split(","))
  rep = anatomy(target, head, prompts, budget=args.budget, max_new_tokens=args.max_new_tokens, edges=edges,
                zeroed=args.zeroed)
  print(markdown(rep, args.show))
  if args.json:
    pathlib.Path(args.json).write_text(json.dumps(rep, indent=1))
  return rep


if __name__ == "__main__":
  main()
