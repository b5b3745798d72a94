"""The testbed's GLANCE head: trained on the testbed target's own answers to a suite's train prompts.

  python -m glance_jax.testbed.build --stages head       # sets suite=, target=, task_files= and workdir= for you
  python train.py --config configs/train_testbed.py      # the shipped suite's build directories
  python train.py --config configs/train_testbed.py suite=v4 target=testbed/target steps=1000

`suite` (default: the shipped version, glance_jax/testbed/suites.py) picks the train prompts and the
directories of that version's build (glance_jax/testbed/build.py: default_dirs); the recipe is the
same for every version but for the lengths, which follow the suite's answers: regeneration runs to
its ANSWER_TOKENS, rows are its target's seq_len, and a row holds one anchor per 8 tokens (at least 16);
a suite's HEAD_TRAIN (TrainConfig fields) overrides the rest, e.g. fewer steps where rows are long.
"""

import dataclasses

from glance_jax.testbed import build, suites
from glance_jax.train.config import TrainConfig


def get_config(suite: str = suites.DEFAULT) -> TrainConfig:
  s = suites.get(suite)
  tasks = s.TASKS
  seq_len = s.TARGET_TRAIN["seq_len"]
  out, workdir = build.default_dirs(suite)
  cfg = TrainConfig(
      target=str(out / "target"), target_dtype="float32", compute_dtype="float32",
      head_layers=2, block_size=16,
      task_files=tuple(str(workdir / "data" / f"{t}_train.jsonl") for t in tasks),
      regen_max_new_tokens=s.ANSWER_TOKENS, regen_batch_size=16, seq_len=seq_len, max_patches=8 * 96,
      num_anchors=max(16, seq_len // 8),
      batch_size=8, steps=4500, lr=2e-3, warmup_frac=0.04, mesh=(-1, 1, 1),
      workdir=str(workdir / "head_run"), save_every=250, keep=2, log_every=25)
  return dataclasses.replace(cfg, **getattr(s, "HEAD_TRAIN", {}))
