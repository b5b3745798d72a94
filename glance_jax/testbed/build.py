"""Rebuilds the shipped CPU testbed from nothing, in one command:

    python -m glance_jax.testbed.build                # the shipped suite (v4) into testbed/; ~3 h on 2 CPU cores; resumes
    python -m glance_jax.testbed.build --stages eval  # just re-score the shipped target
    python -m glance_jax.testbed.build --suite vN     # another suite version, into runs/testbed_vN/testbed

Stages (each resumes or skips what is done):
  tasks   held-out task files + PNGs into <out>/tasks/ (shipped), train prompts into <workdir>/data
  target  trains the small Qwen3-VL target (glance_jax/testbed/target_train.py, with the suite's
          TARGET_TRAIN recipe) -> <out>/target/ (HF layout: config.json, model.safetensors in bf16,
          tokenizer, chat template, preprocessor)
  head    `train.py --config configs/train_testbed.py suite=<version>`: regenerates the target's
          answers to the train prompts and trains the GLANCE head on them -> <out>/head/ (DFlash
          layout, bf16)
  eagle3  the EAGLE-3 rival (`train.py --config configs/train_eagle3_testbed.py`): trained on the head
          stage's regenerated rows -> <out>/eagle3/ (midlayer format)
  draft   the two-model rival's draft (glance_jax/testbed/draft_train.py): the target at half its
          depth, trained on the head's regenerated rows with the suite's DRAFT_TRAIN recipe ->
          <out>/draft/ (HF layout, bf16); a suite without DRAFT_TRAIN skips it
  parent  `train.py --config configs/train_parent_testbed.py`: a parent correction of the head's
          marginals (head frozen; the target's greedy answers to the head's train prompts)
          -> <out>/head/parent_correction.{json,safetensors}
  eval    held-out accuracy of the target -> <out>/eval.json

The output records its suite version in suite.json; a build refuses to add stages of one version to
a directory built with another. docs/testbed.md describes the suite, the recipe and its figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import pathlib
import shutil

from glance_jax.testbed import paths, stream, suites

STAGES = ("tasks", "target", "head", "eagle3", "draft", "parent", "eval")
HELDOUT_PER_TASK = stream.HELDOUT_RESERVED  # held-out prompts shipped per task: all the reserved ones
TRAIN_PER_TASK = 384      # prompts per task whose target answers train the head
HEAD_CONFIG = paths.REPO / "configs" / "train_testbed.py"
PARENT_CONFIG = paths.REPO / "configs" / "train_parent_testbed.py"
EAGLE3_CONFIG = paths.REPO / "configs" / "train_eagle3_testbed.py"

logger = logging.getLogger(__name__)


def default_dirs(version: str) -> tuple[pathlib.Path, pathlib.Path]:
  """(out, workdir) of a version's build: the shipped version's output is testbed/ (paths.SHIPPED),
  another's runs/testbed_<version>/testbed; the workdir (resumable state) is runs/testbed_<version>."""
  workdir = pathlib.Path(f"runs/testbed_{version}")
  return (paths.SHIPPED if version == suites.DEFAULT else workdir / "testbed"), workdir


@dataclasses.dataclass(frozen=True)
class BuildSpec:
  """What a build makes: the suite version and how many prompts per task."""
  version: str = suites.DEFAULT
  heldout_per_task: int = HELDOUT_PER_TASK
  train_per_task: int = TRAIN_PER_TASK

  @property
  def suite(self):
    return suites.get(self.version)


def build_tasks(out: pathlib.Path, workdir: pathlib.Path, spec: BuildSpec = BuildSpec()) -> None:
  s = spec.suite
  for task in s.TASKS:
    s.write_task(task, "heldout", spec.heldout_per_task, out / "tasks")
    s.write_task(task, "train", spec.train_per_task, workdir / "data")


def init_target(version: str, given: str | None = None) -> pathlib.Path:
  """The target a recipe with init_from=<version> continues: `given` (--init-target) or that
  version's build output; missing, it is an error saying how to build it."""
  path = pathlib.Path(given) if given else default_dirs(version)[0] / "target"
  if not (path / "config.json").is_file():
    raise ValueError(f"{path}: no target to continue (the recipe starts from suite {version}'s target); "
                     f"build it with `python -m glance_jax.testbed.build --suite {version} --stages "
                     f"tasks,target` or pass --init-target DIR")
  return path


def build_target(out: pathlib.Path, workdir: pathlib.Path, steps: int | None = None,
                 spec: BuildSpec = BuildSpec(), init: str | None = None) -> None:
  import jax.numpy as jnp
  from glance_jax.testbed.target_train import TargetTrainConfig, train_target
  recipe = dict(spec.suite.TARGET_TRAIN)
  if recipe.get("init_from") in suites.VERSIONS:
    recipe["init_from"] = str(init_target(recipe["init_from"], init))
  elif init:
    recipe["init_from"] = init
  cfg = dataclasses.replace(TargetTrainConfig(), suite_version=spec.version, **recipe)
  if steps is not None:   # fewer steps than the recipe's restart point: one schedule, no restart
    cfg = dataclasses.replace(cfg, steps=steps, restart_at=cfg.restart_at if cfg.restart_at < steps else 0)
  train_target(out / "target", workdir, cfg, save_dtype=jnp.bfloat16)


