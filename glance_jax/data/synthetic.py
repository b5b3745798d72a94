"""A tiny synthetic prompt set: PIL-rendered shapes plus caption / VQA prompts, for tests and demos.

Why: every other task needs gigabytes of images that tests cannot download; this one renders its few
images into `root` on first use (deterministically, so a second call reuses them) and exercises the
same record, task-file and TFDS paths, including a two-image prompt.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import PIL.Image
import PIL.ImageDraw

from glance_jax.data.prompts import caption_prompt, vqa_prompt
from glance_jax.data.records import OnError, PathLike, Problems, PromptRecord, images_problem

SPLITS = ("train", "val")
SIZES = {"train": 4, "val": 2}
_COLORS = {"red": (220, 40, 40), "green": (40, 170, 60), "blue": (40, 70, 220), "yellow": (230, 200, 30)}
_SHAPES = ("square", "circle")
IMAGE_SIZE = (96, 64)  # (width, height): small, and not square, to exercise resizing


def _render(path: str, color: str, shape: str) -> None:
  image = PIL.Image.new("RGB", IMAGE_SIZE, (255, 255, 255))
  draw = PIL.ImageDraw.Draw(image)
  box = (28, 12, 68, 52)
  if shape == "square":
    draw.rectangle(box, fill=_COLORS[color])
  else:
    draw.ellipse(box, fill=_COLORS[color])
  tmp = f"{path}.tmp.png"
  image.save(tmp, format="PNG")
  os.replace(tmp, path)  # a concurrent reader never sees half an image


def _spec(split: str, i: int) -> tuple[str, str]:
  colors = list(_COLORS)
  offset = 0 if split == "train" else 1
  return colors[(i + offset) % len(colors)], _SHAPES[(i + offset) % len(_SHAPES)]


def render_synthetic(root: PathLike, split: str) -> list[str]:
  """Renders (if absent) the split's images under root/synthetic/<split>/; returns their paths."""
  if split not in SPLITS:
    raise ValueError(f"synthetic: unknown split {split!r}; expected one of {SPLITS}")
  out_dir = os.path.join(os.path.abspath(os.fspath(root)), "synthetic", split)
  os.makedirs(out_dir, exist_ok=True)
  paths = []
  for i in range(SIZES[split]):
    color, shape = _spec(split, i)
    path = os.path.join(out_dir, f"{i:03d}_{color}_{shape}.png")
    if not os.path.isfile(path):
      _render(path, color, shape)
    paths.append(path)
  return paths


def read_synthetic(root: PathLike, split: str, *, on_error: OnError = "skip",
                   verify_images: bool = False) -> Iterator[PromptRecord]:
  """Even indices: caption prompts; odd: "What color is the <shape>?"; the last train record has
  two images and asks whether the shapes share a color."""
  paths = render_synthetic(root, split)
  problems = Problems(os.path.join(os.fspath(root), "synthetic", split), on_error)
  records = []
  for i, path in enumerate(paths):
    color, shape = _spec(split, i)
    if i % 2 == 0:
      prompt, answers = caption_prompt(), (f"A {color} {shape} on a white background.",)
    else:
      prompt, answers = vqa_prompt(f"What color is the {shape}?"), (color,)
    records.append(PromptRecord(id=f"{split}-{i}", task="synthetic", split=split, prompt=prompt,
                                images=(path,), answers=answers))
  if split == "train":
    (c0, _), (c1, _) = _spec(split, 0), _spec(split, 1)
    records.append(PromptRecord(
        id=f"{split}-pair", task="synthetic", split=split,
        prompt=vqa_prompt("Are the shapes in the two images the same color?"),
        images=(paths[0], paths[1]), answers=("yes" if c0 == c1 else "no",)))
  for r in records:
    msg = images_problem(r.images, verify_images)
    if msg:
      problems.report(r.id, msg)
      continue
    yield r
  problems.summarize(len(records))
