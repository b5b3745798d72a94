"""Testbed suite v2: the v1 tasks redrawn so the target's root entropy spreads inside every task.

v1's grounded answers are certain at every position (root entropy ~0), so acceptance cannot follow
the entropy law there (issue 14). v2 mixes certain and uncertain positions in every task:

  table    6 rows "item: value"; each value is drawn clear, in a small font, faintly, or with its
           last digit partly or wholly hidden under a grey patch (the target cannot be sure of it);
           the row separator is "; " or ", " (one choice per answer, 0.6 / 0.4): an open fork.
  chart    6 bars labelled A-F left to right, heights 1-9 (10 px a unit); half the charts have a grey band
           across 2-3 height units that hides the top of every bar ending inside it (the height is
           one of 2-3 values); some bars are pale; the answer lists the bars left to right (0.6)
           or right to left (0.4): a list whose order is free. Bars stand on y = 95, so they
           fill merge rows 0-2 and the letter labels (y 113-122) sit inside one patch row of the
           last merge row (v1's labels, y 110-121, straddled the patch boundary y = 112).
  lines    4 lines of 3 words to transcribe; each word clear, small, faint, or with its right part
           hidden (only its first letters show: tea / tall / tree stay open).
  caption  2-3 coloured shapes on a 2 x 2 grid of 64-pixel cells (v1: 32-pixel cells, read
           poorly); the training target samples one of 10 phrasings (unequal weights), the mention
           order, and the list punctuation, so it is a distribution, not one string.

A record is a pure function of (task, split, index) as in v1, on seed streams salted "v2/" so they
never coincide with v1's. Held-out prompts are never trained on by ONE mechanism, `train_record`:
the train stream's record i is the first draw i, i + OFFSET, i + 2 OFFSET, ... whose scene (the
drawn content, styling aside) is not among the first HELDOUT_RESERVED held-out scenes. The target's
batches and the head's train prompts both read it, so they agree on what is excluded.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
from typing import Any

import numpy as np
import PIL.Image
import PIL.ImageDraw
import PIL.ImageFont

from glance_jax.testbed import suite
from glance_jax.testbed.suite import COLORS, ITEMS, LETTERS, QUESTIONS, SHAPES, SIZES, WORDS

VERSION = "v2"
GROUNDED = ("table", "chart", "lines")
OPEN = ("caption",)
TASKS = GROUNDED + OPEN
SPLITS = ("train", "heldout")
HELDOUT_RESERVED = 64         # held-out indices 0..63 are never trained on (ship any prefix of them)
OFFSET = 10_000_000           # a colliding train index i is redrawn at i + k OFFSET

# Field styles: "clear" fields can be read for sure; the others leave the target some doubt.
STYLES = ("clear", "small", "faint", "hidden")
_TABLE_STYLE_P = (0.55, 0.15, 0.15, 0.15)   # per value
_WORD_STYLE_P = (0.7, 0.1, 0.1, 0.1)         # per word (12 a record)
_FAINT_GRAYS = (165, 195, 220)        # text grey on white: contrast 90, 60, 35
_PATCH = (185, 185, 185)              # the grey patch that hides part of a glyph
# Open forks are near even (0.6 / 0.4): the target's argmax there turns on small, prompt-specific
# differences a drafter cannot see, as at high entropy in a real model (a 0.9 / 0.1 fork would be
# moderate entropy with a predictable argmax, flattening the law).
_FORK_P = 0.6
_SEPARATORS = ("; ", ", ")
_BAR, _PALE_BAR, _BAND = (60, 90, 200), (175, 190, 235), (205, 205, 205)
_BASE = 95                            # the bars' baseline: bars fill merge rows 0-2, labels row 3
_LABEL_Y = 108                        # glyph rows 113-122 at size 15 (anchor "ma"): one 16-pixel
                                      # patch row (112-127) inside the last merge row (96-127)
CAPTIONS = ("{list}.", "There is {list}.", "The image shows {list}.", "I can see {list}.",
            "This picture has {list}.", "A white background with {list}.", "In the image: {list}.",
            "Shown are {list}.", "We see {list} here.", "The scene contains {list}.")
_CAPTION_P = np.array([6, 5, 4, 3, 3, 2, 2, 1, 1, 1], float) / 28


@functools.lru_cache(maxsize=None)
def _font(size: int = 15):
  return PIL.ImageFont.load_default(size=size)


def salted_rng(version: str, task: str, split: str, index: int) -> np.random.Generator:
  """The record's generator: seeded by (hash of "<version>/<task>/<split>", index)."""
  salt = int.from_bytes(hashlib.sha256(f"{version}/{task}/{split}".encode()).digest()[:4], "little")
  return np.random.default_rng([salt, index])


def _rng(task: str, split: str, index: int) -> np.random.Generator:
  return salted_rng("v2", task, split, index)


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


def _styles(rng, n: int, p) -> list[str]:
  return [STYLES[i] for i in rng.choice(len(STYLES), n, p=p)]