def build_head(out: pathlib.Path, workdir: pathlib.Path, overrides: list[str],
               spec: BuildSpec = BuildSpec()) -> None:
  from glance_jax.train.config import load_config
  from glance_jax.train.driver import train
  tasks = ",".join(str(workdir / "data" / f"{t}_train.jsonl") for t in spec.suite.TASKS)
  cfg = load_config(HEAD_CONFIG, [f"suite={spec.version}", f"target={out / 'target'}", f"task_files={tasks}",
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
  from glance_jax.head.draft_vocab import COUNTS_FILE
  counts = pathlib.Path(result["export"]) / COUNTS_FILE   # the rows' token counts: --draft-vocab K reads them
  if counts.is_file():
    shutil.copy2(counts, dest / COUNTS_FILE)


def build_parent(out: pathlib.Path, workdir: pathlib.Path, spec: BuildSpec = BuildSpec(),
                 overrides: list[str] = ()) -> None:
  """The head's parent correction, trained with the head frozen on the target's greedy answers to the
  head's train prompts (regenerated by the run into <workdir>/parent_regen, resumably:
  configs/train_parent_testbed.py says why greedy), copied beside the head."""
  from glance_jax.head import parent_correction as pc
  from glance_jax.train.config import load_config
  from glance_jax.train.driver import train
  regen = workdir / "parent_regen"
  tasks = ",".join(str(workdir / "data" / f"{t}_train.jsonl") for t in spec.suite.TASKS)
  cfg = load_config(PARENT_CONFIG, [f"suite={spec.version}", f"target={out / 'target'}", f"task_files={tasks}",
                                    f"head_init={out / 'head'}", f"regen_dir={regen}",
                                    f"workdir={workdir / 'parent_run'}", *overrides])
  export = pathlib.Path(train(cfg)["export"])
  for name in (pc.FILE, pc.WEIGHTS):
    shutil.copy2(export / name, out / "head" / name)


def _regen_rows(workdir: pathlib.Path) -> pathlib.Path:
  regen = workdir / "head_run" / "regen"
  if not regen.is_dir():
    raise ValueError(f"{regen}: no regenerated rows; run the head stage first (`--stages head`)")
  return regen


def build_eagle3(out: pathlib.Path, workdir: pathlib.Path, overrides: list[str] = (),
                 spec: BuildSpec = BuildSpec()) -> pathlib.Path:
  """The EAGLE-3 rival on the head stage's rows (the same rows, target and seq_len as the GLANCE head),
  exported in the midlayer format to <out>/eagle3 (fp32 as trained: ~1 MB at the testbed's size)."""
  from glance_jax.train.config import load_config
  from glance_jax.train.driver import train
  tasks = ",".join(str(workdir / "data" / f"{t}_train.jsonl") for t in spec.suite.TASKS)
  cfg = load_config(EAGLE3_CONFIG, [f"suite={spec.version}", f"target={out / 'target'}", f"task_files={tasks}",
                                    f"regen_dir={_regen_rows(workdir)}", f"workdir={workdir / 'eagle3_run'}",
                                    f"export_dir={out / 'eagle3'}", *overrides])
  return pathlib.Path(train(cfg)["export"])


def build_draft(out: pathlib.Path, workdir: pathlib.Path, spec: BuildSpec = BuildSpec(),
                steps: int | None = None) -> pathlib.Path | None:
  """The two-model draft on the head stage's regenerated rows (workdir/head_run/regen); `steps`
  (--draft-steps) replaces the recipe's, its warmup cut to a tenth of them where it was longer."""
  import jax.numpy as jnp
  from glance_jax.testbed.draft_train import train_draft
  from glance_jax.testbed.target_train import TargetTrainConfig
  recipe = getattr(spec.suite, "DRAFT_TRAIN", None)
  if recipe is None:
    logger.info("suite %s has no DRAFT_TRAIN: no draft stage", spec.version)
    return None
  rows = sorted(_regen_rows(workdir).glob("*.jsonl"))
  if not rows:
    raise ValueError(f"{workdir / 'head_run' / 'regen'}: no regenerated rows; run the head stage first "
                     f"(`--stages head`)")
  if steps is not None:
    recipe = {**recipe, "steps": steps, "warmup": min(recipe.get("warmup", 0), steps // 10)}
  cfg = dataclasses.replace(TargetTrainConfig(), suite_version=spec.version, **recipe)
  return train_draft(out / "target", rows, out / "draft", workdir / "draft_run", cfg, save_dtype=jnp.bfloat16)


def build_eval(out: pathlib.Path, spec: BuildSpec = BuildSpec()) -> dict:
  import jax.numpy as jnp
  from glance_jax.data.records import read_task_file
  from glance_jax.qwen3_vl.inputs import Processor
  from glance_jax.qwen3_vl.target import load_target
  from glance_jax.testbed.evaluate import heldout_accuracy
  target = load_target(out / "target", dtype=jnp.float32)
  processor = Processor.from_pretrained(str(out / "target"))
  records = {t: read_task_file(out / "tasks" / f"{t}_heldout.jsonl", on_error="raise") for t in spec.suite.TASKS}
  report = heldout_accuracy(target, processor, records, suite_version=spec.version)
  (out / "eval.json").write_text(json.dumps(report, indent=2) + "\n")
  return report


def main(argv=None) -> None:
  ap = argparse.ArgumentParser(prog="python -m glance_jax.testbed.build", description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--suite", default=suites.DEFAULT, choices=suites.VERSIONS,
                  help=f"task suite version (default {suites.DEFAULT}: the shipped testbed)")
  ap.add_argument("--out", default=None, help="where the testbed goes (default: testbed/ for the shipped "
                  "version, runs/testbed_<version>/testbed for another)")
  ap.add_argument("--workdir", default=None, help="intermediate state, resumable (default: runs/testbed_<version>)")
  ap.add_argument("--stages", default=",".join(STAGES), help="comma-separated subset of " + ",".join(STAGES))
  ap.add_argument("--target-steps", type=int, default=None, help="override the target's training steps "
                  "(below the recipe's restart point: one schedule, no restart)")
  ap.add_argument("--init-target", default=None, help="the target directory a continuation recipe "
                  "(TARGET_TRAIN init_from, e.g. v5 from v4) starts from (default: that version's build output)")
  ap.add_argument("--heldout", type=int, default=None, help=f"held-out prompts per task (default {HELDOUT_PER_TASK})")
  ap.add_argument("--train-prompts", type=int, default=None,
                  help=f"train prompts per task for the head (default {TRAIN_PER_TASK})")
  ap.add_argument("--eagle3", dest="eagle3_overrides", action="append", default=[], metavar="KEY=VALUE",
                  help="an override of configs/train_eagle3_testbed.py for the eagle3 stage (repeatable), "
                       "e.g. --eagle3 steps=800")
  ap.add_argument("--draft-steps", type=int, default=None,
                  help="the draft stage's training steps (default: the suite's DRAFT_TRAIN recipe)")
  ap.add_argument("--parent", dest="parent_overrides", action="append", default=[], metavar="KEY=VALUE",
                  help="an override of configs/train_parent_testbed.py for the parent stage (repeatable), "
                       "e.g. --parent parent_path=true")
  ap.add_argument("head_overrides", nargs="*", help="key=value overrides of configs/train_testbed.py")
  args = ap.parse_args(argv)
  logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
  for noisy in ("absl", "orbax", "jax"):  # their INFO lines would bury the build's own
    logging.getLogger(noisy).setLevel(logging.WARNING)
  stages = [s for s in args.stages.split(",") if s]
  bad = [s for s in stages if s not in STAGES]
  if bad:
    ap.error(f"--stages: unknown stage(s) {bad}; choose from {STAGES}")
  if any(o.startswith("suite=") for o in args.head_overrides):
    ap.error("suite= is set by --suite")
  for flag, v in (("--heldout", args.heldout), ("--train-prompts", args.train_prompts)):
    if v is not None and v < 1:
      ap.error(f"{flag} must be >= 1, got {v}")
  if (args.heldout or 0) > stream.HELDOUT_RESERVED:
    ap.error(f"--heldout {args.heldout}: a suite reserves only {stream.HELDOUT_RESERVED} held-out records per task")
  spec = BuildSpec(args.suite, args.heldout or HELDOUT_PER_TASK, args.train_prompts or TRAIN_PER_TASK)
  default_out, default_workdir = default_dirs(spec.version)
  out, workdir = pathlib.Path(args.out or default_out), pathlib.Path(args.workdir or default_workdir)
  if out.is_dir() and any(out.iterdir()):
    try:
      found = suites.read_version(out)
    except ValueError as e:
      ap.error(f"--out {out}: {e}; pick another --out")
    if found != spec.version:
      ap.error(f"--out {out}: holds a {found} testbed ({out / suites.MARKER}), not --suite {spec.version}; "
               f"pick another --out")
  suites.write_version(out, spec.version)
  workdir.mkdir(parents=True, exist_ok=True)
  if "tasks" in stages:
    build_tasks(out, workdir, spec)
  if "target" in stages:
    build_target(out, workdir, args.target_steps, spec, args.init_target)
  if "head" in stages:
    build_head(out, workdir, args.head_overrides, spec)
  if "eagle3" in stages:
    build_eagle3(out, workdir, args.eagle3_overrides, spec)
  if "draft" in stages:
    build_draft(out, workdir, spec, args.draft_steps)
  if "parent" in stages:
    build_parent(out, workdir, spec, args.parent_overrides)
  if "eval" in stages:
    print(json.dumps(build_eval(out, spec), indent=2))


if __name__ == "__main__":
  main()
