"""tensorflow-datasets builders for the prompt tasks; build and read without TensorFlow.

Why TFDS at all: a prepared copy is a random-access ArrayRecord file per split (`as_data_source`),
so a multi-host training job indexes prompts by example number instead of re-parsing a large
annotation JSON on every host. Building and reading need `tensorflow-datasets` and `array_record`
but not TensorFlow: the features are Text and Sequence(Text) only (no tfds Image feature, whose
encoding from arrays and whose `tf.data` decoding need TF), and the file format is ArrayRecord
(the builders default to it: writing tfds' default TFRecord format needs TF). `as_dataset` /
`tfds.load`, which return `tf.data` pipelines, need TF and are not used.

Each builder reads a local copy of the official release (`manual_dir`, or `root=` given to the
constructor) through the TF-free readers in `readers.py`, so both paths give the same records in the
same order (shuffling is disabled). Image *paths* are stored, relative to that root (portable
with it, and no image bytes duplicated); `tfds_records` resolves them against the root it is given.
Features: id, task, prompt (Text); images, answers (Sequence(Text)). Splits: those of the task whose
annotation files exist in the root (names "train", "val", "test").
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any, ClassVar

import tensorflow_datasets as tfds

from glance_jax.data.records import OnError, PathLike, Problems, PromptRecord, images_problem, unique_ids
from glance_jax.data.tasks import TASKS, TFDS_NAMES, TFDS_VERSION, available_splits

_INSTRUCTIONS = ("Place the official release of the dataset, extracted, in the manual directory "
                 "(or pass root=...); the accepted layouts are listed in glance_jax/data/readers.py.")


class _PromptBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
  """Shared builder: one example per PromptRecord of the task's raw reader."""

  VERSION = tfds.core.Version(TFDS_VERSION)
  RELEASE_NOTES = {TFDS_VERSION: "Prompt records (paths relative to the root) from the official layout."}
  MANUAL_DOWNLOAD_INSTRUCTIONS = _INSTRUCTIONS
  TASK: ClassVar[str]

  def __init__(self, *, root: PathLike | None = None, on_error: OnError = "skip",
               verify_images: bool = False, **kwargs: Any):
    self._root = None if root is None else os.path.abspath(os.fspath(root))
    self._on_error = on_error
    self._verify_images = verify_images
    kwargs.setdefault("file_format", "array_record")  # tfrecord (tfds' default) needs TF to write
    super().__init__(**kwargs)

  def _info(self) -> tfds.core.DatasetInfo:
    text = tfds.features.Text()
    return tfds.core.DatasetInfo(
        builder=self,
        description=f"GLANCE prompt records for {self.TASK}.",
        features=tfds.features.FeaturesDict({
            "id": text, "task": text, "prompt": text,
            "images": tfds.features.Sequence(tfds.features.Text()),
            "answers": tfds.features.Sequence(tfds.features.Text()),
        }),
        disable_shuffling=True,  # same order as the raw reader, so `limit=N` picks the same prompts
    )

  def _resolve_root(self, dl_manager: tfds.download.DownloadManager) -> str:
    return self._root or os.path.abspath(os.fspath(dl_manager.manual_dir))

  def _split_generators(self, dl_manager: tfds.download.DownloadManager):
    root = self._resolve_root(dl_manager)
    splits = available_splits(self.TASK, root)
    if not splits:
      raise FileNotFoundError(f"{self.name}: no annotation files for any split under {root}; "
                              f"{_INSTRUCTIONS}")
    return {s: self._generate_examples(root, s) for s in splits}

  def _generate_examples(self, root: str, split: str) -> Iterator[tuple[str, dict[str, Any]]]:
    problems = Problems(f"{self.name}/{split}", self._on_error)
    records = TASKS[self.TASK](root, split, on_error=self._on_error, verify_images=self._verify_images)
    for r in unique_ids(records, problems):
      yield r.id, {"id": r.id, "task": r.task, "prompt": r.prompt,
                   "images": [os.path.relpath(p, root).replace(os.sep, "/") for p in r.images],
                   "answers": list(r.answers)}


class CocoCaption2017(_PromptBuilder):
  name = TFDS_NAMES["coco_caption"]
  TASK = "coco_caption"


class TextVqa(_PromptBuilder):
  name = TFDS_NAMES["textvqa"]
  TASK = "textvqa"


class DocVqa(_PromptBuilder):
  name = TFDS_NAMES["docvqa"]
  TASK = "docvqa"


class ChartQa(_PromptBuilder):
  name = TFDS_NAMES["chartqa"]
  TASK = "chartqa"


class InfoVqa(_PromptBuilder):
  name = TFDS_NAMES["infovqa"]
  TASK = "infovqa"


class SyntheticPrompts(_PromptBuilder):
  """Renders its images into `root` (default: <data_dir>/glance_synthetic_images); no manual dir."""

  name = TFDS_NAMES["synthetic"]
  TASK = "synthetic"
  MANUAL_DOWNLOAD_INSTRUCTIONS = None

  def _resolve_root(self, dl_manager: tfds.download.DownloadManager) -> str:
    return self._root or os.path.join(os.fspath(self.data_dir_root), "glance_synthetic_images")


BUILDERS: dict[str, type[_PromptBuilder]] = {
    b.TASK: b for b in (CocoCaption2017, TextVqa, DocVqa, ChartQa, InfoVqa, SyntheticPrompts)}


def prepare(task: str, root: PathLike, data_dir: PathLike, *, on_error: OnError = "skip",
            verify_images: bool = False) -> _PromptBuilder:
  """Builds the task's ArrayRecord copy under data_dir from the local release at root (no TF)."""
  builder = BUILDERS[task](root=root, data_dir=os.fspath(data_dir), on_error=on_error,
                           verify_images=verify_images)
  builder.download_and_prepare(file_format="array_record")
  return builder


def prepared_splits(task: str, data_dir: PathLike) -> tuple[str, ...]:
  return tuple(BUILDERS[task](data_dir=os.fspath(data_dir)).info.splits.keys())


def tfds_records(task: str, root: PathLike, split: str, data_dir: PathLike, *, limit: int | None = None,
                 on_error: OnError = "skip", verify_images: bool = False) -> list[PromptRecord]:
  """Reads a prepared split as PromptRecords, images resolved against root and re-checked."""
  root = os.path.abspath(os.fspath(root))
  source = BUILDERS[task](data_dir=os.fspath(data_dir)).as_data_source(split=split)
  problems = Problems(f"{os.fspath(data_dir)}/{TFDS_NAMES[task]}/{split}", on_error)
  out: list[PromptRecord] = []
  for i in range(len(source)):
    if limit is not None and len(out) >= limit:
      break
    ex = source[i]
    rid = _text(ex["id"])
    images = tuple(os.path.normpath(os.path.join(root, _text(p))) for p in ex["images"])
    msg = images_problem(images, verify_images)
    if msg:
      problems.report(rid, msg, at=i)
      continue
    out.append(PromptRecord(id=rid, task=_text(ex["task"]), split=split, prompt=_text(ex["prompt"]),
                            images=images, answers=tuple(_text(a) for a in ex["answers"])))
  problems.summarize(len(out) + problems.skipped)
  return out


def _text(x: bytes | str) -> str:
  return x.decode("utf-8") if isinstance(x, bytes) else str(x)
