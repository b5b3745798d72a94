"""Does training help? A tiny target, a head trained a few hundred steps on the target's own greedy
answers, and tau (chain and glance tree) on held-out prompts before and after training.

  python benchmarks/train_learning.py                 # ~5 minutes on 2 CPU cores
  python benchmarks/train_learning.py --steps 100 --prompts 24 --heldout 8
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import tempfile

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

WORDS = ("red green blue yellow square circle triangle what color shape is the this picture left right "
         "top bottom how many count one two three four describe tell me about where big small").split()


def prompts(rng, n: int, prefix: str):
  from glance_jax.data.records import PromptRecord
  return [PromptRecord(id=f"{prefix}{i}", task="toy", split=prefix, prompt=" ".join(rng.choice(WORDS, size=int(rng.integers(4, 10)))),
                       images=()) for i in range(n)]


def evaluate(target, processor, head, records, *, max_new_tokens: int, budgets=(15, 63)) -> dict:
  from glance_jax.decode.generate import generate
  from glance_jax.qwen3_vl.inputs import prepare_inputs
  inputs = prepare_inputs(processor, [r.prompt for r in records])
  out = {}
  for method, budget in [("chain", 15)] + [("glance", b) for b in budgets]:
    res = generate(target, inputs, head=head, method=method, budget=budget, max_new_tokens=max_new_tokens)
    out[f"{method}{budget}"] = res.tau
  return out


def main(argv=None) -> dict:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--steps", type=int, default=300)
  ap.add_argument("--prompts", type=int, default=48)
  ap.add_argument("--heldout", type=int, default=16)
  ap.add_argument("--max-new-tokens", type=int, default=48)
  ap.add_argument("--workdir", default=None)
  ap.add_argument("--json", default=None)
  args = ap.parse_args(argv)
  import jax.numpy as jnp
  from glance_jax.data.records import write_task_file
  from glance_jax.head import Head
  from glance_jax.head import HeadConfig, init_head
  from glance_jax.qwen3_vl.inputs import Processor
  from glance_jax.qwen3_vl.target import load_target
  from glance_jax.testing.checkpoint import make_tiny_checkpoint
  from glance_jax.train.config import TrainConfig
  from glance_jax.train.driver import train

  work = pathlib.Path(args.workdir or tempfile.mkdtemp(prefix="glance_learning_"))
  rng = np.random.default_rng(0)
  model = work / "model"
  if not (model / "config.json").exists():
    make_tiny_checkpoint(model, seed=0)
  task = work / "train.jsonl"
  write_task_file(prompts(rng, args.prompts, "train"), task)
  heldout = prompts(rng, args.heldout, "heldout")
  cfg = TrainConfig(target=str(model), target_dtype="float32", compute_dtype="float32", head_layers=2,
                    block_size=16, task_files=(str(task),), regen_max_new_tokens=args.max_new_tokens,
                    regen_batch_size=16, seq_len=96, max_patches=64, num_anchors=16, batch_size=8,
                    steps=args.steps, lr=3e-3, workdir=str(work / "run"), save_every=max(args.steps, 1), keep=1)
  target = load_target(model, dtype=jnp.float32)
  processor = Processor.from_pretrained(str(model))
  head_cfg = HeadConfig.for_target(target.config, num_layers=cfg.head_layers, block_size=cfg.block_size)
  untrained = Head(head_cfg, *init_head(head_cfg, seed=cfg.seed))      # the run's own initial weights
  before = evaluate(target, processor, untrained, heldout, max_new_tokens=args.max_new_tokens)
  result = train(cfg, progress=False)
  after = evaluate(target, processor, result["head"], heldout, max_new_tokens=args.max_new_tokens)
  report = dict(steps=args.steps, train_prompts=args.prompts, heldout_prompts=args.heldout,
                tau_untrained=before, tau_trained=after, final_train_metrics={
                    k: result["last"].get(k) for k in ("loss", "acc", "tau_implied")})
  print(f"held-out tau over {args.heldout} prompts ({args.steps} steps on {args.prompts} prompts):")
  print("| method | untrained head | trained head |\n|---|---|---|")
  for k in before:
    print(f"| {k} | {before[k]:.2f} | {after[k]:.2f} |")
  if args.json:
    pathlib.Path(args.json).write_text(json.dumps(report, indent=2))
  return report


if __name__ == "__main__":
  main()
