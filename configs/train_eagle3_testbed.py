"""The testbed's EAGLE-3 rival: the GLANCE testbed head's suite, target, task files, regenerated rows
(its head_run/regen, reused) and seq_len (configs/train_testbed.py), with SpecForge's EAGLE-3 recipe
scaled to a tiny model.

  python train.py --config configs/train_testbed.py             # first: the GLANCE head (makes the rows)
  python train.py --config configs/train_eagle3_testbed.py      # then the rival on the same rows
  python train.py --config configs/train_eagle3_testbed.py suite=v5 steps=500

Width, heads and rope are the target's (eagle3_train.head_config). The draft vocabulary is the whole
target vocabulary (512 < the 32000 default, which is capped there). Taps: EAGLE-3's default
(1, L//2 - 1, L - 4) degenerates to (1, 1, 0) on the 4-layer target, so low / mid / top instead,
like the GLANCE head's taps (1, 3). lr 1e-3 (SpecForge's 1e-4 is for 8B), 10 epochs, clip 0.5,
warmup 1.5% (SpecForge's train_eagle3.py defaults).
"""

import dataclasses
import pathlib

from glance_jax.testbed import suites
from glance_jax.train.config import TrainConfig, load_config


def get_config(suite: str = suites.DEFAULT) -> TrainConfig:
  base = load_config(pathlib.Path(__file__).with_name("train_testbed.py"), [f"suite={suite}"])
  glance_run = pathlib.Path(base.workdir)
  return dataclasses.replace(
      base, drafter="eagle3", regen_dir=str(glance_run / "regen"), workdir=str(glance_run.with_name("eagle3_run")),
      eagle3_draft_vocab=32000, eagle3_ttt_steps=7, eagle3_decay=0.8, eagle3_layers=1, eagle3_aux_layer_ids=(1, 2, 3),
      steps=None, epochs=10, lr=1e-3, warmup_frac=0.015, clip=0.5, weight_decay=0.0)
