"""Testbed suite v4, the shipped one: four PIL-rendered tasks in which every answer mixes positions the
target can read for sure with positions it cannot, so its root entropy spreads inside a task.

  table    (grounded) 6 rows "item: value"; each value is drawn clear (0.55), in a small font, faintly
           or with 50-100% of its last digit under a grey patch (0.15 each); the row separator is
           "; " or ", " (0.6 / 0.4, one choice per answer): an open fork.
  chart    (grounded) 6 bars labelled A-F left to right, heights 1-9 (10 px a unit); half the charts
           have a grey band across 2-3 height units that hides the top of every bar ending inside
           it; some bars are pale; the answer lists the bars left to right (0.6) or right to left (0.4).
           Bars stand on y = 95, so they fill merge rows 0-2, and the labels (glyph rows 113-122) sit
           inside one 16-pixel patch row of the last merge row.
  lines    (grounded) 4 lines of 3 words to transcribe; each word clear (0.7), small, faint, or with
           40-70% of it hidden from the right (0.1 each; the first letters show: tea / tall / tree).
  caption  (open) 3-4 coloured shapes on a 2 x 2 grid of 64-pixel cells, each clear (0.5), faint (0.2:
           its colour blended 72-86% towards white), hidden (0.15: a grey patch covers all but a 3-10
           pixel top sliver) or both (0.15), mentioned in reading order with their cells: "A purple
           square in cell 1, a faint ... in cell 3 and ..." (~35-40 tokens; the article, colour and kind
           of an unclear shape are uncertain one after another, the words between them certain); one
           of 10 phrasings with weights 6:5:4:3:3:2:2:1:1:1.

Image sides are multiples of 32 (patch 16 x merge 2) inside the processor's pixel bounds, so no image
is resized: table 128x192 (w x h), chart and lines 192x128 (24 merged image tokens), caption 128x128
(16). Records follow glance_jax/testbed/stream.py (pure functions of (task, split, index), one
held-out rule). The seed streams are salted "v2/" for table, chart and lines (drawn first for suite
v2, kept record for record) and "v4/" for the caption.
"""

from __future__ import annotations

import numpy as np

from glance_jax.testbed.stream import (HELDOUT_RESERVED, OFFSET, SPLITS, Scene, Stream, canvas,  # noqa: F401
                                       draw_shape, font, record_index)

VERSION = "v4"
GROUNDED = ("table", "chart", "lines")
OPEN = ("caption",)
TASKS = GROUNDED + OPEN
SIZES = {"table": (128, 192), "chart": (192, 128), "lines": (192, 128), "caption": (128, 128)}  # (w, h)
QUESTIONS = {
    "table": "Read the table.",
    "chart": "What are the values of the bars?",
    "lines": "Transcribe the text.",
    "caption": "Describe the image.",
}

# The build's target recipe (TargetTrainConfig fields; glance_jax/testbed/build.py). From nothing:
# 12000 steps, then 2000 more from a restarted learning rate. Longest prompt + answer: 84 tokens
# (a table; a caption 83), so 96 leaves room for a tokenizer that merges less.
TARGET_TRAIN = {"seq_len": 96, "steps": 14000, "restart_at": 12000, "restart_lr": 1e-3}
ANSWER_TOKENS = 64        # max_new_tokens that covers every answer (evaluation, benchmarks)

ITEMS = ("pens", "cups", "hats", "keys", "maps", "bags", "lamps", "books", "coins", "shoes", "rings",
         "boxes")
LETTERS = tuple("ABCDEF")
WORDS = ("red", "fox", "big", "sun", "old", "map", "cold", "tea", "blue", "sky", "wet", "dog", "hot",
         "pan", "dark", "sea", "tall", "tree", "fast", "car", "soft", "bed", "low", "hill")
COLORS = {"red": (215, 40, 40), "green": (40, 160, 60), "blue": (40, 70, 215), "yellow": (225, 190, 20),
          "purple": (140, 50, 170), "orange": (240, 130, 20)}
SHAPES = ("circle", "square", "triangle")

# Field styles: "clear" fields can be read for sure; the others leave the target some doubt.
STYLES = ("clear", "small", "faint", "hidden")
_TABLE_STYLE_P = (0.55, 0.15, 0.15, 0.15)   # per value
_WORD_STYLE_P = (0.7, 0.1, 0.1, 0.1)         # per word (12 a record)
_FAINT_GRAYS = (165, 195, 220)        # text grey on white: contrast 90, 60, 35
_PATCH = (185, 185, 185)              # the grey patch that hides part of a glyph or shape
# Open forks are near even (0.6 / 0.4): the target's argmax there turns on small, prompt-specific
# differences a drafter cannot see, as at high entropy in a real model (a 0.9 / 0.1 fork would be
# moderate entropy with a predictable argmax, flattening the law).
_FORK_P = 0.6
_SEPARATORS = ("; ", ", ")
_BAR, _PALE_BAR, _BAND = (60, 90, 200), (175, 190, 235), (205, 205, 205)
_BASE = 95                            # the bars' baseline: bars fill merge rows 0-2, labels row 3
_LABEL_Y = 108                        # glyph rows 113-122 at size 15 (anchor "ma"): one 16-pixel
                                      # patch row (112-127) inside the last merge row (96-127)
CAPTION_STYLES = ("clear", "faint", "hidden", "obscured")    # obscured = faint and hidden
_CAPTION_STYLE_P = (0.5, 0.2, 0.15, 0.15)
_FAINT_MIX = (0.72, 0.86)             # share of white blended into a faint shape's colour
_SLIVER = (3, 11)                     # a hidden shape's visible top rows, [low, high) pixels
CAPTIONS = ("{list}.", "There is {list}.", "The image shows {list}.", "I can see {list}.",
            "This picture has {list}.", "A white background with {list}.", "In the image: {list}.",
            "Shown are {list}.", "We see {list} here.", "The scene contains {list}.")
