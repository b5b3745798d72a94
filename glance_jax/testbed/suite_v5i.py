"""Testbed suite v5i: v5h's lines with each clause led by its line's words where the reading had them.

Everything but the lines' answers is v5g's (and v5h's) string for string. What it answers: v5h moved
each line's words after "Line k:" and its target, continued 700 steps from v5g's, stopped reading
them (held-out clear words 0.06, chance: it writes plausible words at those places, not the image's);
v5g's target reads a line's words at the start of the answer and after a newline. Here each line of
the answer starts with its words, as in v5g's reading block, and goes on with its adjectives:

  lines    "big blue pan: cold and old.\\nold dark sky: hot, wet.\\n...\\nThat is all.": four lines of
           the image's three words, a colon, two to four adjectives (v5h's unequal forks), then a
           closer on its own line.

So, as in v5h, no stretch of the answer is fixed for more than a line's words (no block-long
reading round, the rounds that held the lines' entropy law at its bound: suite_v5h's docstring),
and every lines fork has unequal chances. Held-out record i shows v5g's held-out record i. Measured
(docs/testbed.md, "Suite v5i"): its target read the first line only (clear 0.26), 1450 steps on.
"""

from __future__ import annotations

import re

from glance_jax.testbed import suite_v4 as v4
from glance_jax.testbed import suite_v5 as v5
from glance_jax.testbed import suite_v5g as v5g
from glance_jax.testbed import suite_v5h as v5h
from glance_jax.testbed.stream import HELDOUT_RESERVED, OFFSET, SPLITS, Scene, Stream, record_index  # noqa: F401

VERSION = "v5i"
GROUNDED, OPEN, TASKS, SIZES = v5.GROUNDED, v5.OPEN, v5.TASKS, v5.SIZES
QUESTIONS = dict(v5.QUESTIONS)
READING_END = v5.READING_END
# The v5g target continued on this stream (as v5h's: the lines' answers change form).
TARGET_TRAIN = dict(v5h.TARGET_TRAIN)
HEAD_TRAIN = dict(v5h.HEAD_TRAIN)
DRAFT_TRAIN = dict(v5h.DRAFT_TRAIN)
ANSWER_TOKENS = v5.ANSWER_TOKENS

_ADJECTIVES, _CLOSERS, _LINES_COUNTS = v5h._ADJECTIVES, v5h._CLOSERS, v5h._LINES_COUNTS
_LINE = re.compile(r"^(\S+ \S+ \S+):", re.M)


def _lines_answer(s: Scene, rng) -> str:
  words = s.fields                                       # 12: four lines of three (suite_v4)
  lines = [f"{' '.join(words[3 * k:3 * k + 3])}: {v5h._listed(rng)}." for k in range(4)]
  return "\n".join(lines + [v5h._CLOSERS[rng.choice(len(v5h._CLOSERS), p=v5h._CLOSER_P)]])


def _answer(s: Scene, rng) -> str:
  return _lines_answer(s, rng) if s.task == "lines" else v5g._answer(s, rng)


def reading(answer: str) -> str:
  """The grounded part (what evaluate.score scores): a lines answer's words, a line a row (each
  line's part before its colon); any other answer's part before READING_END, as v5's."""
  if READING_END in answer:
    return v5.reading(answer)
  return "\n".join(_LINE.findall(answer))


STREAM = Stream(VERSION, QUESTIONS, v4.STREAM.scene, v4.STREAM.draw, _answer, v4.STREAM.salts)
draw_record, reserved_scenes, record = STREAM.draw_record, STREAM.reserved_scenes, STREAM.record
render, train_record, write_task = STREAM.render, STREAM.train_record, STREAM.write_task
