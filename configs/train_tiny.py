"""Tiny end-to-end run on CPU: the embedded tiny target, synthetic prompts, a 2-layer head.

  python train.py --config configs/train_tiny.py            # a few minutes on 2 cores
  python train.py --config configs/train_tiny.py steps=20 workdir=/tmp/run
"""

import pathlib

from glance_jax.train.config import TrainConfig

ROOT = pathlib.Path("runs/tiny")


def get_config() -> TrainConfig:
  from glance_jax import demo
  from glance_jax.data import export_task_file
  data = ROOT / "data"
  task = data / "synthetic_train.jsonl"
  if not task.exists():
    export_task_file("synthetic", data, "train", task)
  return TrainConfig(
      target=str(demo.default_checkpoint(ROOT)), target_dtype="float32", compute_dtype="float32",
      head_layers=2, block_size=16, task_files=(str(task),), regen_max_new_tokens=48, regen_batch_size=4,
      seq_len=192, max_patches=256, num_anchors=8, batch_size=4, steps=200, lr=3e-3, warmup_frac=0.04,
      mesh=(-1, 1, 1), workdir=str(ROOT), save_every=50, keep=2)