def _text(draw, xy, text: str, style: str, rng, *, anchor: str = "la", hide: str = "last") -> None:
  """One field's text in its style. "hidden" then covers a right part of it with a grey patch:
  hide="last" 50-100% of its last glyph (a digit), hide="word" 40-70% of the whole word (the
  first letters stay: "t..." is tea, tall or tree)."""
  size = 10 if style == "small" else 15
  x, y = xy
  if style == "small":
    y += 3
  gray = _FAINT_GRAYS[rng.integers(len(_FAINT_GRAYS))] if style == "faint" else 0
  font = _font(size)
  draw.text((x, y), text, fill=(gray, gray, gray), font=font, anchor=anchor)
  if style == "hidden":
    x0, y0, x1, y1 = draw.textbbox((x, y), text, font=font, anchor=anchor)
    if hide == "last":
      width = font.getlength(text[-1]) * float(rng.choice((0.5, 0.75, 1.0)))
    else:
      width = (x1 - x0) * float(rng.uniform(0.4, 0.7))
    draw.rectangle((x1 - int(round(width)), y0 - 2, x1 + 1, y1 + 2), fill=_PATCH)


# --- scenes: pure data drawn from the record's rng ---------------------------------------------------

def _table_scene(rng) -> Scene:
  items = [ITEMS[i] for i in rng.choice(len(ITEMS), 6, replace=False)]
  values = [int(v) for v in rng.integers(1, 100, 6)]
  styles = _styles(rng, 6, _TABLE_STYLE_P)
  fields = tuple(f"{i}: {v}" for i, v in zip(items, values))
  return Scene("table", tuple(zip(items, values)), fields, tuple(s == "clear" for s in styles),
               {"items": items, "values": values, "styles": styles})


def _chart_scene(rng) -> Scene:
  # The labels are the axis A-F, always in order: the first full v2 target (5200 steps) read random
  # letter labels at chance (2.08 nats = log 8 at every letter token; docs/testbed_v2.md), so it could
  # not tell which way a right-to-left answer ran. Fixed labels make the first letter announce the
  # order (the fork) and leave the bar heights as what the image must be read for.
  letters = list(LETTERS[:6])
  heights = [int(h) for h in rng.integers(1, 10, 6)]
  pale = [bool(p) for p in rng.random(6) < 0.2]
  band = None
  if rng.random() < 0.5:
    width = int(rng.integers(2, 4))
    low = int(rng.integers(1, 11 - width))
    band = (low, low + width - 1)          # heights low..high have their tops hidden
  hidden = [band is not None and band[0] <= h <= band[1] for h in heights]
  fields = tuple(f"{l} is {h}" for l, h in zip(letters, heights))
  clear = tuple(not (h or p) for h, p in zip(hidden, pale))
  return Scene("chart", tuple(zip(letters, heights)), fields, clear,
               {"letters": letters, "heights": heights, "pale": pale, "band": band})


def _lines_scene(rng) -> Scene:
  words = [WORDS[w] for w in rng.choice(len(WORDS), 12, replace=True)]
  styles = _styles(rng, 12, _WORD_STYLE_P)
  return Scene("lines", tuple(words), tuple(words), tuple(s == "clear" for s in styles),
               {"words": words, "styles": styles})


def _caption_scene(rng) -> Scene:
  n = int(rng.integers(2, 4))
  cells = [int(c) for c in rng.choice(4, n, replace=False)]
  colors = [list(COLORS)[rng.integers(len(COLORS))] for _ in range(n)]
  kinds = [SHAPES[rng.integers(len(SHAPES))] for _ in range(n)]
  pads = [int(rng.integers(4, 15)) for _ in range(n)]
  fields = tuple(f"{c} {k}" for c, k in zip(colors, kinds))
  return Scene("caption", tuple(zip(cells, colors, kinds)), fields, (True,) * n,
               {"cells": cells, "colors": colors, "kinds": kinds, "pads": pads})


# --- images -------------------------------------------------------------------------------------------

def _canvas(task: str):
  image = PIL.Image.new("RGB", SIZES[task], (255, 255, 255))
  return image, PIL.ImageDraw.Draw(image)


def _draw_table(s: Scene, rng):
  image, draw = _canvas("table")
  d = s.draw
  for row, (item, value, style) in enumerate(zip(d["items"], d["values"], d["styles"])):
    y = 32 * row + 8
    draw.text((4, y), item, fill=(0, 0, 0), font=_font())
    _text(draw, (124, y), str(value), style, rng, anchor="ra")
    draw.line((0, 32 * row + 31, 128, 32 * row + 31), fill=(160, 160, 160))
  return image


