"""Prompt data: image+question prompts from local copies of the official datasets, as PromptRecords.

  TASKS / SPLITS                 task name -> raw reader / splits it can have
  load_records(task, root, split, limit=, on_error=, data_dir=)  -> list[PromptRecord]
  export_task_file(task, root, split, out_path, limit=)          -> JSONL task file (records.py)
  read_task_file(path, on_error=) / write_task_file(records, path)
  prepare_tfds(task, root, data_dir=)                            -> ArrayRecord copy (needs
                                                                    tensorflow-datasets, not TF)

Two equivalent paths: the raw readers (json + PIL, always available) and a prepared TFDS copy
(random access for multi-host training). `load_records` prefers the TFDS copy when one is prepared
under `data_dir` (default <root>/_tfds) for that split, else reads the annotation files.
"""

from __future__ import annotations

import itertools
import logging
import os

from glance_jax.data.prompts import CAPTION_PROMPT, VQA_INSTRUCTION, caption_prompt, vqa_prompt
from glance_jax.data.readers import (
    read_chartqa, read_coco, read_docvqa, read_infovqa, read_textvqa)
from glance_jax.data.records import (
    DataError, OnError, PathLike, Problems, PromptRecord, read_task_file, unique_ids, write_task_file)
from glance_jax.data.synthetic import read_synthetic, render_synthetic
from glance_jax.data.tasks import (
    SPLITS, TASKS, TFDS_NAMES, available_splits, default_tfds_dir, normalize_split, tfds_prepared)

logger = logging.getLogger(__name__)


def _tfds_split_ready(task: str, split: str, data_dir: str) -> bool:
  """A prepared TFDS copy holds this split and tensorflow-datasets is importable."""
  if not tfds_prepared(task, data_dir):
    return False
  try:
    from glance_jax.data import tfds_builders
  except ImportError as e:  # prepared elsewhere, but this environment lacks tensorflow-datasets
    logger.info("TFDS copy under %s not used (%s); reading annotation files", data_dir, e)
    return False
  return split in tfds_builders.prepared_splits(task, data_dir)


def load_records(task: str, root: PathLike, split: str, *, limit: int | None = None,
                 on_error: OnError = "skip", data_dir: PathLike | None = None,
                 verify_images: bool = False) -> list[PromptRecord]:
  """The first `limit` usable records of a task split (all when None), in annotation order.

  Bad records are reported by id and skipped or raised per `on_error`; duplicate ids are bad
  records too (ids key training examples and benchmark results). A TFDS copy holds the records
  that passed when it was prepared; reading it re-checks only that the images still exist.
  """
  split = normalize_split(task, split)
  data_dir = os.fspath(data_dir) if data_dir is not None else default_tfds_dir(root)
  if _tfds_split_ready(task, split, data_dir):
    from glance_jax.data import tfds_builders
    return tfds_builders.tfds_records(task, root, split, data_dir, limit=limit, on_error=on_error,
                                      verify_images=verify_images)
  problems = Problems(f"{task}/{split}", on_error)
  records = TASKS[task](root, split, on_error=on_error, verify_images=verify_images)
  return list(itertools.islice(unique_ids(records, problems), limit))


def export_task_file(task: str, root: PathLike, split: str, out_path: PathLike, *,
                     limit: int | None = None, on_error: OnError = "skip",
                     data_dir: PathLike | None = None, relative: bool = False) -> int:
  """Writes `load_records(...)` as a JSONL task file (atomic); returns the number of records."""
  records = load_records(task, root, split, limit=limit, on_error=on_error, data_dir=data_dir)
  return write_task_file(records, out_path, relative=relative)


def prepare_tfds(task: str, root: PathLike, *, data_dir: PathLike | None = None,
                 on_error: OnError = "skip", verify_images: bool = False):
  """Builds the task's TFDS ArrayRecord copy (default under <root>/_tfds); returns the builder.

  Needs tensorflow-datasets and array_record, not TensorFlow.
  """
  from glance_jax.data import tfds_builders
  from glance_jax.data.tasks import check_task
  check_task(task)
  data_dir = os.fspath(data_dir) if data_dir is not None else default_tfds_dir(root)
  return tfds_builders.prepare(task, root, data_dir, on_error=on_error, verify_images=verify_images)


__all__ = [
    "CAPTION_PROMPT", "VQA_INSTRUCTION", "caption_prompt", "vqa_prompt",
    "DataError", "PromptRecord", "read_task_file", "write_task_file",
    "read_coco", "read_textvqa", "read_docvqa", "read_chartqa", "read_infovqa",
    "read_synthetic", "render_synthetic",
    "SPLITS", "TASKS", "TFDS_NAMES", "available_splits", "normalize_split",
    "load_records", "export_task_file", "prepare_tfds",
]
