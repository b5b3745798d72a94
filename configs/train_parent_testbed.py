"""The testbed's parent correction: a correction of the shipped GLANCE head's marginals (frozen) on
the head's own regenerated rows (its head_run/regen), suite, target and seq_len
(configs/train_testbed.py).

  python train.py --config configs/train_testbed.py              # first: the head (makes the rows)
  python train.py --config configs/train_parent_testbed.py       # then its correction
  python train.py --config configs/train_parent_testbed.py suite=v5 head_init=runs/testbed_v5/testbed/head

The head with its correction is exported to <workdir>/head (workdir: the build's parent_run); the
build copies parent_correction.{json,safetensors} beside the testbed head. Width 256, rank 32 (the
vocabulary is 512); lr 1e-3.
"""

import dataclasses
import pathlib

from glance_jax.testbed import build, suites
from glance_jax.train.config import TrainConfig, load_config


def get_config(suite: str = suites.DEFAULT) -> TrainConfig:
  base = load_config(pathlib.Path(__file__).with_name("train_testbed.py"), [f"suite={suite}"])
  glance_run = pathlib.Path(base.workdir)
  out, _ = build.default_dirs(suite)
  return dataclasses.replace(
      base, drafter="parent", head_init=str(out / "head"), regen_dir=str(glance_run / "regen"),
      workdir=str(glance_run.with_name("parent_run")), parent_width=256, parent_rank=32,
      steps=600, lr=1e-3, warmup_frac=0.04, save_every=200)
