"""Testbed suite v5h: v5g with each line's words read inside its clause, and the lines' forks unequal.

Everything but the lines' answers is v5g's string for string. What it answers (64 held-out prompts a
task, compute regime; docs/testbed.md "Suite v5g"):

- The lines' entropy law sat on its bound (isotonic R^2 0.798 against 0.8; a bootstrap over prompts
  puts it in [0.74, 0.84]). benchmarks/round_anatomy.py on the v5g pair shows why: the rounds whose
  root lies in the reading (target entropy ~0.005 nats: it reads the image) accept the whole block
  (a = 15), the rounds rooted at a sentence's start ("." -> " Line 2 is ...", ~0.0007 nats, less
  than the reading's) stop at the fork after two adjectives (a ~ 7): among the near-zero entropies
  the accepted length rises with H, and without the reading rounds the same fit gives 0.97. Here
  the reading moves into the clauses, "Line 2: old dark sky, cold and wet.", so no round is rooted
  in a reading of the image unless its draft failed there, and every near-zero root is a sentence's.
- Two of 256 lines prompts left AR in the compute bench on fp32 ties of the target itself: v5g
  drew each gap ", " / " and " with equal chance, so a trained target holds the two a few ulps
  apart. Here every fork of a lines answer has unequal chances (gaps 0.55 / 0.45, adjectives by
  decreasing weight, closers 0.45 / 0.2 / 0.35), so its target keeps a margin at each.

  lines    "Line 1: big blue pan, cold and old. Line 2: ... That is all.": a clause a line, its
           three words, then two to four adjectives without repeats.

Held-out record i shows v5g's held-out record i (same scene and image). Measured (docs/testbed.md,
"Suite v5h"): its target, continued 700 steps from v5g's, stopped reading the lines (clear 0.06).
"""

from __future__ import annotations

import re

import numpy as np

from glance_jax.testbed import suite_v4 as v4
from glance_jax.testbed import suite_v5 as v5
from glance_jax.testbed import suite_v5b as v5b
from glance_jax.testbed import suite_v5e as v5e
from glance_jax.testbed import suite_v5g as v5g
from glance_jax.testbed.stream import HELDOUT_RESERVED, OFFSET, SPLITS, Scene, Stream, record_index  # noqa: F401

VERSION = "v5h"
GROUNDED, OPEN, TASKS, SIZES = v5.GROUNDED, v5.OPEN, v5.TASKS, v5.SIZES
QUESTIONS = dict(v5.QUESTIONS)
READING_END = v5.READING_END
# The v5g target continued on this stream (the lines' answers change form: more steps than v5g's 400).
TARGET_TRAIN = {**v5g.TARGET_TRAIN, "init_from": "v5g", "steps": 700}
HEAD_TRAIN = dict(v5g.HEAD_TRAIN)
DRAFT_TRAIN = dict(v5g.DRAFT_TRAIN)
ANSWER_TOKENS = v5.ANSWER_TOKENS

_LINES_COUNTS = v5e._LINES_COUNTS                       # (2, 3, 4), drawn uniformly
_GAPS, _GAP_P = (", ", " and "), (0.55, 0.45)
_ADJECTIVES = v5b._CAPTION_ADJECTIVES                   # ten, weighted 1.0 down to 0.55
_ADJECTIVE_W = np.linspace(1.0, 0.55, len(_ADJECTIVES))
_CLOSERS = v5._EXPLAIN["lines"]["close"]                # ("That is all.", "No line is left out.", "That is the text.")
_CLOSER_P = (0.45, 0.2, 0.35)
_CLAUSE = re.compile(r"Line \d+: (\S+ \S+ \S+),")


def _listed(rng) -> str:
  """Two to four adjectives without repeats, by weight; each gap ", " / " and " at 0.55 / 0.45."""
  n = _LINES_COUNTS[rng.integers(len(_LINES_COUNTS))]
  adj = list(rng.choice(_ADJECTIVES, size=n, replace=False, p=_ADJECTIVE_W / _ADJECTIVE_W.sum()))
  return adj[0] + "".join(_GAPS[rng.choice(2, p=_GAP_P)] + a for a in adj[1:])


def _lines_answer(s: Scene, rng) -> str:
  words = s.fields                                       # 12: four lines of three (suite_v4)
  clauses = [f"Line {k + 1}: {' '.join(words[3 * k:3 * k + 3])}, {_listed(rng)}." for k in range(4)]
  return " ".join(clauses + [_CLOSERS[rng.choice(len(_CLOSERS), p=_CLOSER_P)]])


def _answer(s: Scene, rng) -> str:
  return _lines_answer(s, rng) if s.task == "lines" else v5g._answer(s, rng)


def reading(answer: str) -> str:
  """The grounded part (what evaluate.score scores): a lines answer's words, a line a row, from its
  clauses ("Line k: w w w,"); any other answer's part before READING_END, as v5's."""
  lines = _CLAUSE.findall(answer)
  return "\n".join(lines) if lines and READING_END not in answer else v5.reading(answer)


STREAM = Stream(VERSION, QUESTIONS, v4.STREAM.scene, v4.STREAM.draw, _answer, v4.STREAM.salts)
draw_record, reserved_scenes, record = STREAM.draw_record, STREAM.reserved_scenes, STREAM.record
render, train_record, write_task = STREAM.render, STREAM.train_record, STREAM.write_task
