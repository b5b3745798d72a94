"""Testbed suite v5d: v5c with the lines' free part cut to its forks and the caption's lists longer.

Readings are v5b's string for string (as v5c's); only the free part after READING_END changes, and
the table's is v5c's. Each change answers one of v5c's failed must-shows (docs/testbed.md "Suite v5c"):

  lines    "Line 2 seems hot, old and soft." with no connective and no words named: v5c's lines
           answer was 87% free part (15 reading tokens, ~104 free), and the image test's gain is a
           mean over every position of the answer, so the reading's gain (~11 accepted tokens a
           reading position) was spread over 119 positions: +1.45 against the caption's +2.06. The
           named words were copies the head makes from its context whichever image it sees, and
           each connective (a 4-way fork followed by a determined subject) was a root of high
           entropy that a 63-node tree rode to a long run: the top decile of the lines' entropy law
           accepted more than the two below it (isotonic R^2 0.56).
  caption  six to eight of the ten adjectives a clause (v5c: five to seven): more of the open task's
           positions lie in its free part, where the image changes nothing.
  chart    two to four adjectives a clause (v5c: two or three): v5c's chart accepted 8.07 tokens a
           round at N = 63, above the paper's band (2.5-8).

Held-out record i shows v5c's held-out record i, with the same reading.
"""

from __future__ import annotations

from glance_jax.testbed import suite_v4 as v4
from glance_jax.testbed import suite_v5 as v5
from glance_jax.testbed import suite_v5b as v5b
from glance_jax.testbed import suite_v5c as v5c
from glance_jax.testbed.stream import HELDOUT_RESERVED, OFFSET, SPLITS, Scene, Stream, record_index  # noqa: F401

VERSION = "v5d"
GROUNDED, OPEN, TASKS, SIZES = v5.GROUNDED, v5.OPEN, v5.TASKS, v5.SIZES
QUESTIONS = dict(v5.QUESTIONS)
READING_END = v5.READING_END
reading = v5.reading
# The v5c target continued on this stream (it reads these images under these questions; only the
# free parts of three tasks moved): 800 steps, as v5c from v5b (`--init-target testbed/next/target`).
TARGET_TRAIN = {**v5c.TARGET_TRAIN, "init_from": "v5c", "steps": 800}
HEAD_TRAIN = dict(v5c.HEAD_TRAIN)
DRAFT_TRAIN = dict(v5c.DRAFT_TRAIN)
ANSWER_TOKENS = v5.ANSWER_TOKENS

_COUNTS = {"table": v5c._GROUNDED_COUNTS, "chart": (2, 3, 4), "lines": (2, 3), "caption": (6, 7, 8)}
_CAPTION_GAPS = (", ", " and ")
_CAPTION_EXTRA = 1         # clauses a caption says beyond one a shape


def _gapped(rng, options, counts) -> str:
  """A count drawn from `counts` of `options` without repeats, each gap ", " or " and " drawn
  apart: "big, wet and old, tall and dark" (a two-way fork after every adjective but the last)."""
  adj = list(rng.choice(options, size=counts[rng.integers(len(counts))], replace=False))
  return adj[0] + "".join(v5._pick(rng, _CAPTION_GAPS) + a for a in adj[1:])


def _clause(s: Scene, k: int, rng) -> str:
  """The k-th clause for v5._explanation, without a connective: "row 3 looks old and dark", "bar C
  (7) seems hot, old, low and soft", "line 2 appears tall and wet", "it is big, wet, old, ... and dark"."""
  if s.task == "caption":
    return (f"{v5c._CAPTION_SUBJECT} {v5._pick(rng, v5b._CAPTION_VERBS)} "
            f"{_gapped(rng, v5b._CAPTION_ADJECTIVES, _COUNTS['caption'])}")
  subject = f"line {k + 1}" if s.task == "lines" else v5._subject(s, k)
  return f"{subject} {v5._pick(rng, v5._VERBS)} {v5c._adjectives(rng, v5._ADJECTIVES, _COUNTS[s.task])}"


def _answer(s: Scene, rng) -> str:
  # the reading draws first, from the same stream as v5c's, so it is v5c's string for string
  n = len(s.fields) + _CAPTION_EXTRA if s.task == "caption" else None
  return v5c._reading(s, rng) + READING_END + v5._explanation(s, rng, clause=_clause, unled=("caption", "lines"), n=n)


STREAM = Stream(VERSION, QUESTIONS, v4.STREAM.scene, v4.STREAM.draw, _answer, v4.STREAM.salts)
draw_record, reserved_scenes, record = STREAM.draw_record, STREAM.reserved_scenes, STREAM.record
render, train_record, write_task = STREAM.render, STREAM.train_record, STREAM.write_task
