"""Prompt records, the JSONL task-file format, and per-record problem reporting.

A `PromptRecord` is one image+text prompt for the frozen target: training asks the target for its
greedy answer to it, and a benchmark times decoding it. Every dataset reader yields these, and a task
file is a list of them on disk, so training and benchmarks read one format whatever the source.

Task file (JSONL, UTF-8): one JSON object per line, one file per task and split. Keys:

  id       str, required   unique within the file (dataset's question / image id, as a string)
  task     str, required   e.g. "textvqa", "coco_caption" (see `glance_jax.data.TASKS`)
  split    str, required   "train", "val" or "test"
  prompt   str, required   the full user text, instruction included (`glance_jax.data.prompts`)
  images   [str], required image file paths, in prompt order (may be empty for a text-only prompt);
                           absolute, or relative to the task file's directory
  answers  [str], optional reference answers / captions; absent or [] when the split has none

Example line:
  {"id": "34602", "task": "textvqa", "split": "val", "prompt": "what is the brand?\\nAnswer the
   question using a single word or phrase.", "images": ["/data/textvqa/train_images/003a8.jpg"],
   "answers": ["nokia", "nokia"]}

Unknown keys are ignored (so later versions may add fields). Bad rows (invalid JSON, missing key,
wrong type, duplicate id, image file absent) are reported as `file:line: id ...: problem`, then
skipped with a logged warning (`on_error="skip"`) or raised as one-line `DataError`
(`on_error="raise"`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import uuid
from collections.abc import Iterable, Iterator
from typing import Any, Literal

import PIL.Image

logger = logging.getLogger(__name__)

OnError = Literal["skip", "raise"]
ON_ERROR_CHOICES = ("skip", "raise")
PathLike = str | os.PathLike


class DataError(ValueError):
  """A malformed record or annotation; the message is one line naming file, position and id."""


@dataclasses.dataclass(frozen=True)
class PromptRecord:
  """One prompt: `images` are absolute file paths in prompt order; `answers` are references, if any."""

  id: str
  task: str
  split: str
  prompt: str
  images: tuple[str, ...]
  answers: tuple[str, ...] = ()

  def __post_init__(self):
    # Accept lists (JSON) but store tuples, so records stay hashable and immutable.
    object.__setattr__(self, "images", tuple(self.images))
    object.__setattr__(self, "answers", tuple(self.answers))

  def to_json(self) -> dict[str, Any]:
    return {"id": self.id, "task": self.task, "split": self.split, "prompt": self.prompt,
            "images": list(self.images), "answers": list(self.answers)}


class Problems:
  """Reports per-record problems by id: raise the first, or log each and count the skips.

  Why a class: every reader (annotation files, task files, TFDS) must word and count problems the
  same way, and a long run that skips thousands of rows should end with one summary line.
  """

  def __init__(self, source: PathLike, on_error: OnError = "skip"):
    if on_error not in ON_ERROR_CHOICES:
      raise ValueError(f"on_error must be one of {ON_ERROR_CHOICES}, got {on_error!r}")
    self.source = os.fspath(source)
    self.on_error = on_error
    self.skipped = 0

  def report(self, record_id: Any, message: str, *, at: str | int | None = None) -> None:
    """One bad record: raises `DataError` under "raise", else logs a warning and counts it."""
    where = self.source if at is None else f"{self.source}:{at}"
    text = f"{where}: id {'?' if record_id is None else repr(str(record_id))}: {message}"
    if self.on_error == "raise":
      raise DataError(text)
    self.skipped += 1
    logger.warning("%s; skipped", text)

  def summarize(self, total: int, what: str = "records") -> None:
    if self.skipped:
      logger.warning("%s: skipped %d of %d %s (see warnings above)", self.source, self.skipped, total, what)


def image_problem(path: str, verify: bool = False) -> str | None:
  """Why `path` is not a usable image (None when it is). `verify` also parses the header with PIL.

  Existence is always checked (cheap); `verify=True` opens the file with PIL and runs `verify()`,
  which catches truncated or non-image files without decoding pixels.
  """
  if not os.path.isfile(path):
    return f"image file not found: {path}"
  if verify:
    try:
      with PIL.Image.open(path) as im:
        im.verify()
    except Exception as e:  # PIL raises many types for bad files; all mean the same here.
      return f"not a readable image: {path} ({type(e).__name__}: {e})"
  return None


def images_problem(paths: Iterable[str], verify: bool = False) -> str | None:
  """The first of `paths` that is not a usable image, as a message (None when all are)."""
  return next((m for m in (image_problem(p, verify) for p in paths) if m), None)


def unique_ids(records: Iterable[PromptRecord], problems: Problems) -> Iterator[PromptRecord]:
  """Drops (or raises on) records whose id repeats an earlier one: ids key results and TFDS examples."""
  seen: set[str] = set()
  for r in records:
    if r.id in seen:
      problems.report(r.id, "duplicate id")
      continue
    seen.add(r.id)
    yield r


def write_task_file(records: Iterable[PromptRecord], path: PathLike, *, relative: bool = False) -> int:
  """Writes records as JSONL atomically (temp file + rename); returns the number written.

  `relative=True` stores image paths relative to the file's directory, so a task file shipped next
  to its images stays valid when the directory moves. Atomic so a crashed export never leaves a
  truncated file that a benchmark would silently read as a shorter task.
  """
  path = os.fspath(path)
  base = os.path.dirname(os.path.abspath(path))
  os.makedirs(base, exist_ok=True)
  tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
  n = 0
  try:
    with open(tmp, "w", encoding="utf-8") as f:
      for r in records:
        row = r.to_json()
        if relative:
          row["images"] = [os.path.relpath(p, base) for p in r.images]
        f.write(json.dumps(row, ensure_ascii=False) + "\n")
        n += 1
    os.replace(tmp, path)
  finally:
    if os.path.exists(tmp):
      os.remove(tmp)
  return n


_REQUIRED = ("id", "task", "split", "prompt", "images")


def _row_problem(row: Any) -> str | None:
  """Schema check of one parsed row; None when valid."""
  if not isinstance(row, dict):
    return f"expected a JSON object, got {type(row).__name__}"
  missing = [k for k in _REQUIRED if k not in row]
  if missing:
    return f"missing key(s) {', '.join(missing)}"
  for k in ("id", "task", "split", "prompt"):
    if not isinstance(row[k], str):
      return f"{k!r} must be a string, got {type(row[k]).__name__}"
  for k in ("images", "answers"):
    v = row.get(k, [])
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
      return f"{k!r} must be a list of strings"
  if any(not p for p in row["images"]):
    return "'images' holds an empty path"
  return None


def read_task_file(path: PathLike, *, on_error: OnError = "skip",
                   verify_images: bool = False) -> list[PromptRecord]:
  """Reads and validates a JSONL task file (schema in this module's docstring).

  Relative image paths resolve against the file's directory. Problems are reported as
  `file:line: id 'x': problem` and skipped or raised per `on_error`; a missing file raises
  FileNotFoundError whatever `on_error` says (there is nothing to skip to).
  """
  path = os.fspath(path)
  base = os.path.dirname(os.path.abspath(path))
  problems = Problems(path, on_error)
  out: list[PromptRecord] = []
  seen: set[str] = set()
  total = 0
  with open(path, encoding="utf-8") as f:
    for lineno, line in enumerate(f, start=1):
      if not line.strip():
        continue
      total += 1
      try:
        row = json.loads(line)
      except json.JSONDecodeError as e:
        problems.report(None, f"invalid JSON ({e.msg} at column {e.colno})", at=lineno)
        continue
      rid = row.get("id") if isinstance(row, dict) else None
      msg = _row_problem(row)
      if msg is None and rid in seen:
        msg = "duplicate id"
      if msg is None:
        images = tuple(os.path.normpath(os.path.join(base, p)) for p in row["images"])
        msg = images_problem(images, verify_images)
      if msg is not None:
        problems.report(rid, msg, at=lineno)
        continue
      seen.add(rid)
      out.append(PromptRecord(id=rid, task=row["task"], split=row["split"], prompt=row["prompt"],
                              images=images, answers=tuple(row.get("answers", ()))))
  problems.summarize(total)
  return out
