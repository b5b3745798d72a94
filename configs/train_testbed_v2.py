"""The testbed v2 GLANCE head (issue 14): v1's recipe (configs/train_testbed.py) on suite v2's
train prompts, answered by the v2 target.

  python -m glance_jax.testbed.build --suite v2 --stages head   # sets target= and workdir= for you
  python train.py --config configs/train_testbed_v2.py
"""

import dataclasses
import importlib.util
import pathlib

from glance_jax.testbed import suite_v2
from glance_jax.train.config import TrainConfig

DATA = pathlib.Path("runs/testbed_v2/data")


def _v1() -> TrainConfig:
  spec = importlib.util.spec_from_file_location("train_testbed_v1", pathlib.Path(__file__).with_name("train_testbed.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config()


def get_config() -> TrainConfig:
  return dataclasses.replace(
      _v1(), target="runs/testbed_v2/testbed/target", workdir="runs/testbed_v2/head_run",
      task_files=tuple(str(DATA / f"{t}_train.jsonl") for t in suite_v2.TASKS))
