"""The testbed's two-model draft (testbed/draft_train.py): the target at half depth, trained on the
target's regenerated rows; it pairs with the target (same tokenizer and geometry) and decodes
losslessly with it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from glance_jax.config import tiny_config
from glance_jax.data.records import PromptRecord
from glance_jax.qwen3_vl.inputs import Processor, prepare_inputs
from glance_jax.qwen3_vl.target import load_target
from glance_jax.qwen3_vl.weights import state_tensors
from glance_jax.testbed import draft_train
from glance_jax.testbed.target_train import TargetTrainConfig
from glance_jax.testing.checkpoint import make_tiny_checkpoint
from glance_jax.testing.images import demo_pngs
from glance_jax.train.regenerate import regenerate


@pytest.fixture(scope="module")
def world(tmp_path_factory):
  root = tmp_path_factory.mktemp("draft")
  model = make_tiny_checkpoint(root / "target", tiny_config(layers=4, deepstack=(0,), vision_depth=1), seed=3)
  target = load_target(model, dtype=jnp.float32)
  processor = Processor.from_pretrained(str(model))
  images = demo_pngs(root, 2)
  records = [PromptRecord(id=f"q{i}", task="t", split="train", prompt=f"Describe shape {i}.",
                          images=(images[i % 2],)) for i in range(8)]
  rows = regenerate(target, processor, records, root / "regen" / "t.jsonl", batch_size=4, max_new_tokens=12,
                    progress=False)
  return root, model, target, processor, rows


def test_layer_dropped_keeps_the_first_and_chosen_layers(world, tmp_path):
  root, model, target, _, _ = world
  out = draft_train.layer_dropped(model, tmp_path / "d", (0, 3))
  draft = load_target(out, dtype=jnp.float32)
  assert draft.config.text.num_hidden_layers == 2
  a, b = state_tensors(target.params), state_tensors(draft.params)
  L = draft_train._LAYER
  for key, v in b.items():
    src = key.replace(f"{L}1.", f"{L}3.") if key.startswith(f"{L}1.") else key
    np.testing.assert_array_equal(np.asarray(v), np.asarray(a[src]), err_msg=key)
  assert len(b) < len(a)
  assert (out / "tokenizer.json").read_bytes() == (model / "tokenizer.json").read_bytes()
  with pytest.raises(ValueError, match=r"draft layers \(1, 3\): must be increasing, start at 0"):
    draft_train.layer_dropped(model, tmp_path / "e", (1, 3))


def test_the_trained_draft_learns_the_rows_resumes_and_drafts_losslessly(world, tmp_path):
  from glance_jax.decode.generate import generate
  root, model, target, processor, rows = world
  cfg = TargetTrainConfig(steps=6, batch_size=4, seq_len=96, lr=3e-3, warmup=1, save_every=3, suite_version="v4")
  draft_train.train_draft(model, [rows], tmp_path / "draft", tmp_path / "work", cfg, log_every=1)
  import json
  losses = [json.loads(line)["loss"] for line in (tmp_path / "work" / "target_metrics.jsonl").read_text().splitlines()]
  assert len(losses) == 6 and losses[-1] < losses[0]        # it learns the rows
  # resumable: a longer run starts from the saved state at step 6
  more = draft_train.train_draft(model, [rows], tmp_path / "draft", tmp_path / "work",
                                 TargetTrainConfig(**{**cfg.__dict__, "steps": 8}), log_every=1)
  assert len((tmp_path / "work" / "target_metrics.jsonl").read_text().splitlines()) == 8
  draft = load_target(more, dtype=jnp.float32)
  assert draft.config.text.num_hidden_layers == 2
  inputs = prepare_inputs(processor, ["Describe shape 1.", "Describe shape 5."], [[r] for r in
                          [str(root / "img1.png"), str(root / "img0.png")]])
  ref, _ = target.generate_greedy(inputs, 16, stop_tokens=())
  res = generate(target, inputs, head=draft, method="two-model", max_new_tokens=16, stop_tokens=())
  assert [list(t) for t in res.tokens] == [list(r) for r in ref]
  with pytest.raises(ValueError, match=r"no regenerated rows in \[.*empty.jsonl"):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    draft_train.train_draft(model, [empty], tmp_path / "d2", tmp_path / "w2", cfg)
  jax.clear_caches()
