"""Testbed suite v5m: v5l with the caption's sentences bare adjective lists, no "It looks" before them.

What it answers (docs/testbed.md, "The shipped suite: v5l"): the caption's zeroed-conditioning tau
(1.35 per task against the bound 1.3) is mostly the head guessing, from a round's root alone, the
template its sentences start with: about 60% of what the zeroed head accepts follows " l", the first
of "looks"'s two pieces ("It l" -> "ooks cold,"), since the greedy target says "looks" in every
sentence. Here each caption sentence is v5e's gapped list alone, so a sentence starts at an
adjective fork:

  caption  "...(cell 4).\\n\\nHere: Big and fast, cold and soft, hot, low. Wet, old, ... That is the picture."

Readings and every other answer are v5l's string for string. Held-out record i shows v5l's
held-out record i, with the same reading.
"""

from __future__ import annotations

from glance_jax.testbed import suite_v4 as v4
from glance_jax.testbed import suite_v5 as v5
from glance_jax.testbed import suite_v5b as v5b
from glance_jax.testbed import suite_v5c as v5c
from glance_jax.testbed import suite_v5d as v5d
from glance_jax.testbed import suite_v5l as v5l
from glance_jax.testbed.stream import HELDOUT_RESERVED, OFFSET, SPLITS, Scene, Stream, record_index  # noqa: F401
# v5l's tasks, questions, reading and opener, unchanged
from glance_jax.testbed.suite_v5l import (ANSWER_TOKENS, GROUNDED, LINES_OPENER, OPEN, QUESTIONS, READING_END,  # noqa: F401
                                         SIZES, TASKS, reading)

VERSION = "v5m"
# The v5l target and head continued on this stream (only the caption's free part moved).
TARGET_TRAIN = {**v5l.TARGET_TRAIN, "init_from": "v5l", "steps": 400}
HEAD_TRAIN, DRAFT_TRAIN = dict(v5l.HEAD_TRAIN), dict(v5l.DRAFT_TRAIN)


def _caption_clause(s: Scene, k: int, rng) -> str:
  """A caption sentence: six to eight adjectives with drawn gaps, "big and fast, cold and soft, hot"."""
  return v5d._gapped(rng, v5b._CAPTION_ADJECTIVES, v5d._COUNTS["caption"])


def _answer(s: Scene, rng) -> str:
  if s.task != "caption":
    return v5l._answer(s, rng)
  head = v5c._reading(s, rng) + READING_END     # drawn first, as v5e's: v5l's reading string for string
  return head + v5._explanation(s, rng, clause=_caption_clause, n=len(s.fields) + v5d._CAPTION_EXTRA)


STREAM = Stream(VERSION, QUESTIONS, v4.STREAM.scene, v4.STREAM.draw, _answer, v4.STREAM.salts)
draw_record, reserved_scenes, record = STREAM.draw_record, STREAM.reserved_scenes, STREAM.record
render, train_record, write_task = STREAM.render, STREAM.train_record, STREAM.write_task
