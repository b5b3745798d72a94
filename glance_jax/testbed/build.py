"""Rebuilds the shipped CPU testbed from nothing, in one command:

    python -m glance_jax.testbed.build              # ~1 h on 2 CPU cores; resumes if interrupted
    python -m glance_jax.testbed.build --stages eval  # just re-score the shipped target

Stages (each resumes or skips what is done):
  tasks   held-out task files + PNGs into testbed/tasks/ (shipped), train prompts into the workdir
  target  trains the small Qwen3-VL target (glance_jax/testbed/target_train.py) -> testbed/target/
          (HF layout: config.json, model.safetensors in bf16, tokenizer, chat template, preprocessor)
  head    `train.py --config configs/train_testbed.py`: regenerates the target's answers to the
          train prompts and trains the GLANCE head on them -> testbed/head/ (DFlash layout, bf16)
  eval    held-out accuracy of the target -> testbed/eval.json
"""

from __future__ import annotations

import argparse
import json
import logging
import pathlib
import shutil

from glance_jax.testbed import paths, suite

STAGES = ("tasks", "target", "head", "eval")
HELDOUT_PER_TASK = 24     # shipped held-out prompts per task (bench + accuracy)
TRAIN_PER_TASK = 384      # prompts per task whose target answers train the head
HEAD_CONFIG = paths.REPO / "configs" / "train_testbed.py"

logger = logging.getLogger(__name__)


def build_tasks(out: pathlib.Path, workdir: pathlib.Path) -> None:
  excluded = suite.heldout_answers(HELDOUT_PER_TASK)
  for task in suite.TASKS:
    suite.write_task(task, "heldout", HELDOUT_PER_TASK, out / "tasks")
    suite.write_task(task, "train", TRAIN_PER_TASK, workdir / "data", excluded=excluded)


def build_target(out: pathlib.Path, workdir: pathlib.Path, steps: int | None = None) -> None:
  import dataclasses
  import jax.numpy as jnp
  from glance_jax.testbed.target_train import TargetTrainConfig, train_target
  cfg = TargetTrainConfig() if steps is None else dataclasses.replace(TargetTrainConfig(), steps=steps)
  train_target(out / "target", workdir, cfg, save_dtype=jnp.bfloat16)


def build_head(out: pathlib.Path, workdir: pathlib.Path, overrides: list[str]) -> None:
  from glance_jax.train.config import apply_overrides, load_config
  from glance_jax.train.driver import train
  tasks = ",".join(str(workdir / "data" / f"{t}_train.jsonl") for t in suite.TASKS)
  cfg = apply_overrides(load_config(str(HEAD_CONFIG)), [f"target={out / 'target'}", f"task_files={tasks}",
                                                         f"workdir={workdir / 'head_run'}", *overrides])
  result = train(cfg)
  dest = out / "head"
  if dest.exists():
    shutil.rmtree(dest)
  import jax
  import jax.numpy as jnp
  from glance_jax.head import save_head
  head = result["head"]
  save_head(dest, head.config, jax.device_get(head.params), dtype=jnp.bfloat16)


def build_eval(out: pathlib.Path) -> dict:
  import jax.numpy as jnp
  from glance_jax.data.records import read_task_file
  from glance_jax.qwen3_vl.inputs import Processor
  from glance_jax.qwen3_vl.target import load_target
  from glance_jax.testbed.evaluate import heldout_accuracy
  target = load_target(out / "target", dtype=jnp.float32)
  processor = Processor.from_pretrained(str(out / "target"))
  records = {t: read_task_file(out / "tasks" / f"{t}_heldout.jsonl", on_error="raise") for t in suite.TASKS}
  report = heldout_accuracy(target, processor, records)
  (out / "eval.json").write_text(json.dumps(report, indent=2) + "\n")
  return report


def main(argv=None) -> None:
  ap = argparse.ArgumentParser(prog="python -m glance_jax.testbed.build", description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--out", default=str(paths.SHIPPED), help="where the shipped testbed goes (default: testbed/)")
  ap.add_argument("--workdir", default="runs/testbed", help="intermediate state (resumable)")
  ap.add_argument("--stages", default=",".join(STAGES), help="comma-separated subset of " + ",".join(STAGES))
  ap.add_argument("--target-steps", type=int, default=None, help="override the target's training steps")
  ap.add_argument("head_overrides", nargs="*", help="key=value overrides of configs/train_testbed.py")
  args = ap.parse_args(argv)
  logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
  for noisy in ("absl", "orbax", "jax"):  # their INFO lines would bury the build's own
    logging.getLogger(noisy).setLevel(logging.WARNING)
  stages = [s for s in args.stages.split(",") if s]
  bad = [s for s in stages if s not in STAGES]
  if bad:
    ap.error(f"--stages: unknown stage(s) {bad}; choose from {STAGES}")
  out, workdir = pathlib.Path(args.out), pathlib.Path(args.workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  if "tasks" in stages:
    build_tasks(out, workdir)
  if "target" in stages:
    build_target(out, workdir, args.target_steps)
  if "head" in stages:
    build_head(out, workdir, args.head_overrides)
  if "eval" in stages:
    print(json.dumps(build_eval(out), indent=2))


if __name__ == "__main__":
  main()
