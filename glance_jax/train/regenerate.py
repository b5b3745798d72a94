"""Regeneration: the frozen target's own greedy answers to prompt records, the head's training data.

Rows are appended to a JSONL file batch by batch (flushed and fsynced), so a crash loses at most the
batch in flight. A restart reads the file back, drops a torn last line, and skips every id already
written: no duplicates, no lost rows. Output row (one JSON object per line):

  id, task, split, prompt, images      as in the task file (glance_jax.data.records)
  prompt_ids    [int]  the rendered chat prompt, image placeholders expanded
  response_ids  [int]  the target's greedy continuation (stop token included when it stopped)
  response      str    response_ids decoded (special tokens skipped)
  stopped       bool   False when max_new_tokens cut the answer
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
from typing import Iterable, Sequence

import numpy as np

from glance_jax.progress import Progress

logger = logging.getLogger(__name__)


def read_done_ids(path: pathlib.Path) -> set[str]:
  """Ids already written; a torn last line (crash mid-write) is cut off the file."""
  if not path.exists():
    return set()
  ids: set[str] = set()
  good_bytes = 0
  with open(path, "rb") as f:
    for raw in f:
      if not raw.endswith(b"\n"):
        break
      try:
        ids.add(json.loads(raw)["id"])
      except (json.JSONDecodeError, KeyError):
        break
      good_bytes += len(raw)
  if good_bytes != path.stat().st_size:
    logger.warning("%s: dropping a torn last line after %d complete rows", path, len(ids))
    with open(path, "r+b") as f:
      f.truncate(good_bytes)
  return ids


def _bucket(n: int, multiple: int) -> int:
  return -(-n // multiple) * multiple


def regenerate(target, processor, records: Iterable, out_path: str | os.PathLike, *, batch_size: int = 8,
               max_new_tokens: int = 256, length_multiple: int = 64, progress: bool = True,
               stop_after_batches: int | None = None) -> pathlib.Path:
  """Writes the target's greedy answers to `records` (PromptRecords) into `out_path`, resuming.

  Prompts are right-padded to a multiple of `length_multiple` so that batches share compiled
  shapes. `stop_after_batches` exists for crash tests.
  """
  from glance_jax.decode.generate import generate
  from glance_jax.qwen3_vl.inputs import prepare_inputs
  out_path = pathlib.Path(out_path)
  out_path.parent.mkdir(parents=True, exist_ok=True)
  done = read_done_ids(out_path)
  todo = [r for r in records if r.id not in done]
  seen: set[str] = set()
  todo = [r for r in todo if not (r.id in seen or seen.add(r.id))]
  bar = Progress(len(todo) + len(done), "regenerate", unit="prompt", initial=len(done), enabled=progress)
  with open(out_path, "a", encoding="utf-8") as f:
    for i in range(0, len(todo), batch_size):
      if stop_after_batches is not None and i // batch_size >= stop_after_batches:
        break
      chunk = todo[i: i + batch_size]
      inputs = _pad_inputs(prepare_inputs(processor, [r.prompt for r in chunk],
                                          [list(r.images) for r in chunk]), length_multiple, processor)
      res = generate(target, inputs, method="ar", max_new_tokens=max_new_tokens)
      stops = set(target.config.eos_token_ids)
      for r, row_ids, n, toks in zip(chunk, inputs.input_ids, inputs.lengths, res.tokens):
        toks = [int(t) for t in toks]
        f.write(json.dumps({
            "id": r.id, "task": r.task, "split": r.split, "prompt": r.prompt, "images": list(r.images),
            "prompt_ids": [int(t) for t in row_ids[:n]], "response_ids": toks,
            "response": processor.tokenizer.decode(toks, skip_special_tokens=True),
            "stopped": bool(toks and toks[-1] in stops)}) + "\n")
      f.flush()
      os.fsync(f.fileno())
      bar.update(len(chunk))
  bar.close()
  return out_path


def read_regenerated(path: str | os.PathLike) -> list[dict]:
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f if line.endswith("\n")]


def _pad_inputs(inputs, multiple: int, processor):
  """Right-pads a ModelInputs batch to a length bucket (positions of padding are 0, as HF's)."""
  import dataclasses
  s = inputs.input_ids.shape[1]
  target_len = _bucket(s, multiple)
  if target_len == s:
    return inputs
  pad = target_len - s
  return dataclasses.replace(
      inputs,
      input_ids=np.pad(inputs.input_ids, ((0, 0), (0, pad)), constant_values=processor.pad_token_id),
      attention_mask=np.pad(inputs.attention_mask, ((0, 0), (0, pad))),
      positions=np.pad(inputs.positions, ((0, 0), (0, 0), (0, pad))))


def records_from_rows(rows: Sequence[dict]):
  """Rows of a regenerated file back to PromptRecords (for re-running or evaluation)."""
  from glance_jax.data.records import PromptRecord
  return [PromptRecord(id=r["id"], task=r["task"], split=r["split"], prompt=r["prompt"], images=r["images"])
          for r in rows]
