"""What every testbed suite version shares: records as pure functions of (task, split, index), the
one rule that keeps held-out prompts out of training, and task files of PNGs + JSONL.

A suite version (suite_v4.py, ...) gives, per task, a *scene* function (the content, drawn from the
record's generator: pure data), a drawing and an answer function, and the seed salt of each task;
`Stream` turns them into records:

  record(task, "heldout", i)  draw i of the held-out stream, for i < HELDOUT_RESERVED;
  record(task, "train", i)    the first of draws i, i + OFFSET, i + 2 OFFSET, ... of the train stream
                              whose scene (the content, styling aside) is not among the first
                              HELDOUT_RESERVED held-out scenes.

The target's batches and the head's train prompts both read `train_record`, so they agree on what is
excluded, and any prefix of the reserved held-out records may be shipped.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
from typing import Any, Callable

import numpy as np
import PIL.Image
import PIL.ImageDraw
import PIL.ImageFont

from glance_jax.data.records import PromptRecord, write_task_file

SPLITS = ("train", "heldout")
HELDOUT_RESERVED = 64         # held-out indices 0..63 are never trained on (ship any prefix of them)
OFFSET = 10_000_000           # a colliding train index i is redrawn at i + k OFFSET


def salted_rng(salt: str, task: str, split: str, index: int) -> np.random.Generator:
  """A record's generator: seeded by (hash of "<salt>/<task>/<split>", index)."""
  key = int.from_bytes(hashlib.sha256(f"{salt}/{task}/{split}".encode()).digest()[:4], "little")
  return np.random.default_rng([key, index])


@functools.lru_cache(maxsize=None)
def font(size: int = 15):
  # Pillow's built-in scalable font (Pillow >= 10.1 with FreeType): the same glyphs on every machine.
  return PIL.ImageFont.load_default(size=size)


def canvas(size: tuple[int, int]):
  """A white RGB image of (width, height) and its drawing context."""
  image = PIL.Image.new("RGB", size, (255, 255, 255))
  return image, PIL.ImageDraw.Draw(image)


