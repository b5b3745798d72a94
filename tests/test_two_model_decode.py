"""Two-model speculation (decode/drafters/two_model.py): a second Qwen3-VL drafts chains of S tokens.

  lossless   a smaller random draft (other widths and depth, its own vision tower) and a noised
             copy of the target (which accepts part of most chains, so rollback by length runs
             every round) each emit AR greedy's tokens on 60 mixed prompts (half with an image,
             stops inside rounds)
  self       the target drafting for itself accepts every chain whole: its cache, positions (after
             an image) and the catch-up of a fully accepted chain's last token are the target's
  sampling   at T = 1 the 2nd and 3rd tokens (the noised copy drafting) follow AR sampling's law (chi-square)
  batch      batch rows == their batch-1 runs
  checks     a draft with another vocabulary, image geometry or tokenizer file is an error naming it
"""

from __future__ import annotations

import dataclasses
import functools
import types

import jax
import numpy as np
import pytest

from glance_jax.config import tiny_config
from glance_jax.decode import generate as gen
from glance_jax.decode.drafters import two_model as tm
from glance_jax.decode.methods import Plan, plan
from glance_jax.decode.policies import Fixed
from tests import decode_fixtures as fx
from tests.test_eagle3_decode import _image_row, mixed_batch

CFG = tiny_config(vocab_size=64, layers=3, deepstack=(0,), vision_depth=1)
SMALL = tiny_config(vocab_size=64, hidden=48, layers=1, heads=2, kv_heads=1, head_dim=24, intermediate=64,
                    deepstack=(), vision_depth=1, vision_hidden=16)
MAX_NEW = 23


@pytest.fixture(scope="module")
def world():
  target = fx.lively_target(CFG, seed=11)
  noise = jax.tree.map(lambda x: x * (1 + 0.05 * np.random.default_rng(5).standard_normal(x.shape)).astype(x.dtype),
                       target.params)
  return types.SimpleNamespace(target=target, small=fx.lively_target(SMALL, seed=12),
                               noisy=dataclasses.replace(target, params=noise), runs={})


def _rows(toks):
  return [list(r[r >= 0]) for r in toks]


def _plan(w, draft, depth):
  d, params = tm.bind(draft, w.target, depth)
  return Plan("two-model", d, params, Fixed(d.num_nodes), depth)


def run(w, which: str, depth: int):
  """A 60-row generation (memoised): (batch, stops, AR reference, result)."""
  if (which, depth) not in w.runs:
    b = mixed_batch(seed=0)
    ar = functools.partial(w.target.generate_greedy, b, MAX_NEW)
    stops = fx.stops_inside_rounds(ar(stop_tokens=(-2, -3))[0][:, 3:])
    p = _plan(w, getattr(w, which), depth)
    args, state = gen.start(w.target, b, p, max_new_tokens=MAX_NEW, stop_tokens=stops)
    w.runs[which, depth] = (b, stops, _rows(ar(stop_tokens=stops)[0]), gen.finish(p, gen.loop(args, state)))
  return w.runs[which, depth]


@pytest.mark.parametrize("which,depth", [("small", 4), ("noisy", 5)])
def test_lossless(world, which, depth):
  _, _, ref, res = run(world, which, depth)
  assert [list(t) for t in res.tokens] == ref
  assert res.num_nodes == depth and res.draft_passes_per_round == depth
  acc = np.concatenate(res.accepted)
  assert acc.max() <= depth
  if which == "noisy":     # whole chains, partial ones and rejections all occur
    assert (acc == depth).sum() >= 20 and ((acc > 0) & (acc < depth)).sum() >= 20 and (acc == 0).sum() >= 5, \
        np.bincount(acc)


def test_a_chain_of_one_is_lossless(world):
  """S = 1: the round's 2-row pass alone drafts (no one-row passes)."""
  _, _, ref, res = run(world, "noisy", 1)
  assert [list(t) for t in res.tokens] == ref and res.draft_passes_per_round == 1
  acc = np.concatenate(res.accepted)
  assert acc.max() == 1 and (acc == 0).any()


def test_the_target_drafting_for_itself_accepts_every_chain(world):
  w = world
  b = mixed_batch(seed=3, rows=12)
  d, params = tm.bind(w.target, w.target, 4)
  p = Plan("two-model", d, params, Fixed(4), 4)
  args, state = gen.start(w.target, b, p, max_new_tokens=MAX_NEW, stop_tokens=())
  res = gen.finish(p, gen.loop(args, state))
  assert [list(t) for t in res.tokens] == _rows(w.target.generate_greedy(b, MAX_NEW, stop_tokens=())[0])
  acc = np.concatenate(res.accepted)
  # every round accepts S = 4 (float rounding between a 1-row and a 5-row pass may flip a near tie)
  assert (acc == 4).mean() >= 0.97, np.bincount(acc)
  assert len(acc) <= 12 * -(-(MAX_NEW - 1) // 5)


def test_sampling_matches_ar_sampling(world):
  """3000 rows of one prompt, the noised copy drafting (its greedy chain is accepted where the
  target's samples agree): the 2nd and 3rd tokens against AR sampling by a chi-square test."""
  fx.assert_samples_like_ar(world.target, tm.bind(world.noisy, world.target, 3), 64)


def test_batch_rows_equal_their_batch_1_runs(world):
  """Rows of the noisy 60-row run (the shortest and the longest with an image) decoded alone: the
  same tokens and the same accepted length every round."""
  b, stops, _, res = run(world, "noisy", 5)
  d, params = tm.bind(world.noisy, world.target, 5)
  lengths = b.attention_mask.sum(1)
  img = [r for r in range(len(lengths)) if b.has_img[r]]
  for r in (min(img, key=lambda r: lengths[r]), max(img, key=lambda r: lengths[r])):
    one = gen.generate(world.target, _image_row(b, r), drafter=(d, params), max_new_tokens=MAX_NEW,
                       stop_tokens=stops)
    assert list(one.tokens[0]) == list(res.tokens[r])
    assert list(one.accepted[0]) == list(res.accepted[r])


def test_a_draft_that_cannot_read_the_targets_prompts_is_an_error(world, tmp_path):
  t = world.target
  other_vocab = dataclasses.replace(SMALL, text=dataclasses.replace(SMALL.text, vocab_size=65))
  with pytest.raises(ValueError, match="text.vocab_size is 65"):
    tm.check_pair(other_vocab, t.config)
  other_patch = dataclasses.replace(SMALL, vision=dataclasses.replace(SMALL.vision, patch_size=14))
  with pytest.raises(ValueError, match="vision_config.patch_size is 14"):
    tm.check_pair(other_patch, t.config)
  with pytest.raises(ValueError, match="text-only draft"):
    tm.check_pair(tiny_config(vocab_size=64, text_only=True), t.config)
  (tmp_path / "d").mkdir(), (tmp_path / "t").mkdir()
  (tmp_path / "d" / "tokenizer.json").write_text("{}")
  (tmp_path / "t" / "tokenizer.json").write_text('{"x": 1}')
  with pytest.raises(ValueError, match="tokenizer.json differ"):
    tm.check_pair(SMALL, t.config, tmp_path / "d", tmp_path / "t")
  with pytest.raises(ValueError, match="needs a draft model"):
    plan(t, "two-model", head=object())
  p = plan(t, "two-model", head=world.small)
  assert p.method == "two-model" and p.drafter.num_nodes == tm.PRESETS["two-model"]
