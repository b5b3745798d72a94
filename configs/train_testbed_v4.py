"""The testbed v4 GLANCE head: v2's recipe (configs/train_testbed_v2.py) on suite v4's train
prompts, answered by the v4 target.

  python -m glance_jax.testbed.build --suite v4 --stages head   # sets target= and workdir= for you
  python train.py --config configs/train_testbed_v4.py
"""

import dataclasses
import importlib.util
import pathlib

from glance_jax.testbed import suite_v4
from glance_jax.train.config import TrainConfig

DATA = pathlib.Path("runs/testbed_v4/data")


def get_config() -> TrainConfig:
  spec = importlib.util.spec_from_file_location("train_testbed_v2", pathlib.Path(__file__).with_name("train_testbed_v2.py"))
  v2 = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(v2)
  return dataclasses.replace(
      v2.get_config(), target="runs/testbed_v4/testbed/target", workdir="runs/testbed_v4/head_run",
      task_files=tuple(str(DATA / f"{t}_train.jsonl") for t in suite_v4.TASKS))
