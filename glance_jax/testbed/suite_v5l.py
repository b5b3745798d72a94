"""Testbed suite v5l: v5j with the lines' lists of two to four adjectives, four at twice the chance.

Between v5j and v5k. What it answers (32 held-out prompts a task, compute regime; testbed/next/
v5j_*, v5k_*): every lines answer has one reading round at the block cap, so the share of rounds at
the cap is one over the rounds an answer takes. v5j's lists of two to four (3.0 adjectives a list)
take 9.7 rounds, 0.103 at the cap against the bound 0.1; v5k's two to five (3.5) take 12.5, 0.08,
but lift the lines' mean root entropy from 0.54 to 0.84, above the caption's 0.81 (grounded below
open is a must-show). Two, three, four, four (3.25 a list) aims between: about 11 rounds an answer
(0.09 at the cap) with the lines' roots well under the caption's.

Held-out record i shows v5j's held-out record i, with the same reading.
"""

from __future__ import annotations

from glance_jax.testbed import suite_v4 as v4
from glance_jax.testbed import suite_v5j as v5j
from glance_jax.testbed import suite_v5k as v5k
from glance_jax.testbed.stream import HELDOUT_RESERVED, OFFSET, SPLITS, Scene, Stream, record_index  # noqa: F401
# v5j's tasks, questions, reading and opener, unchanged (v5k's are v5j's too)
from glance_jax.testbed.suite_v5j import (ANSWER_TOKENS, GROUNDED, LINES_OPENER, OPEN, QUESTIONS, READING_END,  # noqa: F401
                                         SIZES, TASKS, reading)

VERSION = "v5l"
# The v5j target and head continued on this stream (only the lines' list lengths' chances moved).
TARGET_TRAIN = {**v5j.TARGET_TRAIN, "init_from": "v5j", "steps": 400}
HEAD_TRAIN, DRAFT_TRAIN = dict(v5j.HEAD_TRAIN), dict(v5j.DRAFT_TRAIN)

# drawn uniformly from these four entries: P(2) = P(3) = 1/4, P(4) = 1/2
_LINES_COUNTS = (2, 3, 4, 4)
_answer = v5k.answer_with(_LINES_COUNTS)

STREAM = Stream(VERSION, QUESTIONS, v4.STREAM.scene, v4.STREAM.draw, _answer, v4.STREAM.salts)
draw_record, reserved_scenes, record = STREAM.draw_record, STREAM.reserved_scenes, STREAM.record
render, train_record, write_task = STREAM.render, STREAM.train_record, STREAM.write_task
