"""Tiny EAGLE-3 run on CPU: the rival head on configs/train_tiny.py's tiny target and rows (its
regen/ is reused when both run under the same root: the GLANCE tiny run's answers, made once).

  python train.py --config configs/train_eagle3_tiny.py             # a minute or two on 2 cores
  python train.py --config configs/train_eagle3_tiny.py steps=20 root=/tmp/tiny
  python decode.py --model runs/tiny/tiny-random-qwen3-vl --method eagle3-chain --head runs/tiny/eagle3/eagle3_head

`root` (default runs/tiny, train_tiny.py's workdir) holds the tiny checkpoint, the synthetic task
file and regen/; this run's state goes to <root>/eagle3.
"""

import pathlib

from glance_jax.train.config import TrainConfig


def get_config(root: str = "runs/tiny") -> TrainConfig:
  from glance_jax import demo
  from glance_jax.data import export_task_file
  root = pathlib.Path(root)
  task = root / "data" / "synthetic_train.jsonl"
  if not task.exists():
    export_task_file("synthetic", root / "data", "train", task)
  return TrainConfig(
      drafter="eagle3", target=str(demo.default_checkpoint(root)), target_dtype="float32", compute_dtype="float32",
      task_files=(str(task),), regen_max_new_tokens=48, regen_batch_size=4, seq_len=192, max_patches=256,
      regen_dir=str(root / "regen"), workdir=str(root / "eagle3"),
      # K < the tiny vocabulary (512): the draft -> target id map is not the identity
      eagle3_draft_vocab=64, eagle3_ttt_steps=7, eagle3_decay=0.8, eagle3_layers=1,
      batch_size=4, steps=200, lr=3e-3, warmup_frac=0.04, clip=0.5, mesh=(-1, 1, 1), save_every=50, keep=2)
