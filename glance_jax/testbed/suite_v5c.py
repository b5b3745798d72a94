"""Testbed suite v5c: v5b with the explanations' forks in runs and without the caption's free subject.

Readings are v5b's string for string (the target keeps reading them); only the free part after
READING_END changes. Each change answers one of the shipped v5b pair's failed must-shows
(docs/testbed.md "The shipped suite: v5b"):

  caption clauses  "It seems big, wet, old, tall and dark." instead of "Shape 2 seems ...": the
                   subject "Shape k" is 8 pieces of the shipped 512-token vocabulary that a head
                   with its context zeroed drafts for free (29% of the zeroed head's accepted tokens
                   on v5b; zeroed tau 1.38 against the bound 1.3). "It" is two pieces; a clause
                   says five to seven of the ten adjectives (v5b: four to six).
  grounded clauses two or three adjectives (v5b: always three), so after the first the list may
                   end (" and") or go on (","): forks in runs, as the caption's, whose law passes
                   (b1/se 11.5, isotonic R^2 0.94). v5b's grounded forks were each followed by a
                   determined token, so 79-84% of their rounds began below 0.01 nats and the
                   separator's two-way roots (H = ln 2, the next field determined) accepted the
                   most: no monotone law on table and lines.
  lines clauses    name the line's first and last word ("Line 2 (sky, low) seems ..."): more of the
                   lines' free part rests on what was read (v5b's image gain on lines, +1.50 tokens
                   a round, was below the caption's +1.96).

Held-out record i shows v5b's held-out record i, with the same reading.
"""

from __future__ import annotations

from glance_jax.testbed import suite_v4 as v4
from glance_jax.testbed import suite_v5 as v5
from glance_jax.testbed import suite_v5b as v5b
from glance_jax.testbed.stream import HELDOUT_RESERVED, OFFSET, SPLITS, Scene, Stream, record_index  # noqa: F401

VERSION = "v5c"
GROUNDED, OPEN, TASKS, SIZES = v5.GROUNDED, v5.OPEN, v5.TASKS, v5.SIZES
QUESTIONS = dict(v5.QUESTIONS)
READING_END = v5.READING_END
reading = v5.reading
# The shipped v5b target continued on this stream (it reads these images under these questions
# already; only the free part moved): 800 steps, as v5b from v5 (`--init-target testbed/target`).
TARGET_TRAIN = {**v5b.TARGET_TRAIN, "init_from": "v5b", "steps": 800}
HEAD_TRAIN = dict(v5b.HEAD_TRAIN)
DRAFT_TRAIN = dict(v5b.DRAFT_TRAIN)
ANSWER_TOKENS = v5.ANSWER_TOKENS

_GROUNDED_COUNTS = (2, 3)          # adjectives a grounded clause says, drawn uniformly
_CAPTION_SUBJECT = "it"
# Five to seven adjectives a caption clause (v5b: four to six): the two-piece subject left the
# shortest captions at 85 tokens, and a longer free part spreads the caption's image gain (its
# reading) over more rounds, as an open task's should be spread.
_CAPTION_COUNTS = (5, 6, 7)


def _grounded_subject(s: Scene, k: int) -> str:
  """v5's subject, but a lines clause names its line's first and last word: "line 2 (sky, low)"."""
  if s.task == "lines":
    return f"line {k + 1} ({s.fields[3 * k]}, {s.fields[3 * k + 2]})"
  return v5._subject(s, k)


def _adjectives(rng, options, counts) -> str:
  """v5._listed of a count drawn from `counts`."""
  return v5._listed(rng, options, counts[rng.integers(len(counts))])


def _clause(s: Scene, k: int, rng) -> str:
  """The k-th clause for v5._explanation, without its connective: "row 3 looks old and dark",
  "line 2 (sky, low) seems hot, old and soft", "it seems big, wet, old, tall and dark"."""
  if s.task == "caption":
    return (f"{_CAPTION_SUBJECT} {v5._pick(rng, v5b._CAPTION_VERBS)} "
            f"{_adjectives(rng, v5b._CAPTION_ADJECTIVES, _CAPTION_COUNTS)}")
  return f"{_grounded_subject(s, k)} {v5._pick(rng, v5._VERBS)} {_adjectives(rng, v5._ADJECTIVES, _GROUNDED_COUNTS)}"


def _reading(s: Scene, rng) -> str:
  return v5b._caption_reading(s, rng) if s.task == "caption" else v5._reading(s, rng)


def _answer(s: Scene, rng) -> str:
  # the reading draws first, from the same stream as v5b's, so it is v5b's string for string
  return _reading(s, rng) + READING_END + v5._explanation(s, rng, clause=_clause)


STREAM = Stream(VERSION, QUESTIONS, v4.STREAM.scene, v4.STREAM.draw, _answer, v4.STREAM.salts)
draw_record, reserved_scenes, record = STREAM.draw_record, STREAM.reserved_scenes, STREAM.record
render, train_record, write_task = STREAM.render, STREAM.train_record, STREAM.write_task
