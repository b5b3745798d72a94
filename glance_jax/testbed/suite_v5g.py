"""Testbed suite v5g: v5f with the lines' lists two to four adjectives again.

Everything but the lines' free part is v5f's (and v5e's) string for string. What it answers (32
held-out prompts a task, compute regime; docs/testbed.md "Suite v5f"): v5f's lines, one verb and
lists of two or three, went from v5e's 0.88 nats of mean root entropy to 0.26, and their target's
greedy answer to one mode ("Line k is tall, ..."): tau 8.11 and 12% of rounds at the block cap, both
past their bounds, and the entropy law's isotonic R^2 0.49. v5e's counts (two to four) with v5f's one
verb sit between the two.

Held-out record i shows v5f's held-out record i, with the same reading.
"""

from __future__ import annotations

from glance_jax.testbed import suite_v4 as v4
from glance_jax.testbed import suite_v5 as v5
from glance_jax.testbed import suite_v5c as v5c
from glance_jax.testbed import suite_v5e as v5e
from glance_jax.testbed import suite_v5f as v5f
from glance_jax.testbed.stream import HELDOUT_RESERVED, OFFSET, SPLITS, Scene, Stream, record_index  # noqa: F401

VERSION = "v5g"
GROUNDED, OPEN, TASKS, SIZES = v5.GROUNDED, v5.OPEN, v5.TASKS, v5.SIZES
QUESTIONS = dict(v5.QUESTIONS)
READING_END = v5.READING_END
reading = v5.reading
# The v5f target continued on this stream (only the lines' list lengths moved).
TARGET_TRAIN = {**v5f.TARGET_TRAIN, "init_from": "v5f", "steps": 400}
HEAD_TRAIN = dict(v5f.HEAD_TRAIN)
DRAFT_TRAIN = dict(v5f.DRAFT_TRAIN)
ANSWER_TOKENS = v5.ANSWER_TOKENS

_LINES_COUNTS = v5e._LINES_COUNTS      # (2, 3, 4)


def _lines_answer(s: Scene, rng, counts=_LINES_COUNTS) -> str:
  """The reading, then one clause a line with `counts` adjectives (v5k passes its own counts)."""
  return v5c._reading(s, rng) + READING_END + v5f._lines_explanation(s, rng, counts)


def _answer(s: Scene, rng) -> str:
  return _lines_answer(s, rng) if s.task == "lines" else v5f._answer(s, rng)


STREAM = Stream(VERSION, QUESTIONS, v4.STREAM.scene, v4.STREAM.draw, _answer, v4.STREAM.salts)
draw_record, reserved_scenes, record = STREAM.draw_record, STREAM.reserved_scenes, STREAM.record
render, train_record, write_task = STREAM.render, STREAM.train_record, STREAM.write_task