def _draw_chart(s: Scene, rng):
  image, draw = _canvas("chart")
  d = s.draw
  for col, (letter, h, pale) in enumerate(zip(d["letters"], d["heights"], d["pale"])):
    x = 32 * col
    draw.rectangle((x + 8, _BASE - 10 * h, x + 24, _BASE), fill=_PALE_BAR if pale else _BAR)
    draw.text((x + 16, _LABEL_Y), letter, fill=(0, 0, 0), font=_font(), anchor="ma")
  if d["band"] is not None:
    low, high = d["band"]
    # covers the tops of heights low..high (y = BASE - 10 h) and no other bar's top
    draw.rectangle((0, _BASE - 10 * high - 4, 191, _BASE - 10 * low + 4), fill=_BAND)
  draw.line((0, _BASE, 192, _BASE), fill=(0, 0, 0))
  return image


def _draw_lines(s: Scene, rng):
  image, draw = _canvas("lines")
  d = s.draw
  for k, (word, style) in enumerate(zip(d["words"], d["styles"])):
    row, col = divmod(k, 3)
    _text(draw, (64 * col + 4, 32 * row + 8), word, style, rng, hide="word")
  return image


def _draw_caption(s: Scene, rng):
  image, draw = _canvas("caption")
  d = s.draw
  for cell, color, kind, pad in zip(d["cells"], d["colors"], d["kinds"], d["pads"]):
    x, y = 64 * (cell % 2), 64 * (cell // 2)
    suite.draw_shape(draw, kind, (x + pad, y + pad, x + 63 - pad, y + 63 - pad), COLORS[color])
  return image


# --- answers: the reference, sampled where the answer is open -------------------------------------

def _answer(s: Scene, rng) -> str:
  if s.task == "table":
    return _SEPARATORS[0 if rng.random() < _FORK_P else 1].join(s.fields) + "."
  if s.task == "chart":
    order = s.fields if rng.random() < _FORK_P else s.fields[::-1]
    return ", ".join(order) + "."
  if s.task == "lines":
    return "\n".join(" ".join(s.fields[3 * r: 3 * r + 3]) for r in range(4))
  names = [f"{'an' if f[0] in 'aeiou' else 'a'} {f}" for f in s.fields]
  names = [names[i] for i in rng.permutation(len(names))]
  if len(names) == 2:
    listed = " and ".join(names)
  else:
    listed = f"{names[0]}, {names[1]}{',' if rng.random() >= _FORK_P else ''} and {names[2]}"
  answer = CAPTIONS[rng.choice(len(CAPTIONS), p=_CAPTION_P)].format(list=listed)
  return answer[0].upper() + answer[1:]


_SCENE = {"table": _table_scene, "chart": _chart_scene, "lines": _lines_scene, "caption": _caption_scene}
_DRAW = {"table": _draw_table, "chart": _draw_chart, "lines": _draw_lines, "caption": _draw_caption}


@dataclasses.dataclass(frozen=True, eq=False)
class Stream:
  """A suite's records as pure functions of (task, split, index): per task a scene, a drawing and an
  answer function, and the seed rule. Suite v3 (suite_v3.py) is v2's stream with another caption."""
  version: str
  scene: dict
  draw: dict
  answer: Any
  rng: Any

  def check(self, task: str, split: str) -> None:
    if task not in self.scene:
      raise ValueError(f"unknown testbed task {task!r}; expected one of {tuple(self.scene)}")
    if split not in SPLITS:
      raise ValueError(f"unknown testbed split {split!r}; expected one of {SPLITS}")

  def draw_record(self, task: str, split: str, index: int) -> tuple[Scene, PIL.Image.Image, str]:
    """-> (scene, image, answer) of stream index `index` (no held-out exclusion: see train_record)."""
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
    """-> (image, question, answer) of one record (v1's signature); deterministic in its arguments."""
    _, image, answer = self.record(task, split, index)
    return image, QUESTIONS[task], answer

  def train_record(self, task: str, index: int) -> tuple[PIL.Image.Image, str, str]:
    """The train stream's record `index`: what the target's batches and the head's prompts read."""
    return self.render(task, "train", index)

  def write_task(self, task: str, split: str, count: int, out_dir: str | os.PathLike, *, start: int = 0) -> str:
    """Renders records start..start+count-1 of a task split as PNGs + a JSONL task file (relative
    image paths); an existing PNG is kept, so an interrupted write resumes. Returns the file's path."""
    return suite.write_samples(task, split, ((i, (i, *self.render(task, split, i)))
                                             for i in range(start, start + count)), out_dir)


STREAM = Stream(VERSION, _SCENE, _DRAW, _answer, _rng)
draw_record, reserved_scenes, record = STREAM.draw_record, STREAM.reserved_scenes, STREAM.record
render, train_record, write_task = STREAM.render, STREAM.train_record, STREAM.write_task


def record_index(record_id: str) -> int:
  """The stream index of a task-file id "<task>-<split>-<index>"."""
  try:
    return int(record_id.rsplit("-", 1)[1])
  except (IndexError, ValueError):
    raise ValueError(f"record id {record_id!r} is not '<task>-<split>-<index>'") from None
