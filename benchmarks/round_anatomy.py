"""What a task's rounds look like: each glance-N round's root entropy, accepted length and text, by
entropy band, and what the head still gets accepted with its target features zeroed.

    python benchmarks/round_anatomy.py testbed/tasks/table_heldout.jsonl [--limit 8] [--budget 63]
        [--bands 0.01,1.1] [--show 12] [--zeroed] [--roots N] [--dtype float32] [--json OUT]

The bench's entropy law and zeroed-conditioning tau are averages; this prints the rounds behind them
(docs/testbed.md uses it for suite v5b's table and caption): per band of root entropy H (the
entropy of the head's first drafted position) the rounds, their mean H and accepted length a, and the
first --show of them as `H a 'the 3 tokens before' | 'accepted + bonus'`; with --zeroed, the head
under the zero-context ablation decodes the same prompts and its accepted runs are tallied by text,
most accepted first; with --roots N, the N most frequent root tokens with their rounds, median H and
mean a, and the entropy law's isotonic R^2 (the bench's) over every round but theirs. Every decode is
checked against AR's tokens (lossless) before it is read: a decode that leaves AR on a float tie of
AR's own step (bench/audit.py) is kept and named, as the bench keeps it; any other difference raises.

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
                "root": decode(toks[t:t + 1]), "first": t == 0, "text": decode(toks[t + 1:t + a + 2])})
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


def law_records(rounds: list[dict], accepted, n_tokens: int) -> None:
  """Adds to one row's rounds what the bench's entropy law fits: "a_law" (the last round cut to
  what it emitted) and "censored" (its run reached the answer's end: analysis.end_censoring)."""
  from glance_jax.analysis import end_censoring
  a, cens = end_censoring(accepted, n_tokens)
  for r, x, c in zip(rounds, a, cens):
    r["a_law"], r["censored"] = int(x), bool(c)


FIRST = "(first round)"    # a row's first round, rooted at the prefill's token: a kind of its own


def roots_of(rounds: list[dict], top: int, L: int = 15) -> dict:
  """The `top` most frequent root tokens (every row's first round counted apart, as FIRST): per
  root its rounds, median root H, mean a, censored rounds, and the isotonic R^2 of the entropy
  law's deciles (the bench's figure) over every round but those: which kind of round holds the
  law's fit down. "r2_ci": that R^2's 95% interval over the prompts ("prompt" of each round)."""
  from glance_jax.analysis import bootstrap_isotonic_r2, isotonic_r2
  H = np.array([r["root_entropy"] for r in rounds])
  a = np.array([r["a_law"] for r in rounds])
  cens = np.array([r["censored"] for r in rounds])
  roots = np.array([FIRST if r.get("first") else r["root"] for r in rounds], dtype=object)
  fit = lambda keep: isotonic_r2(H[keep], a[keep], cens[keep], L) if np.unique(H[keep]).size > 1 else None
  out = []
  for root, n in collections.Counter(roots.tolist()).most_common(top):
    m = roots == root
    out.append({"root": root, "rounds": int(n), "median_H": float(np.median(H[m])), "mean_a": float(a[m].mean()),
                "censored": int(cens[m].sum()), "r2_without": fit(~m)})
  prompts = np.array([r.get("prompt", 0) for r in rounds])
  rows = [(H[prompts == p], a[prompts == p], cens[prompts == p]) for p in np.unique(prompts)]
  ci = list(bootstrap_isotonic_r2(rows, L)) if len(rows) >= 2 and np.unique(H).size > 1 else None
  return {"r2": fit(np.ones(H.size, bool)), "r2_ci": ci, "roots": out}


def zeroed_tally(rounds: list[dict]) -> list[tuple[str, str, int]]:
  """(before, accepted text, accepted tokens) of every round that accepted, summed by text."""
  c = collections.Counter()
  for r in rounds:
    if r["accepted"] > 0:
      c[(r["before"], r["text"])] += r["accepted"]
  return [(b, t, n) for (b, t), n in c.most_common()]


def anatomy(target, head, prompts, *, budget: int, max_new_tokens: int, edges, zeroed: bool,
            roots: int = 0) -> dict:
  """prompts: [(prompt, images)]. Decodes each with AR, glance-budget and (zeroed) the ablated head."""
  from glance_jax.bench.audit import divergences
  from glance_jax.decode.generate import generate
  from glance_jax.qwen3_vl.inputs import Processor, prepare_inputs
  processor = Processor.from_pretrained(str(target.path))
  decode = processor.tokenizer.decode
  heads = {"glance": head} | ({"zeroed": head.ablated("zero-context")} if zeroed else {})
  rounds = {k: [] for k in heads}
  accepted = {k: [] for k in heads}       # every round's a, as the bench's tau counts them
  ties = []
  for prompt, images in prompts:
    inputs = prepare_inputs(processor, prompt, list(images))
    ar = np.asarray(generate(target, inputs, method="ar", max_new_tokens=max_new_tokens).tokens[0])
    for k, h in heads.items():
      res = generate(target, inputs, head=h, method="glance", budget=budget, max_new_tokens=max_new_tokens)
      if not np.array_equal(np.asarray(res.tokens[0]), ar):
        # a float tie of AR's own step is kept, as the bench keeps it (bench/audit.py); a fault is not
        d, = divergences(target, {0: inputs}, {0: ar}, {0: res.tokens[0]}, max_new_tokens=max_new_tokens)
        if not d["tie"]:
          raise AssertionError(f"{k} at budget {budget} is not AR's output on prompt {prompt[:40]!r} "
                               f"(token {d['at']}, AR's step gap {d['gap']:.2e}: not a float tie)")
        ties.append({"arm": k, "prompt": len(accepted[k]), "at": d["at"], "gap": d["gap"]})
      row = rounds_of(res.tokens[0], res.accepted[0], res.root_entropy[0], decode)
      law_records(row, res.accepted[0], len(res.tokens[0]))
      for r in row:
        r["prompt"] = len(accepted[k])
      rounds[k] += row
      accepted[k].append(np.asarray(res.accepted[0]))
  out = {"budget": budget, "prompts": len(prompts), "bands": bands_of(rounds["glance"], edges), "float_ties": ties}
  if roots:
    out["by_root"] = roots_of(rounds["glance"], roots)
  if zeroed:
    a = np.concatenate(accepted["zeroed"])
    out["zeroed"] = {"rounds": int(a.size), "accepted": int(a.sum()),
                     "tau": float(np.mean(a + 1)) if a.size else 1.0,   # GenerationResult.tau, pooled
                     "by_text": zeroed_tally(rounds["zeroed"])}
  return out


def _r2(v) -> str:
  return "-" if v is None else f"{v:.3f}"


def markdown(rep: dict, show: int) -> str:
  lines = [f"glance-{rep['budget']}, {rep['prompts']} prompts"]
  lines += [f"  ({t['arm']} left AR on prompt {t['prompt']} at token {t['at']}: a float tie of AR's own step, "
            f"gap {t['gap']:.1e}; kept, as the bench keeps it)" for t in rep.get("float_ties", ())]
  for b in rep["bands"]:
    lo, hi = b["band"]
    if not b["rounds"]:
      lines.append(f"== H in [{lo}, {hi}): no rounds")
      continue
    lines.append(f"== H in [{lo}, {hi}): {b['rounds']} rounds, mean H {b['mean_H']:.3f}, mean a {b['mean_a']:.2f}")
    lines += [f"  {r['root_entropy']:.3f} {r['accepted']:2d} {r['before']!r} | {r['text']!r}" for r in b["examples"][:show]]
  if "by_root" in rep:
    br = rep["by_root"]
    ci = f" [{br['r2_ci'][0]:.2f}, {br['r2_ci'][1]:.2f}] over prompts" if br.get("r2_ci") else ""
    lines.append(f"== by root token (law's isotonic R^2 over every round {_r2(br['r2'])}{ci}): "
                 "rounds, median H, mean a, censored, R^2 without them")
    lines += [f"  {r['root']!r:>10} {r['rounds']:4d} {r['median_H']:.5f} {r['mean_a']:5.2f} {r['censored']:3d} "
              f"{_r2(r['r2_without'])}" for r in br["roots"]]
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
  p.add_argument("--roots", type=int, default=0, help="also tabulate the N most frequent root tokens and the "
                 "entropy law's isotonic R^2 without each (docs/testbed.md, the lines' law)")
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
                zeroed=args.zeroed, roots=args.roots)
  print(markdown(rep, args.show))
  if args.json:
    pathlib.Path(args.json).write_text(json.dumps(rep, indent=1))
  return rep


if __name__ == "__main__":
  main()
