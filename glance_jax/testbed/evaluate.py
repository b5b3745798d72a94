"""Does the testbed target read its images? Greedy answers to held-out prompts against the truth.

Grounded tasks: exact match of the whole answer, and the share of reference fields matched in order
(a table row "pens: 42", a bar "A is 3", a line of words). Captions have many right answers, so
they are scored on content: the multiset of "<color> <shape>" mentions must equal the scene's.
"""

from __future__ import annotations

import collections
import re

import numpy as np

from glance_jax.data.records import PromptRecord

_MENTION = re.compile(r"\b(red|green|blue|yellow|purple|orange) (circle|square|triangle)\b")


def fields(task: str, answer: str) -> list[str]:
  """The units a grounded answer is made of, in order."""
  if task == "lines":
    return [line.strip() for line in answer.strip().split("\n")]
  return [f.strip(" .") for f in re.split(r"[;,]", answer) if f.strip(" .")]


def score(task: str, prediction: str, reference: str) -> dict[str, float]:
  if task == "caption":
    same = collections.Counter(_MENTION.findall(prediction)) == collections.Counter(_MENTION.findall(reference))
    return {"exact": float(prediction.strip() == reference.strip()), "content": float(same)}
  ref, pred = fields(task, reference), fields(task, prediction)
  hits = sum(1 for i, f in enumerate(ref) if i < len(pred) and pred[i] == f)
  return {"exact": float(prediction.strip() == reference.strip()), "fields": hits / max(len(ref), 1)}


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
                     max_new_tokens: int = 64) -> dict[str, dict[str, float]]:
  """Per task: mean exact match and mean fields (grounded) / content (caption) score, and n."""
  report = {}
  for task, records in records_by_task.items():
    answers = greedy_answers(target, processor, records, max_new_tokens=max_new_tokens)
    scores = [score(task, a, r.answers[0]) for a, r in zip(answers, records)]
    report[task] = {k: float(np.mean([s[k] for s in scores])) for k in scores[0]}
    report[task]["n"] = len(records)
    report[task]["example"] = {"reference": records[0].answers[0], "answer": answers[0]}
  return report
