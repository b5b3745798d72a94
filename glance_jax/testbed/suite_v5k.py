"""Testbed suite v5k: v5j with the lines' lists of two to five adjectives.

Everything but the lines' list lengths is v5j's string for string. What it answers (32 held-out
prompts a task, compute regime; docs/testbed.md "Suite v5j"): v5j's opener lifted the lines' entropy
law to an isotonic R^2 of 0.95 (every task passes), but every lines answer still has its one
reading round at the block cap, so the share of rounds at the cap is one over the rounds an answer
takes: 9.7 rounds, 0.103 against the bound 0.1. One more list length (up to five adjectives, each
with its fork) gives an answer about one more round.

Held-out record i shows v5j's held-out record i, with the same reading.
"""

from __future__ import annotations

from glance_jax.testbed import suite_v4 as v4
from glance_jax.testbed import suite_v5 as v5
from glance_jax.testbed import suite_v5g as v5g
from glance_jax.testbed import suite_v5j as v5j
from glance_jax.testbed.stream import HELDOUT_RESERVED, OFFSET, SPLITS, Scene, Stream, record_index  # noqa: F401

VERSION = "v5k"
GROUNDED, OPEN, TASKS, SIZES = v5.GROUNDED, v5.OPEN, v5.TASKS, v5.SIZES
QUESTIONS = dict(v5.QUESTIONS)
READING_END = v5.READING_END
reading = v5j.reading
LINES_OPENER = v5j.LINES_OPENER
# The v5j target continued on this stream (only the lines' list lengths moved).
TARGET_TRAIN = {**v5j.TARGET_TRAIN, "init_from": "v5j", "steps": 400}
HEAD_TRAIN = dict(v5j.HEAD_TRAIN)
DRAFT_TRAIN = dict(v5j.DRAFT_TRAIN)
ANSWER_TOKENS = v5.ANSWER_TOKENS

_LINES_COUNTS = (2, 3, 4, 5)


def answer_with(counts):
  """v5j's answers with the lines' lists' lengths drawn uniformly from `counts` (v5l passes its own)."""
  def answer(s: Scene, rng) -> str:
    if s.task != "lines":
      return v5g._answer(s, rng)
    return LINES_OPENER + v5g._lines_answer(s, rng, counts)
  return answer


_answer = answer_with(_LINES_COUNTS)


STREAM = Stream(VERSION, QUESTIONS, v4.STREAM.scene, v4.STREAM.draw, _answer, v4.STREAM.salts)
draw_record, reserved_scenes, record = STREAM.draw_record, STREAM.reserved_scenes, STREAM.record
render, train_record, write_task = STREAM.render, STREAM.train_record, STREAM.write_task
