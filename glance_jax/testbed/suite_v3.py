"""Testbed suite v3: suite v2 with a caption whose uncertainty runs over several tokens.

v2's caption was uncertain only at isolated forks (phrasing, mention order, Oxford comma) whose
greedy choice a drafter with the target's features learns, so its rounds inverted the entropy law
(docs/testbed_v2.md): a round that starts at a fork drafts it right. A round ends where the draft
fails and the next round starts at the token after the target's choice there, so the root entropy
can only say something when uncertainty is *sustained*, as in v2's table, where a faint value's
digits are uncertain one after another.

v3 keeps v2's table, chart and lines record for record (the same seeds: v2's held-out files are
v3's) and redraws the caption:

  caption  2-3 coloured shapes on a 2 x 2 grid of 64-pixel cells, mentioned in reading order.
           Each shape is clear (0.5), faint (0.2: its colour blended 72-86% towards white, so pale
           red, orange and purple are hard to tell apart), hidden (0.15: a grey patch covers all but
           a 3-10 pixel top sliver, so its kind is a guess from the top edge) or both (0.15). An
           unclear shape's mention is uncertain over consecutive tokens: the article ("an" before
           orange), the colour and the kind. The phrasing is sampled as in v2 (10 phrasings with
           unequal weights); there is no Oxford comma and no order fork.

Records are pure functions of (task, split, index); the caption's seeds are salted "v3/", so its
records never coincide with v2's. Held-out exclusion is v2's one rule (suite_v2.Stream).
"""

from __future__ import annotations

import numpy as np

from glance_jax.testbed import suite, suite_v2
from glance_jax.testbed.suite import COLORS, QUESTIONS, SHAPES, SIZES  # noqa: F401  (the suite's interface)
from glance_jax.testbed.suite_v2 import (GROUNDED, HELDOUT_RESERVED, OFFSET, OPEN, SPLITS,  # noqa: F401
                                         TASKS, Scene, record_index)

VERSION = "v3"
CAPTION_STYLES = ("clear", "faint", "hidden", "obscured")    # obscured = faint and hidden
_CAPTION_STYLE_P = (0.5, 0.2, 0.15, 0.15)
_FAINT_MIX = (0.72, 0.86)      # share of white blended into a faint shape's colour
_SLIVER = (3, 11)              # a hidden shape's visible top rows, [low, high) pixels
_PATCH = (185, 185, 185)


def _rng(task: str, split: str, index: int) -> np.random.Generator:
  if task != "caption":          # v2's records, seed for seed
    return suite_v2._rng(task, split, index)
  return suite_v2.salted_rng("v3", task, split, index)


def _caption_scene(rng, shapes: tuple[int, int] = (2, 4)) -> Scene:
  """2-3 shapes (v4: `shapes` = (3, 5), 3-4), each with a style of CAPTION_STYLES."""
  n = int(rng.integers(*shapes))
  cells = sorted(int(c) for c in rng.choice(4, n, replace=False))        # reading order
  colors = [list(COLORS)[rng.integers(len(COLORS))] for _ in range(n)]
  kinds = [SHAPES[rng.integers(len(SHAPES))] for _ in range(n)]
  pads = [int(rng.integers(4, 15)) for _ in range(n)]
  styles = [CAPTION_STYLES[i] for i in rng.choice(len(CAPTION_STYLES), n, p=_CAPTION_STYLE_P)]
  fields = tuple(f"{c} {k}" for c, k in zip(colors, kinds))
  return Scene("caption", tuple(zip(cells, colors, kinds)), fields, tuple(s == "clear" for s in styles),
               {"cells": cells, "colors": colors, "kinds": kinds, "pads": pads, "styles": styles})


def _draw_caption(s: Scene, rng):
  image, draw = suite_v2._canvas("caption")
  d = s.draw
  for cell, color, kind, pad, style in zip(d["cells"], d["colors"], d["kinds"], d["pads"], d["styles"]):
    x, y = 64 * (cell % 2), 64 * (cell // 2)
    box = (x + pad, y + pad, x + 63 - pad, y + 63 - pad)
    rgb = COLORS[color]
    if style in ("faint", "obscured"):
      mix = float(rng.uniform(*_FAINT_MIX))
      rgb = tuple(int(round(c + (255 - c) * mix)) for c in rgb)
    suite.draw_shape(draw, kind, box, rgb)
    if style in ("hidden", "obscured"):
      sliver = int(rng.integers(*_SLIVER))
      draw.rectangle((box[0] - 3, box[1] + sliver, box[2] + 3, box[3] + 3), fill=_PATCH)
  return image


def _caption_answer(s: Scene, rng) -> str:
  names = [f"{'an' if f[0] in 'aeiou' else 'a'} {f}" for f in s.fields]
  listed = " and ".join(names) if len(names) == 2 else f"{names[0]}, {names[1]} and {names[2]}"
  answer = suite_v2.CAPTIONS[rng.choice(len(suite_v2.CAPTIONS), p=suite_v2._CAPTION_P)].format(list=listed)
  return answer[0].upper() + answer[1:]


def _answer(s: Scene, rng) -> str:
  return _caption_answer(s, rng) if s.task == "caption" else suite_v2._answer(s, rng)


STREAM = suite_v2.Stream(VERSION, {**suite_v2._SCENE, "caption": _caption_scene},
                         {**suite_v2._DRAW, "caption": _draw_caption}, _answer, _rng)
draw_record, reserved_scenes, record = STREAM.draw_record, STREAM.reserved_scenes, STREAM.record
render, train_record, write_task = STREAM.render, STREAM.train_record, STREAM.write_task
