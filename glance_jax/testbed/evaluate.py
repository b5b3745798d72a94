"""Does the testbed target read its images? Greedy answers to held-out prompts against the truth.

Answers are scored against the record's scene, not its one sampled reference string: the fields a
target could read for sure ("clear") and those it could not (small, faint, partly hidden) are
counted apart; table rows ("pens: 42") in order, chart bars ("A is 3") in any order (the answer may
run right to left), lines word by word; captions by content (the multiset of "<color> <shape>"
mentions must equal the scene's) and mention by mention in reading order.
"""

from __future__ import annotations

import collections
import re

import numpy as np

from glance_jax.data.records import PromptRecord
from glance_jax.testbed import suites

_MENTION = re.compile(r"\b(red|green|blue|yellow|purple|orange) (circle|square|triangle)\b")


def fields(task: str, answer: str) -> list[str]:
  """The units a grounded answer is made of, in order."""
  if task == "lines":
    return [line.strip() for line in answer.strip().split("\n")]
  return [f.strip(" .") for f in re.split(r"[;,]", answer) if f.strip(" .")]


def score(task: str, prediction: str, scene) -> dict[str, float]:
  """One record against its scene: hits and counts of all, clear and unclear fields (captions: their
  mentions, plus the content match). No exact match: the reference string is one sample of an open
  answer (separator, bar order, phrasing), so matching it would score the sampling."""
  want, clear = scene.fields, scene.clear
  if task == "caption":
    mentions = [" ".join(m) for m in _MENTION.findall(prediction)]
    content = {"content": float(collections.Counter(mentions) == collections.Counter(want))}
    hit = [i < len(mentions) and mentions[i] == w for i, w in enumerate(want)]   # reading order
    return {**content, **_field_counts(hit, clear)}
  if task == "chart":        # order-free: the bars' "X is h" as a set (letters are distinct)
    got = set(fields(task, prediction))
    hit = [w in got for w in want]
  elif task == "lines":      # word by word, in reading order
    words = prediction.split()
    hit = [i < len(words) and words[i] == w for i, w in enumerate(want)]
  else:
    got = fields(task, prediction)
    hit = [i < len(got) and got[i] == w for i, w in enumerate(want)]
  return _field_counts(hit, clear)


def _field_counts(hit: list[bool], clear: tuple[bool, ...]) -> dict[str, int]:
  out = {"all_hits": sum(hit), "all_n": len(hit)}
  for name, flag in (("clear", True), ("unclear", False)):
    out[f"{name}_hits"] = sum(h for h, c in zip(hit, clear) if c == flag)
    out[f"{name}_n"] = sum(1 for c in clear if c == flag)
  return out


def pool_scores(scores: list[dict[str, float]]) -> dict[str, float]:
  """Per task: content (captions) and fields / fields_clear / fields_unclear = pooled hits / count
  (None when a task has no field of the kind)."""
  out = {}
  if "content" in scores[0]:
    out["content"] = float(np.mean([s["content"] for s in scores]))
  for name, key in (("all", "fields"), ("clear", "fields_clear"), ("unclear", "fields_unclear")):
    n = sum(s[f"{name}_n"] for s in scores)
    out[key] = sum(s[f"{name}_hits"] for s in scores) / n if n else None
    out[f"n_{key}"] = n
  return out


def greedy_answers(target, processor, records: list[PromptRecord], *, max_new_tokens: int = 64,
                   batch_size: int = 8) -> list[str]:
  """The target's greedy answers (the AR loop of decode.generate), decoded to text."""
  from glance_jax.decode.generate import generate
  from glance_jax.qwen3_vl.inputs import prepare_inputs
  out = []
  for i in range(0, len(records), batch_size):
    chunk = records[i: i + batch_size]
    inputs = prepare_inputs(processor, [r.prompt for r in chunk], [list(r.images) for r in chunk])
    res = generate(target, inputs, method="ar", max_new_tokens=max_new_tokens)
    out += [processor.tokenizer.decode([int(t) for t in toks], skip_special_tokens=True) for toks in res.tokens]
  return out


def heldout_accuracy(target, processor, records_by_task: dict[str, list[PromptRecord]], *,
                     max_new_tokens: int | None = None, suite_version: str = suites.DEFAULT) -> dict[str, dict[str, float]]:
  """Per task: pool_scores of each answer's reading part (the suite's `reading`) against its record's
  scene (found from its id), and n. max_new_tokens defaults to the suite's ANSWER_TOKENS."""
  s = suites.get(suite_version)
  report = {}
  for task, records in records_by_task.items():
    answers = greedy_answers(target, processor, records, max_new_tokens=max_new_tokens or s.ANSWER_TOKENS)
    scenes = [s.record(task, "heldout", s.record_index(r.id))[0] for r in records]
    report[task] = pool_scores([score(task, s.reading(a), sc) for a, sc in zip(answers, scenes)])
    report[task]["n"] = len(records)
    report[task]["example"] = {"reference": records[0].answers[0], "answer": answers[0]}
  return report
