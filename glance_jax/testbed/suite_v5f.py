"""Testbed suite v5f: v5e with the lines' clauses one verb and shorter lists.

Everything but the lines' free part is v5e's string for string (readings v5b's, table and chart v5d's,
caption v5e's). What it answers (32 held-out prompts a task, compute regime; docs/testbed.md
"Suite v5e"): v5e passed the entropy law on every task but its lines, every list position a fork,
had a mean root entropy of 0.88 nats, above the open caption's 0.83, and the most of what the lines'
head got accepted with its target features zeroed (tau 1.44) was the verb's second piece and the
adjective its target's greedy answer puts first after it (" 3 l" -> "ooks fast, wet").

  lines    "Line 2 is hot and old, soft.": the verb is always "is" (one piece, no fork) and a list
           says two or three adjectives, each gap drawn ", " / " and " as v5e's.

Held-out record i shows v5e's held-out record i, with the same reading.
"""

from __future__ import annotations

from glance_jax.testbed import suite_v4 as v4
from glance_jax.testbed import suite_v5 as v5
from glance_jax.testbed import suite_v5b as v5b
from glance_jax.testbed import suite_v5c as v5c
from glance_jax.testbed import suite_v5d as v5d
from glance_jax.testbed import suite_v5e as v5e
from glance_jax.testbed.stream import HELDOUT_RESERVED, OFFSET, SPLITS, Scene, Stream, record_index  # noqa: F401

VERSION = "v5f"
GROUNDED, OPEN, TASKS, SIZES = v5.GROUNDED, v5.OPEN, v5.TASKS, v5.SIZES
QUESTIONS = dict(v5.QUESTIONS)
READING_END = v5.READING_END
reading = v5.reading
# The v5e target continued on this stream (only the lines' free part moved).
TARGET_TRAIN = {**v5e.TARGET_TRAIN, "init_from": "v5e", "steps": 500}
HEAD_TRAIN = dict(v5e.HEAD_TRAIN)
DRAFT_TRAIN = dict(v5e.DRAFT_TRAIN)
ANSWER_TOKENS = v5.ANSWER_TOKENS

_LINES_VERB = "is"
_LINES_COUNTS = (2, 3)


def _lines_explanation(s: Scene, rng, counts=_LINES_COUNTS) -> str:
  """One clause a line, then v5's closer: "Line 1 is big and wet. Line 2 is old, soft, hot. ..."."""
  sentences = [f"Line {k + 1} {_LINES_VERB} {v5d._gapped(rng, v5b._CAPTION_ADJECTIVES, counts)}." for k in range(4)]
  return " ".join(sentences + [v5._pick(rng, v5._EXPLAIN["lines"]["close"])])


def _answer(s: Scene, rng) -> str:
  if s.task != "lines":
    return v5e._answer(s, rng)
  return v5c._reading(s, rng) + READING_END + _lines_explanation(s, rng)   # reading drawn first, as v5e


STREAM = Stream(VERSION, QUESTIONS, v4.STREAM.scene, v4.STREAM.draw, _answer, v4.STREAM.salts)
draw_record, reserved_scenes, record = STREAM.draw_record, STREAM.reserved_scenes, STREAM.record
render, train_record, write_task = STREAM.render, STREAM.train_record, STREAM.write_task
