"""The testbed's parent correction: a correction of the shipped GLANCE head's marginals (frozen),
trained on the target's GREEDY answers to the head's train prompts (its own rows, regenerated at
T = 0 into <build workdir>/parent_regen), with the head's suite, target and seq_len
(configs/train_testbed.py).

Why greedy rows when the head learned from drawn ones (T = 1, top-p 0.9): the head's marginals
should carry the target's uncertainty at its forks (the entropy law reads them), but at T = 0 the
tree has to hold the target's greedy choice, tie-breaks included, and a correction fitted to drawn
rows learns the forks' spread instead (measured on the shipped pair, docs/rounds.md: tau at
N = 63 +19-32% on the grounded tasks and -5% on the caption from drawn rows, +46-62% and +21% from
greedy ones). The tree stays lossless at any temperature (the verify decides); a user decoding at
T > 0 would fit it on drawn rows (regen_temperature=1).

  python train.py --config configs/train_testbed.py              # first: the head
  python train.py --config configs/train_parent_testbed.py       # then its correction
  python train.py --config configs/train_parent_testbed.py suite=v5 head_init=runs/testbed_v5/testbed/head

The head with its correction is exported to <workdir>/head (workdir: the build's parent_run); the
build copies parent_correction.{json,safetensors} beside the testbed head. Width 256, rank 32 (the
vocabulary is 512), the path term on (head/parent_correction.py); lr 1e-3, 600 steps.
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
      base, drafter="parent", head_init=str(out / "head"), regen_dir=str(glance_run.with_name("parent_regen")),
      regen_temperature=0.0, regen_top_p=1.0, regen_top_k=0,
      workdir=str(glance_run.with_name("parent_run")), parent_width=256, parent_rank=32, parent_path=True,
      steps=600, lr=1e-3, warmup_frac=0.04, save_every=200)
