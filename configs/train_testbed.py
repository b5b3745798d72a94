"""The testbed's GLANCE head: trained on the testbed target's own answers to the suite's train prompts.

  python -m glance_jax.testbed.build --stages head       # sets target= and workdir= for you
  python train.py --config configs/train_testbed.py target=testbed/target workdir=runs/testbed/head_run
"""

import pathlib

from glance_jax.testbed import suite
from glance_jax.train.config import TrainConfig

DATA = pathlib.Path("runs/testbed/data")


def get_config() -> TrainConfig:
  return TrainConfig(
      target="testbed/target", target_dtype="float32", compute_dtype="float32",
      head_layers=2, block_size=16,
      task_files=tuple(str(DATA / f"{t}_train.jsonl") for t in suite.TASKS),
      regen_max_new_tokens=64, regen_batch_size=16, seq_len=96, max_patches=8 * 96, num_anchors=16,
      batch_size=8, steps=4500, lr=2e-3, warmup_frac=0.04, mesh=(-1, 1, 1),
      workdir="runs/testbed/head_run", save_every=250, keep=2, log_every=25)
