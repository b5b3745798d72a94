"""Does the testbed target read its images? Greedy answers to held-out prompts against the truth.

Grounded tasks: exact match of the whole answer, and the share of reference fields matched in order
(a table row "pens: 42", a bar "A is 3", a line of words). Captions have many right answers, so
they are scored on content: the multiset of "<color> <shape>" mentions must equal the scene's.

Suites v2 and v3 (score_v2) score against the record's scene, not its one sampled reference string:
the fields a target could read for sure ("clear") and those it could not (small, faint, partly
hidden) are counted apart, chart bars in any order (the answer may run right to left), lines word by
word; v3's captions (mentions in reading order, some shapes faint or hidden) also mention by mention.
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


def score_v2(task: str, prediction: str, scene) -> dict[str, float]:
  """One v2 record against its scene: hits and counts of all, clear and unclear fields (grounded
  tasks), or the content match (captions). No exact match: the reference string is one sample of
  an open answer (separator, bar order, phrasing), so matching it would score the sampling."""
  want, clear = scene.fields, scene.clear
  if task == "caption":
    mentions = [" ".join(m) for m in _MENTION.findall(prediction)]
    content = {"content": float(collections.Counter(mentions) == collections.Counter(want))}
    if "styles" not in scene.draw:   # v2: the mention order is sampled, so only the content counts
      return content
    hit = [i < len(mentions) and mentions[i] == w for i, w in enumerate(want)]   # v3: reading order
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


def pool_scores_v2(scores: list[dict[str, float]]) -> dict[str, float]:
  """Per task: content (captions) and / or fields / fields_clear / fields_unclear = pooled hits /
  count (None when a task has no field of the kind)."""
  out = {}
  if "content" in scores[0]:
    out["content"] = float(np.mean([s["content"] for s in scores]))
    if "all_n" not in scores[0]:
      return out
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
                     max_new_tokens: int = 64, suite_version: str = "v1") -> dict[str, dict[str, float]]:
  """Per task: mean exact match and mean fields (grounded) / content (caption) score, and n
  (v2 and later: pool_scores_v2 of score_v2 against each record's scene, found from its id)."""
  report = {}
  for task, records in records_by_task.items():
    answers = greedy_answers(target, processor, records, max_new_tokens=max_new_tokens)
    if suite_version != "v1":
      from glance_jax.testbed import suites
      s = suites.get(suite_version)
      scenes = [s.record(task, "heldout", s.record_index(r.id))[0] for r in records]
      report[task] = pool_scores_v2([score_v2(task, a, sc) for a, sc in zip(answers, scenes)])
    else:
      scores = [score(task, a, r.answers[0]) for a, r in zip(answers, records)]
      report[task] = {k: float(np.mean([s[k] for s in scores])) for k in scores[0]}
    report[task]["n"] = len(records)
    report[task]["example"] = {"reference": records[0].answers[0], "answer": answers[0]}
  return report
