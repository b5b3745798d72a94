"""The testbed's synthetic task suite: PIL-rendered images whose questions have grounded or open answers.

Grounded tasks (the answer is read off the image, one right answer):
  table    a document of 6 labelled values ("pens  42"): "pens: 42; cups: 17; hats: 88; ..."
  chart    a bar chart of 6 bars labelled with letters, heights 1-9: "A is 3, F is 7, C is 5, ..."
  lines    4 lines of 3 words to transcribe: "red fox big\\nsun old map\\n..."
Open task (many valid answers):
  caption  2-3 coloured shapes; captions drawn from several phrasings and mention orders, so the
           target learns a distribution, not one string (high entropy where phrasings fork).

Image sides are multiples of 32 (patch 16 x merge 2) inside the processor's pixel bounds, so no
image is resized: table 128x192 (w x h) and chart / lines 192x128 give 24 merged image tokens,
caption 128x128 gives 16. Layouts sit on the 32-pixel merge grid so
that a small vision tower trained for minutes on a CPU can read them. A record is a pure function
of (task, split, index): "train" and "heldout" draw from different seed streams, and a train record
whose answer equals a held-out answer is skipped, so held-out prompts are never trained on.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator

import numpy as np
import PIL.Image
import PIL.ImageDraw
import PIL.ImageFont

from glance_jax.data.records import PromptRecord, write_task_file

SIZES = {"table": (128, 192), "chart": (192, 128), "lines": (192, 128), "caption": (128, 128)}  # (w, h)
GROUNDED = ("table", "chart", "lines")
OPEN = ("caption",)
TASKS = GROUNDED + OPEN
SPLITS = ("train", "heldout")

QUESTIONS = {
    "table": "Read the table.",
    "chart": "What are the values of the bars?",
    "lines": "Transcribe the text.",
    "caption": "Describe the image.",
}

ITEMS = ("pens", "cups", "hats", "keys", "maps", "bags", "lamps", "books", "coins", "shoes", "rings",
         "boxes")
LETTERS = tuple("ABCDEFGH")
WORDS = ("red", "fox", "big", "sun", "old", "map", "cold", "tea", "blue", "sky", "wet", "dog", "hot",
         "pan", "dark", "sea", "tall", "tree", "fast", "car", "soft", "bed", "low", "hill")
COLORS = {"red": (215, 40, 40), "green": (40, 160, 60), "blue": (40, 70, 215), "yellow": (225, 190, 20),
          "purple": (140, 50, 170), "orange": (240, 130, 20)}
SHAPES = ("circle", "square", "triangle")
CAPTIONS = ("{list}.", "There is {list}.", "The image shows {list}.", "I can see {list} on a white background.",
            "This picture has {list}.", "A white background with {list}.")

_FONT_SIZE = 15


def _font():
  # Pillow's built-in scalable font (Pillow >= 10.1 with FreeType): the same glyphs on every machine.
  return PIL.ImageFont.load_default(size=_FONT_SIZE)


def _rng(task: str, split: str, index: int) -> np.random.Generator:
  salt = int.from_bytes(hashlib.sha256(f"{task}/{split}".encode()).digest()[:4], "little")
  return np.random.default_rng([salt, index])


def _canvas(task: str):
  image = PIL.Image.new("RGB", SIZES[task], (255, 255, 255))
  return image, PIL.ImageDraw.Draw(image)


def _table(rng):
  items = rng.choice(len(ITEMS), 6, replace=False)
  values = rng.integers(1, 100, 6)
  image, draw = _canvas("table")
  font = _font()
  for row, (i, v) in enumerate(zip(items, values)):
    y = 32 * row + 8
    draw.text((4, y), ITEMS[i], fill=(0, 0, 0), font=font)
    draw.text((124, y), str(v), fill=(0, 0, 0), font=font, anchor="ra")
    draw.line((0, 32 * row + 31, 128, 32 * row + 31), fill=(160, 160, 160))
  answer = "; ".join(f"{ITEMS[i]}: {v}" for i, v in zip(items, values)) + "."
  return image, answer


def _chart(rng):
  letters = rng.choice(len(LETTERS), 6, replace=False)
  heights = rng.integers(1, 10, 6)
  image, draw = _canvas("chart")
  font = _font()
  base = 108
  for col, (l, h) in enumerate(zip(letters, heights)):
    x = 32 * col
    draw.rectangle((x + 8, base - 11 * int(h), x + 24, base), fill=(60, 90, 200))
    draw.text((x + 16, 110), LETTERS[l], fill=(0, 0, 0), font=font, anchor="ma")
  draw.line((0, base, 192, base), fill=(0, 0, 0))
  answer = ", ".join(f"{LETTERS[l]} is {h}" for l, h in zip(letters, heights)) + "."
  return image, answer


def _lines(rng):
  words = rng.choice(len(WORDS), 12, replace=True)
  image, draw = _canvas("lines")
  font = _font()
  lines = []
  for row in range(4):
    line = [WORDS[w] for w in words[3 * row: 3 * row + 3]]
    for col, word in enumerate(line):
      draw.text((64 * col + 4, 32 * row + 8), word, fill=(0, 0, 0), font=font)
    lines.append(" ".join(line))
  return image, "\n".join(lines)


def draw_shape(draw, kind: str, box, color) -> None:
  x0, y0, x1, y1 = box
  if kind == "circle":
    draw.ellipse(box, fill=color)
  elif kind == "square":
    draw.rectangle(box, fill=color)
  else:
    draw.polygon([((x0 + x1) // 2, y0), (x1, y1), (x0, y1)], fill=color)


def _caption(rng):
  n = int(rng.integers(2, 4))
  cells = rng.choice(16, n, replace=False)        # a 4x4 grid of 32-pixel cells: shapes never overlap
  image, draw = _canvas("caption")
  names = []
  for cell in cells:
    color = list(COLORS)[rng.integers(len(COLORS))]
    kind = SHAPES[rng.integers(len(SHAPES))]
    x, y = 32 * (cell % 4), 32 * (cell // 4)
    pad = int(rng.integers(2, 7))
    draw_shape(draw, kind, (x + pad, y + pad, x + 31 - pad, y + 31 - pad), COLORS[color])
    names.append(f"{'an' if color[0] in 'aeiou' else 'a'} {color} {kind}")
  order = rng.permutation(n)
  phrases = [names[i] for i in order]
  listed = " and ".join(phrases) if n == 2 else f"{phrases[0]}, {phrases[1]} and {phrases[2]}"
  answer = CAPTIONS[rng.integers(len(CAPTIONS))].format(list=listed)
  return image, answer[0].upper() + answer[1:]


_RENDER = {"table": _table, "chart": _chart, "lines": _lines, "caption": _caption}


def render(task: str, split: str, index: int) -> tuple[PIL.Image.Image, str, str]:
  """-> (image, question, answer) of one record; deterministic in (task, split, index)."""
  if task not in _RENDER:
    raise ValueError(f"unknown testbed task {task!r}; expected one of {TASKS}")
  if split not in SPLITS:
    raise ValueError(f"unknown testbed split {split!r}; expected one of {SPLITS}")
  image, answer = _RENDER[task](_rng(task, split, index))
  return image, QUESTIONS[task], answer


def heldout_answers(num_heldout: int) -> set[tuple[str, str]]:
  """(task, answer) of the first `num_heldout` held-out records of every task: never trained on."""
  return {(t, render(t, "heldout", i)[2]) for t in TASKS for i in range(num_heldout)}


def train_samples(task: str, start: int, excluded: set[tuple[str, str]]) -> Iterator[tuple[int, PIL.Image.Image, str, str]]:
  """Train records from index `start` on, skipping those whose answer is held out."""
  i = start
  while True:
    image, question, answer = render(task, "train", i)
    if (task, answer) not in excluded:
      yield i, image, question, answer
    i += 1


def write_task(task: str, split: str, count: int, out_dir: str | os.PathLike, *, start: int = 0,
               excluded: set[tuple[str, str]] = frozenset()) -> str:
  """Renders `count` records of a task split as PNGs + a JSONL task file (relative image paths,
  so the directory can move or ship in the repo); returns the task file's path."""
  source = (train_samples(task, start, excluded) if split == "train" else
            ((i, *render(task, split, i)) for i in range(start, start + count)))
  return write_samples(task, split, zip(range(count), source), out_dir)


def write_samples(task: str, split: str, samples, out_dir: str | os.PathLike) -> str:
  """samples: (_, (index, image, question, answer)) pairs -> PNGs (an existing PNG is kept, so an
  interrupted write resumes) + `<task>_<split>.jsonl` with relative image paths; returns its path."""
  out_dir = os.fspath(out_dir)
  img_dir = os.path.join(out_dir, "images", f"{task}_{split}")
  os.makedirs(img_dir, exist_ok=True)
  records = []
  for _, (i, image, question, answer) in samples:
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