_CAPTION_P = np.array([6, 5, 4, 3, 3, 2, 2, 1, 1, 1], float) / 28


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
  f = font(size)
  draw.text((x, y), text, fill=(gray, gray, gray), font=f, anchor=anchor)
  if style == "hidden":
    x0, y0, x1, y1 = draw.textbbox((x, y), text, font=f, anchor=anchor)
    if hide == "last":
      width = f.getlength(text[-1]) * float(rng.choice((0.5, 0.75, 1.0)))
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
  # The labels are the axis A-F, always in order: the first letter of an answer announces its
  # direction (the fork), and the bar heights are what the image must be read for.
  letters = list(LETTERS)
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
  n = int(rng.integers(3, 5))
  cells = sorted(int(c) for c in rng.choice(4, n, replace=False))        # reading order
  colors = [list(COLORS)[rng.integers(len(COLORS))] for _ in range(n)]
  kinds = [SHAPES[rng.integers(len(SHAPES))] for _ in range(n)]
  pads = [int(rng.integers(4, 15)) for _ in range(n)]
  styles = [CAPTION_STYLES[i] for i in rng.choice(len(CAPTION_STYLES), n, p=_CAPTION_STYLE_P)]
  fields = tuple(f"{c} {k}" for c, k in zip(colors, kinds))
  return Scene("caption", tuple(zip(cells, colors, kinds)), fields, tuple(s == "clear" for s in styles),
               {"cells": cells, "colors": colors, "kinds": kinds, "pads": pads, "styles": styles})


# --- images -------------------------------------------------------------------------------------------

def _draw_table(s: Scene, rng):
  image, draw = canvas(SIZES["table"])
  d = s.draw
  for row, (item, value, style) in enumerate(zip(d["items"], d["values"], d["styles"])):
    y = 32 * row + 8
    draw.text((4, y), item, fill=(0, 0, 0), font=font())
    _text(draw, (124, y), str(value), style, rng, anchor="ra")
    draw.line((0, 32 * row + 31, 128, 32 * row + 31), fill=(160, 160, 160))
  return image


def _draw_chart(s: Scene, rng):
  image, draw = canvas(SIZES["chart"])
  d = s.draw
  for col, (letter, h, pale) in enumerate(zip(d["letters"], d["heights"], d["pale"])):
    x = 32 * col
    draw.rectangle((x + 8, _BASE - 10 * h, x + 24, _BASE), fill=_PALE_BAR if pale else _BAR)
    draw.text((x + 16, _LABEL_Y), letter, fill=(0, 0, 0), font=font(), anchor="ma")
  if d["band"] is not None:
    low, high = d["band"]
    # covers the tops of heights low..high (y = BASE - 10 h) and no other bar's top
    draw.rectangle((0, _BASE - 10 * high - 4, 191, _BASE - 10 * low + 4), fill=_BAND)
  draw.line((0, _BASE, 192, _BASE), fill=(0, 0, 0))
  return image


def _draw_lines(s: Scene, rng):
  image, draw = canvas(SIZES["lines"])
  d = s.draw
  for k, (word, style) in enumerate(zip(d["words"], d["styles"])):
    row, col = divmod(k, 3)
    _text(draw, (64 * col + 4, 32 * row + 8), word, style, rng, hide="word")
  return image


def _draw_caption(s: Scene, rng):
  image, draw = canvas(SIZES["caption"])
  d = s.draw
  for cell, color, kind, pad, style in zip(d["cells"], d["colors"], d["kinds"], d["pads"], d["styles"]):
    x, y = 64 * (cell % 2), 64 * (cell // 2)
    box = (x + pad, y + pad, x + 63 - pad, y + 63 - pad)
    rgb = COLORS[color]
    if style in ("faint", "obscured"):
      mix = float(rng.uniform(*_FAINT_MIX))
      rgb = tuple(int(round(c + (255 - c) * mix)) for c in rgb)
    draw_shape(draw, kind, box, rgb)
    if style in ("hidden", "obscured"):
      sliver = int(rng.integers(*_SLIVER))
      draw.rectangle((box[0] - 3, box[1] + sliver, box[2] + 3, box[3] + 3), fill=_PATCH)
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
  names = [f"{'an' if f[0] in 'aeiou' else 'a'} {f} in cell {cell + 1}" for f, cell in zip(s.fields, s.draw["cells"])]
  listed = ", ".join(names[:-1]) + " and " + names[-1]
  answer = CAPTIONS[rng.choice(len(CAPTIONS), p=_CAPTION_P)].format(list=listed)
  return answer[0].upper() + answer[1:]


def reading(answer: str) -> str:
  """The grounded part of an answer (what evaluate.score scores): all of it in v4."""
  return answer


STREAM = Stream(VERSION, QUESTIONS,
                {"table": _table_scene, "chart": _chart_scene, "lines": _lines_scene, "caption": _caption_scene},
                {"table": _draw_table, "chart": _draw_chart, "lines": _draw_lines, "caption": _draw_caption},
                _answer, {"table": "v2", "chart": "v2", "lines": "v2", "caption": "v4"})
draw_record, reserved_scenes, record = STREAM.draw_record, STREAM.reserved_scenes, STREAM.record
render, train_record, write_task = STREAM.render, STREAM.train_record, STREAM.write_task
