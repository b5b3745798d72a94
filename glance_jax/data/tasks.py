"""The task registry: task name -> reader, splits, TFDS builder name; free of TFDS imports.

Why separate from `tfds_builders.py`: deciding whether a TFDS copy is prepared, or which splits a
local copy holds, must not import tensorflow_datasets (a second of start-up, and optional).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

from glance_jax.data import readers, synthetic
from glance_jax.data.records import PathLike, PromptRecord

Reader = Callable[..., Iterator[PromptRecord]]

TASKS: dict[str, Reader] = {
    "coco_caption": readers.read_coco,
    "textvqa": readers.read_textvqa,
    "docvqa": readers.read_docvqa,
    "chartqa": readers.read_chartqa,
    "infovqa": readers.read_infovqa,
    "synthetic": synthetic.read_synthetic,
}
SPLITS: dict[str, tuple[str, ...]] = {**readers.SPLITS, "synthetic": synthetic.SPLITS}
SPLIT_ALIASES = {"validation": "val", "valid": "val", "dev": "val"}

TFDS_NAMES = {task: f"glance_{task}" for task in TASKS}
TFDS_VERSION = "1.0.0"
TFDS_SUBDIR = "_tfds"


def check_task(task: str) -> None:
  if task not in TASKS:
    raise ValueError(f"unknown task {task!r}; expected one of {sorted(TASKS)}")


def normalize_split(task: str, split: str) -> str:
  """"validation" and friends -> "val"; raises on a split the task does not have."""
  check_task(task)
  s = SPLIT_ALIASES.get(split, split)
  if s not in SPLITS[task]:
    raise ValueError(f"{task}: unknown split {split!r}; expected one of {SPLITS[task]}")
  return s


def available_splits(task: str, root: PathLike) -> tuple[str, ...]:
  """The splits whose annotation files exist under root (all splits for "synthetic")."""
  check_task(task)
  if task == "synthetic":
    return SPLITS[task]
  found = []
  for s in SPLITS[task]:
    try:
      readers.LOCATORS[task](root, s)
      found.append(s)
    except FileNotFoundError:
      pass
  return tuple(found)


def default_tfds_dir(root: PathLike) -> str:
  """Where `prepare_tfds` writes and `load_records` looks by default: <root>/_tfds."""
  return os.path.join(os.path.abspath(os.fspath(root)), TFDS_SUBDIR)


def tfds_prepared(task: str, data_dir: PathLike) -> bool:
  """Whether a TFDS copy of `task` was prepared under data_dir (file check only, no TFDS import)."""
  return os.path.isfile(os.path.join(os.fspath(data_dir), TFDS_NAMES[task], TFDS_VERSION,
                                     "dataset_info.json"))