def draw_shape(draw, kind: str, box, color) -> None:
  """A filled circle, square or (upward) triangle inside `box` = (x0, y0, x1, y1)."""
  x0, y0, x1, y1 = box
  if kind == "circle":
    draw.ellipse(box, fill=color)
  elif kind == "square":
    draw.rectangle(box, fill=color)
  else:
    draw.polygon([((x0 + x1) // 2, y0), (x1, y1), (x0, y1)], fill=color)


@dataclasses.dataclass(frozen=True)
class Scene:
  """What a record shows: `content` (the scene key, styling aside), `fields` (the answer's units in
  reading order, e.g. "pens: 42", "A is 3", a word, "red circle") and per field whether it
  can be read for sure (`clear`), plus how the image is drawn (`draw`: task-specific)."""
  task: str
  content: tuple
  fields: tuple[str, ...]
  clear: tuple[bool, ...]
  draw: Any


@dataclasses.dataclass(frozen=True, eq=False)
class Stream:
  """A suite version's records. Per task: `questions[task]` (the prompt), `scene[task](rng) -> Scene`,
  `draw[task](scene, rng) -> image`, `salts[task]` (its seed streams' salt), and one
  `answer(scene, rng) -> str` (the reference, sampled where the answer is open)."""
  version: str
  questions: dict[str, str]
  scene: dict[str, Callable]
  draw: dict[str, Callable]
  answer: Callable
  salts: dict[str, str]

  @property
  def tasks(self) -> tuple[str, ...]:
    return tuple(self.scene)

  def check(self, task: str, split: str) -> None:
    if task not in self.scene:
      raise ValueError(f"unknown testbed task {task!r}; expected one of {self.tasks}")
    if split not in SPLITS:
      raise ValueError(f"unknown testbed split {split!r}; expected one of {SPLITS}")

  def rng(self, task: str, split: str, index: int) -> np.random.Generator:
    return salted_rng(self.salts[task], task, split, index)

  def draw_record(self, task: str, split: str, index: int) -> tuple[Scene, PIL.Image.Image, str]:
    """-> (scene, image, answer) of stream index `index` (no held-out exclusion: see record)."""
    self.check(task, split)
    rng = self.rng(task, split, index)
    scene = self.scene[task](rng)
    image = self.draw[task](scene, rng)
    return scene, image, self.answer(scene, rng)

  @functools.lru_cache(maxsize=None)
  def reserved_scenes(self, task: str) -> frozenset:
    """The scene keys of held-out records 0..HELDOUT_RESERVED-1 (scenes only: cheap, no image)."""
    return frozenset(self.scene[task](self.rng(task, "heldout", i)).content for i in range(HELDOUT_RESERVED))

  def train_index(self, task: str, index: int) -> int:
    k = 0
    while self.scene[task](self.rng(task, "train", index + k * OFFSET)).content in self.reserved_scenes(task):
      k += 1
    return index + k * OFFSET

  def record(self, task: str, split: str, index: int) -> tuple[Scene, PIL.Image.Image, str]:
    """-> (scene, image, answer) of a record: held-out index i as drawn; train index i the first of
    draws i, i + OFFSET, ... whose scene is not a reserved held-out scene (the one exclusion rule)."""
    self.check(task, split)
    if split == "heldout" and not 0 <= index < HELDOUT_RESERVED:
      raise ValueError(f"held-out index {index} outside the reserved 0..{HELDOUT_RESERVED - 1}")
    return self.draw_record(task, split, self.train_index(task, index) if split == "train" else index)

  def render(self, task: str, split: str, index: int) -> tuple[PIL.Image.Image, str, str]:
    """-> (image, question, answer) of one record; deterministic in its arguments."""
    _, image, answer = self.record(task, split, index)
    return image, self.questions[task], answer

  def train_record(self, task: str, index: int) -> tuple[PIL.Image.Image, str, str]:
    """The train stream's record `index`: what the target's batches and the head's prompts read."""
    return self.render(task, "train", index)

  def write_task(self, task: str, split: str, count: int, out_dir: str | os.PathLike, *, start: int = 0) -> str:
    """Renders records start..start+count-1 of a task split as PNGs + a JSONL task file (relative
    image paths); an existing PNG is kept, so an interrupted write resumes. Returns the file's path."""
    return write_samples(task, split, ((i, *self.render(task, split, i)) for i in range(start, start + count)),
                         out_dir)


def write_samples(task: str, split: str, samples, out_dir: str | os.PathLike) -> str:
  """samples: (index, image, question, answer) -> PNGs (an existing PNG is kept) + `<task>_<split>.jsonl`
  with relative image paths, so the directory can move or ship in the repo; returns its path."""
  out_dir = os.fspath(out_dir)
  img_dir = os.path.join(out_dir, "images", f"{task}_{split}")
  os.makedirs(img_dir, exist_ok=True)
  records = []
  for i, image, question, answer in samples:
    path = os.path.join(img_dir, f"{i:05d}.png")
    if not os.path.isfile(path):
      tmp = f"{path}.tmp.png"
      image.save(tmp, format="PNG", optimize=True)
      os.replace(tmp, path)
    records.append(PromptRecord(id=f"{task}-{split}-{i}", task=task, split=split, prompt=question,
                                images=(path,), answers=(answer,)))
  path = os.path.join(out_dir, f"{task}_{split}.jsonl")
  write_task_file(records, path, relative=True)
  return path


def record_index(record_id: str) -> int:
  """The stream index of a task-file id "<task>-<split>-<index>"."""
  try:
    return int(record_id.rsplit("-", 1)[1])
  except (IndexError, ValueError):
    raise ValueError(f"record id {record_id!r} is not '<task>-<split>-<index>'") from None
