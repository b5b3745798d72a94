"""Tiny parent-correction run on CPU: a correction of a frozen head's marginals (drafter="parent",
train/parent_train.py) on configs/train_tiny.py's tiny target and rows.

  python train.py --config configs/train_tiny.py                 # first: the head (runs/tiny/head)
  python train.py --config configs/train_parent_tiny.py          # then its correction, a minute or two
  python decode.py bench --model runs/tiny/tiny-random-qwen3-vl --head runs/tiny/parent/head \
      --methods glance-63,glance-63[parent] ...

`root` (default runs/tiny) holds the tiny checkpoint, the synthetic task file and regen/ (the GLANCE
run's answers, reused); `head` (default <root>/head) is the frozen head; state goes to <root>/parent
and the head with its correction to <root>/parent/head.
"""

import pathlib

from glance_jax.train.config import TrainConfig


def get_config(root: str = "runs/tiny", head: str = "") -> TrainConfig:
  from glance_jax import demo
  from glance_jax.data import export_task_file
  root = pathlib.Path(root)
  task = root / "data" / "synthetic_train.jsonl"
  if not task.exists():
    export_task_file("synthetic", root / "data", "train", task)
  return TrainConfig(
      drafter="parent", head_init=head or str(root / "head"), parent_width=64, parent_rank=16,
      target=str(demo.default_checkpoint(root)), target_dtype="float32", compute_dtype="float32",
      task_files=(str(task),), regen_max_new_tokens=48, regen_batch_size=4, seq_len=192, max_patches=256,
      regen_dir=str(root / "regen"), workdir=str(root / "parent"), num_anchors=8,
      batch_size=4, steps=200, lr=3e-3, warmup_frac=0.04, mesh=(-1, 1, 1), save_every=50, keep=2)
