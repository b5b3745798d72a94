"""Regeneration: the target's greedy answers, written incrementally; a crash resumes with no
duplicate and no lost rows (a torn last line is dropped and redone)."""

import json

import jax.numpy as jnp
import pytest

from glance_jax.data.records import PromptRecord
from glance_jax.demo import default_image
from glance_jax.qwen3_vl.inputs import Processor, prepare_inputs
from glance_jax.qwen3_vl.target import load_target
from glance_jax.testing.checkpoint import make_tiny_checkpoint
from glance_jax.train.regenerate import read_regenerated, regenerate


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
  root = tmp_path_factory.mktemp("regen")
  ckpt = make_tiny_checkpoint(root / "model", seed=5)
  target = load_target(ckpt, dtype=jnp.float32)
  processor = Processor.from_pretrained(str(ckpt))
  paths = []
  for i in range(3):
    p = root / f"img{i}.png"
    default_image(seed=i).save(p)
    paths.append(str(p))
  records = [PromptRecord(id=f"q{i}", task="synthetic", split="train", prompt=f"What is shape {i}?",
                          images=(paths[i % 3],) if i % 3 else ()) for i in range(7)]
  return target, processor, records, root


def test_rows_are_the_targets_greedy_answers(setup):
  target, processor, records, root = setup
  out = regenerate(target, processor, records, root / "a.jsonl", batch_size=3, max_new_tokens=10, progress=False)
  rows = read_regenerated(out)
  assert [r["id"] for r in rows] == [r.id for r in records]
  for rec, row in zip(records[:2], rows[:2]):
    inputs = prepare_inputs(processor, rec.prompt, list(rec.images) or None)
    assert row["prompt_ids"] == [int(t) for t in inputs.input_ids[0]]
    toks, n = target.generate_greedy(inputs, 10)
    assert row["response_ids"] == [int(t) for t in toks[0, : n[0]]]


def test_crash_resumes_without_duplicates_or_losses(setup):
  target, processor, records, root = setup
  full = read_regenerated(regenerate(target, processor, records, root / "full.jsonl", batch_size=3,
                                     max_new_tokens=10, progress=False))
  path = root / "crashed.jsonl"
  regenerate(target, processor, records, path, batch_size=3, max_new_tokens=10, progress=False,
             stop_after_batches=1)
  with open(path, "a") as f:   # a crash in the middle of writing a row
    f.write(json.dumps(full[3])[:25])
  regenerate(target, processor, records, path, batch_size=3, max_new_tokens=10, progress=False)
  rows = read_regenerated(path)
  assert sorted(r["id"] for r in rows) == sorted(r.id for r in records)   # each id exactly once
  assert sorted(rows, key=lambda r: r["id"]) == sorted(full, key=lambda r: r["id"])
  assert path.read_text().endswith("\n")
  again = regenerate(target, processor, records, path, batch_size=3, max_new_tokens=10, progress=False)
  assert len(read_regenerated(again)) == len(records)     # a finished run is a no-op
  assert all(r["prompt_ids"] for r in rows)
