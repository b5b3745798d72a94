"""Testbed suite v5j: v5g with the lines' answers opened by "Read:", so their reading round starts surest.

Everything else is v5g's string for string, the lines' reading and explanation included. What it
answers (docs/testbed.md, "Why the lines' law sits at its bound"): the lines' entropy law (isotonic
R^2 0.798 against 0.8, [0.74, 0.84] over prompts) is held down by each answer's first round, rooted at
the prefill's token, the reading's first word: the target is less sure of the next word it reads
(0.005 nats) than of its templated sentences (0.0007), yet that round accepts the block-long reading
(a = 15), and without those 64 rounds the fit gives 0.967. Suites v5h and v5i moved the reading away
from the answer's start and their targets stopped reading it; here the reading stays where v5g's
target reads it, after a fixed opener, so the first round is rooted at "Read" (whose next token,
":", is as sure as a template's) and the reading's last words fall in the second round, rooted in
the reading and stopping, as v5g's second round stops, at the first three-way fork of "Line 1 is ...":
v5g's second rounds all accept 8 or 9 tokens, so 3 more keep them under the cap of 15.

  lines    "Read:\\nbig blue pan\\nold dark sky\\n...\\n\\nLine 1 is cold and wet. ..."

Held-out record i shows v5g's held-out record i.
"""

from __future__ import annotations

from glance_jax.testbed import suite_v4 as v4
from glance_jax.testbed import suite_v5 as v5
from glance_jax.testbed import suite_v5g as v5g
from glance_jax.testbed.stream import HELDOUT_RESERVED, OFFSET, SPLITS, Scene, Stream, record_index  # noqa: F401

VERSION = "v5j"
GROUNDED, OPEN, TASKS, SIZES = v5.GROUNDED, v5.OPEN, v5.TASKS, v5.SIZES
QUESTIONS = dict(v5.QUESTIONS)
READING_END = v5.READING_END
# The v5g target continued on this stream (only the lines' answers gain their opener).
TARGET_TRAIN = {**v5g.TARGET_TRAIN, "init_from": "v5g", "steps": 400}
HEAD_TRAIN = dict(v5g.HEAD_TRAIN)
DRAFT_TRAIN = dict(v5g.DRAFT_TRAIN)
ANSWER_TOKENS = v5.ANSWER_TOKENS

LINES_OPENER = "Read:\n"     # three pieces: "Read", ":", "\n"


def _answer(s: Scene, rng) -> str:
  answer = v5g._answer(s, rng)
  return LINES_OPENER + answer if s.task == "lines" else answer


def reading(answer: str) -> str:
  """The grounded part (what evaluate.score scores): v5's, without the lines' opener."""
  return v5.reading(answer.removeprefix(LINES_OPENER))


STREAM = Stream(VERSION, QUESTIONS, v4.STREAM.scene, v4.STREAM.draw, _answer, v4.STREAM.salts)
draw_record, reserved_scenes, record = STREAM.draw_record, STREAM.reserved_scenes, STREAM.record
render, train_record, write_task = STREAM.render, STREAM.train_record, STREAM.write_task
