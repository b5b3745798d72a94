"""Rebuilds the shipped CPU testbed from nothing, in one command:

    python -m glance_jax.testbed.build              # suite v4 into testbed/; ~3 h on 2 CPU cores; resumes
    python -m glance_jax.testbed.build --stages eval  # just re-score the shipped target
    python -m glance_jax.testbed.build --suite v1   # the first suite (certain grounded answers) into
                                                    # runs/testbed_v1/testbed (docs/testbed.md)

Stages (each resumes or skips what is done):
  tasks   held-out task files + PNGs into testbed/tasks/ (shipped), train prompts into the workdir
  target  trains the small Qwen3-VL target (glance_jax/testbed/target_train.py) -> testbed/target/
          (HF layout: config.json, model.safetensors in bf16, tokenizer, chat template, preprocessor)
  head    `train.py --config configs/train_testbed_v4.py` (v1: train_testbed.py): regenerates the
          target's answers to the train prompts and trains the GLANCE head on them -> testbed/head/
          (DFlash layout, bf16)
  eval    held-out accuracy of the target -> testbed/eval.json

A v2-v4 build also writes suite.json ({"suite_version": ...}) into its output; a directory without
one is v1, and a build refuses to add stages of one suite to a directory built with the other.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import pathlib
import shutil

from glance_jax.testbed import paths, suite, suites

STAGES = ("tasks", "target", "head", "eval")
HELDOUT_PER_TASK = 24     # shipped held-out prompts per task (bench + accuracy)
TRAIN_PER_TASK = 384      # prompts per task whose target answers train the head
HEAD_CONFIG = paths.REPO / "configs" / "train_testbed.py"

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class BuildSpec:
  """What a suite version builds, and where by default."""
  version: str
  head_config: pathlib.Path
  out: str
  workdir: str
  heldout_per_task: int = HELDOUT_PER_TASK
  train_per_task: int = TRAIN_PER_TASK
  target: tuple[tuple[str, object], ...] = ()   # TargetTrainConfig fields that differ from v1's


BUILDS = {
    # v4 (suite_v4.py, docs/testbed_v2.md#suite-v4-the-shipped-testbed) is what testbed/ ships; the
    # others build beside it. Longest prompt + answer: 84 tokens (v2's table; v4's caption 83) with
    # the v2 tokenizer: 96 leaves room for a tokenizer that merges less, rather than a crash mid-build.
    # The shipped v4 target: v2's 10000 steps (its first 5200 on an older chart layout), 2000 on
    # suite v3 and 2000 on v4, each continuation from a restarted learning rate; from nothing, this
    # recipe trains 12000 steps on v4, then 2000 from the restart.
    "v4": BuildSpec("v4", paths.REPO / "configs" / "train_testbed_v4.py", str(paths.SHIPPED), "runs/testbed_v4",
                    heldout_per_task=64, target=(("seq_len", 96), ("steps", 14000), ("restart_at", 12000),
                                                 ("restart_lr", 1e-3))),
    "v2": BuildSpec("v2", paths.REPO / "configs" / "train_testbed_v2.py", "runs/testbed_v2/testbed", "runs/testbed",
                    target=(("seq_len", 96), ("steps", 10000))),
    "v1": BuildSpec("v1", HEAD_CONFIG, "runs/testbed_v1/testbed", "runs/testbed_v1"),
    # v3 (suite_v3.py): v2's schedule for 10000 steps, then 2000 more from a restarted learning rate.
    "v3": BuildSpec("v3", paths.REPO / "configs" / "train_testbed_v3.py", "runs/testbed_v3/testbed",
                    "runs/testbed_v3", target=(("seq_len", 96), ("steps", 12000), ("restart_at", 10000),
                                               ("restart_lr", 1e-3))),
}


def build_tasks(out: pathlib.Path, workdir: pathlib.Path, spec: BuildSpec = BUILDS["v4"]) -> None:
  if spec.version == "v1":
    excluded = suite.heldout_answers(spec.heldout_per_task)
    for task in suite.TASKS:
      suite.write_task(task, "heldout", spec.heldout_per_task, out / "tasks")
      suite.write_task(task, "train", spec.train_per_task, workdir / "data", excluded=excluded)
    return
  s = suites.get(spec.version)
  suites.write_version(out, spec.version)
  for task in s.TASKS:
    s.write_task(task, "heldout", spec.heldout_per_task, out / "tasks")
    s.write_task(task, "train", spec.train_per_task, workdir / "data")


def build_target(out: pathlib.Path, workdir: pathlib.Path, steps: int | None = None,
                 spec: BuildSpec = BUILDS["v4"]) -> None:
  import jax.numpy as jnp
  from glance_jax.testbed.target_train import TargetTrainConfig, train_target
  cfg = dataclasses.replace(TargetTrainConfig(), suite_version=spec.version, **dict(spec.target))
  if steps is not None:
    cfg = dataclasses.replace(cfg, steps=steps)
  train_target(out / "target", workdir, cfg, save_dtype=jnp.bfloat16)


def build_head(out: pathlib.Path, workdir: pathlib.Path, overrides: list[str],
               spec: BuildSpec = BUILDS["v4"]) -> None:
  from glance_jax.train.config import apply_overrides, load_config
  from glance_jax.train.driver import train
  tasks = ",".join(str(workdir / "data" / f"{t}_train.jsonl") for t in suites.get(spec.version).TASKS)
  cfg = apply_overrides(load_config(str(spec.head_config)), [f"target={out / 'target'}", f"task_files={tasks}",
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


def build_eval(out: pathlib.Path, spec: BuildSpec = BUILDS["v4"]) -> dict:
  import jax.numpy as jnp
  from glance_jax.data.records import read_task_file
  from glance_jax.qwen3_vl.inputs import Processor
  from glance_jax.qwen3_vl.target import load_target
  from glance_jax.testbed.evaluate import heldout_accuracy
  target = load_target(out / "target", dtype=jnp.float32)
  processor = Processor.from_pretrained(str(out / "target"))
  records = {t: read_task_file(out / "tasks" / f"{t}_heldout.jsonl", on_error="raise")
             for t in suites.get(spec.version).TASKS}
  report = heldout_accuracy(target, processor, records, suite_version=spec.version)
  (out / "eval.json").write_text(json.dumps(report, indent=2) + "\n")
  return report


def main(argv=None) -> None:
  ap = argparse.ArgumentParser(prog="python -m glance_jax.testbed.build", description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--suite", default="v4", choices=suites.VERSIONS,
                  help="task suite version (v4: the shipped testbed, docs/testbed_v2.md; v2, v3: its "
                       "predecessors; v1: the first suite)")
  ap.add_argument("--out", default=None, help="where the testbed goes (default: testbed/ for v4, "
                  "runs/testbed_<version>/testbed for the others)")
  ap.add_argument("--workdir", default=None, help="intermediate state, resumable (default: runs/testbed "
                  "for v2, runs/testbed_v1 for v1)")
  ap.add_argument("--stages", default=",".join(STAGES), help="comma-separated subset of " + ",".join(STAGES))
  ap.add_argument("--target-steps", type=int, default=None, help="override the target's training steps")
  ap.add_argument("--heldout", type=int, default=None, help=f"held-out prompts per task (default: v4 64, the others {HELDOUT_PER_TASK})")
  ap.add_argument("--train-prompts", type=int, default=None,
                  help=f"train prompts per task for the head (default {TRAIN_PER_TASK})")
  ap.add_argument("head_overrides", nargs="*", help="key=value overrides of configs/train_testbed.py")
  args = ap.parse_args(argv)
  logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
  for noisy in ("absl", "orbax", "jax"):  # their INFO lines would bury the build's own
    logging.getLogger(noisy).setLevel(logging.WARNING)
  stages = [s for s in args.stages.split(",") if s]
  bad = [s for s in stages if s not in STAGES]
  if bad:
    ap.error(f"--stages: unknown stage(s) {bad}; choose from {STAGES}")
  spec = BUILDS[args.suite]
  for flag, v in (("--heldout", args.heldout), ("--train-prompts", args.train_prompts)):
    if v is not None and v < 1:
      ap.error(f"{flag} must be >= 1, got {v}")
  reserved = getattr(suites.get(spec.version), "HELDOUT_RESERVED", None)
  if reserved is not None and (args.heldout or 0) > reserved:
    ap.error(f"--heldout {args.heldout}: suite {spec.version} reserves only {reserved} held-out records per task")
  spec = dataclasses.replace(spec, heldout_per_task=args.heldout or spec.heldout_per_task,
                             train_per_task=args.train_prompts or spec.train_per_task)
  out, workdir = pathlib.Path(args.out or spec.out), pathlib.Path(args.workdir or spec.workdir)
  if out.is_dir() and any(out.iterdir()) and suites.read_version(out) != spec.version:
    ap.error(f"--out {out}: holds a {suites.read_version(out)} testbed ({out / suites.MARKER}), "
             f"not --suite {spec.version}; pick another --out")
  workdir.mkdir(parents=True, exist_ok=True)
  if "tasks" in stages:
    build_tasks(out, workdir, spec)
  if "target" in stages:
    build_target(out, workdir, args.target_steps, spec)
  if "head" in stages:
    build_head(out, workdir, args.head_overrides, spec)
  if "eval" in stages:
    print(json.dumps(build_eval(out, spec), indent=2))


if __name__ == "__main__":
  main()
