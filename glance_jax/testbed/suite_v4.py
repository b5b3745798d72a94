"""Testbed suite v4: suite v3 with a longer caption, so that most of its rounds end where the draft
fails rather than at the end of the answer.

v3's captions are ~13 tokens, about one draft block: most rounds run to the end of the answer and
are censored, which leaves the entropy law few failures to fit (docs/testbed_v2.md). v4 draws 3-4
shapes (v3: 2-3) with v3's styles and says where each is: "a red circle in cell 1, a faint-looking
... in cell 3 and ..." (cells 1-4 in reading order, drawn plainly: certain tokens between the
uncertain mentions). Answers are ~35-40 tokens. Table, chart and lines are v2's (and v3's) records;
the caption's seeds are salted "v4/".
"""

from __future__ import annotations

import functools
import numpy as np

from glance_jax.testbed import suite_v2, suite_v3
from glance_jax.testbed.suite import COLORS, QUESTIONS, SHAPES, SIZES  # noqa: F401  (the suite's interface)
from glance_jax.testbed.suite_v2 import (GROUNDED, HELDOUT_RESERVED, OFFSET, OPEN, SPLITS,  # noqa: F401
                                         TASKS, Scene, record_index)
from glance_jax.testbed.suite_v3 import CAPTION_STYLES  # noqa: F401

VERSION = "v4"


def _rng(task: str, split: str, index: int) -> np.random.Generator:
  if task != "caption":
    return suite_v2._rng(task, split, index)
  return suite_v2.salted_rng("v4", task, split, index)


def _caption_answer(s: Scene, rng) -> str:
  names = [f"{'an' if f[0] in 'aeiou' else 'a'} {f} in cell {cell + 1}" for f, cell in zip(s.fields, s.draw["cells"])]
  listed = ", ".join(names[:-1]) + " and " + names[-1]
  answer = suite_v2.CAPTIONS[rng.choice(len(suite_v2.CAPTIONS), p=suite_v2._CAPTION_P)].format(list=listed)
  return answer[0].upper() + answer[1:]


def _answer(s: Scene, rng) -> str:
  return _caption_answer(s, rng) if s.task == "caption" else suite_v2._answer(s, rng)


STREAM = suite_v2.Stream(VERSION, {**suite_v2._SCENE, "caption": functools.partial(suite_v3._caption_scene, shapes=(3, 5))},
                         {**suite_v2._DRAW, "caption": suite_v3._draw_caption}, _answer, _rng)
draw_record, reserved_scenes, record = STREAM.draw_record, STREAM.reserved_scenes, STREAM.record
render, train_record, write_task = STREAM.render, STREAM.train_record, STREAM.write_task
