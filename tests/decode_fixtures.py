"""Shared fixtures for decoding tests: lively random tiny targets and heads, batched prompts."""

from __future__ import annotations

import types

import numpy as np

from glance_jax.bench import random_models
from glance_jax.config import Qwen3VLConfig
from glance_jax.head import Head
from glance_jax.qwen3_vl.positions import get_rope_index
from glance_jax.qwen3_vl.processor import ImageProcessor
from glance_jax.qwen3_vl.target import Target
from tests import oracle


def lively_target(cfg: Qwen3VLConfig, seed: int) -> Target:
  """Target.random's tree with `lively` weights, drawn on the abstract state (lively reads only
  shapes): no random initialiser is compiled (~15 s a call on 2 cores)."""
  return random_models.make_target(cfg, seed)


def lively_head(target: Target, seed: int, num_layers: int = 2) -> Head:
  return random_models.make_head(target, seed, num_layers)


def batch(cfg: Qwen3VLConfig, seed: int, rows: int, with_images: bool, max_len: int = 28):
  """`rows` prompts of random lengths (right-padded to one shape), each with one image or none.

  Prompt tokens are drawn from a small range so that n-gram lookup finds matches."""
  rng = np.random.default_rng(seed)
  ids = np.zeros((rows, max_len), np.int64)
  mask = np.zeros((rows, max_len), bool)
  n_img = 6  # a 64x96 image -> grid (1, 4, 6) -> 6 merged tokens
  for r in range(rows):
    text = list(rng.integers(0, 40, rng.integers(4, max_len - (n_img + 2 if with_images else 0) + 1)))
    row = text
    if with_images:
      cut = int(rng.integers(0, len(text) + 1))
      row = (text[:cut] + [cfg.vision_start_token_id] + [cfg.image_token_id] * n_img
             + [cfg.vision_end_token_id] + text[cut:])
    ids[r, : len(row)] = row
    mask[r, : len(row)] = True
  pixel_values = grid = None
  if with_images:
    proc = ImageProcessor(min_pixels=32 * 32)
    pixel_values, grid = proc(oracle.random_images(seed, [(64, 96)] * rows))
  pos, delta = get_rope_index(ids, mask, grid, None, image_token_id=cfg.image_token_id,
                              video_token_id=cfg.video_token_id)
  return types.SimpleNamespace(input_ids=ids, attention_mask=mask, positions=pos, rope_delta=delta,
                               pixel_values=pixel_values, image_grid_thw=grid)


def sixty_prompts(cfg: Qwen3VLConfig = oracle.CONFIG_A, seeds: tuple[int, int] = (11, 12)):
  """(target, head, batches): a lively target and head, and 60 prompts in 6 batches of 10, every
  other batch with one image per row (the lossless suites' world)."""
  target = lively_target(cfg, seed=seeds[0])
  head = lively_head(target, seed=seeds[1])
  return target, head, [batch(cfg, seed=s, rows=10, with_images=s % 2 == 1) for s in range(6)]


def stops_inside_rounds(free) -> tuple[int, int]:
  """Two stop tokens that AR's free-running outputs `free` (int [B, T], -1 past the end; pass the
  part after the first few tokens) emit mid-sequence: the 2nd and 3rd most frequent, so that stops
  land inside draft blocks and rounds."""
  values, counts = np.unique(free[free >= 0], return_counts=True)
  return tuple(int(v) for v in values[np.argsort(-counts)][1:3])


def assert_samples_like_ar(target, drafter, vocab: int, rows: int = 3000):
  """`rows` copies of one text prompt sampled at T = 1 with AR and with `drafter` (a (Drafter, params)
  pair): the 2nd and 3rd tokens, which the walk decides, follow one law by a chi-square two-sample
  test; the draft is really used (some tokens accepted)."""
  import pytest
  stats = pytest.importorskip("scipy.stats")
  from glance_jax.decode import generate as gen
  ids = np.tile(np.array([[3, 7, 1, 9, 4, 7, 1]]), (rows, 1))
  inputs = types.SimpleNamespace(input_ids=ids, attention_mask=np.ones_like(ids, bool),
                                 positions=np.broadcast_to(np.arange(7), (3, rows, 7)).copy(),
                                 rope_delta=np.zeros(rows, np.int32), pixel_values=None, image_grid_thw=None)

  def sample(seed, **kw):
    return gen.generate(target, inputs, max_new_tokens=3, temperature=1.0, seed=seed, stop_tokens=(), **kw)

  ar, spec = sample(1, method="ar"), sample(2, drafter=drafter)
  assert np.mean(np.concatenate(spec.accepted)) > 0.05
  for k in (1, 2):
    a, b = (np.array([t[k] for t in r.tokens]) for r in (ar, spec))
    assert len(np.unique(a)) > 3
    table = np.stack([np.bincount(a, minlength=vocab), np.bincount(b, minlength=vocab)])
    assert stats.chi2_contingency(table[:, table.sum(0) > 0])[1] > 1e-3


def decode_checkpoints(root) -> None:
  """Checkpoint directories under `root` for the command-line tests: model/ (a tiny random Qwen3-VL,
  sharded files), draft/ (a smaller one with its tokenizer and image geometry: two-model), head/ and
  deep_head/ (DFlash heads; deep_head taps layers model/ lacks; head/ with token_counts.npz and tree_calibration.json),
  eagle3_head/ (midlayer format)."""
  import pathlib
  from glance_jax.config import tiny_config
  from glance_jax.eagle3 import Eagle3Config, init_eagle3, save_eagle3, vocab_map_from_counts
  from glance_jax.head import save_head
  from glance_jax.testing.checkpoint import make_tiny_checkpoint
  root = pathlib.Path(root)
  make_tiny_checkpoint(root / "model", seed=2, max_shard_bytes=200_000)
  make_tiny_checkpoint(root / "draft", tiny_config(layers=1, hidden=32, heads=2, kv_heads=1, head_dim=16,
                                                   intermediate=64, vision_depth=1, deepstack=(0,)), seed=5)
  head = random_models.make_head(random_models.make_target(tiny_config(), 0), 4, 1)
  save_head(root / "head", head.config, head.params)
  from glance_jax.head.draft_vocab import save_counts   # head/ can draft over a vocabulary (--draft-vocab)
  save_counts(root / "head", np.random.default_rng(1).integers(0, 50, head.config.vocab_size))
  from glance_jax.head import tree_calibration as tc   # and rank its trees by calibrated scores
  rng = np.random.default_rng(2)
  depth = head.config.block_size - 1
  tc.save(root / "head", tc.TreeCalibration(spine=np.log(rng.uniform(0.2, 0.9, (depth, 8))).astype(np.float32),
                                            off=np.log(rng.uniform(0.01, 0.3, (depth, 8))).astype(np.float32)))
  deep = random_models.make_head(random_models.make_target(tiny_config(layers=8), 0), 4, 1)
  save_head(root / "deep_head", deep.config, deep.params)
  t = tiny_config().text
  e3 = Eagle3Config(hidden_size=t.hidden_size, intermediate_size=t.intermediate_size,
                    num_attention_heads=t.num_attention_heads, num_key_value_heads=t.num_key_value_heads,
                    head_dim=t.head_dim, vocab_size=t.vocab_size, draft_vocab_size=t.vocab_size // 2,
                    mrope_section=t.mrope_section, aux_layer_ids=(0, 1, t.num_hidden_layers - 1))
  d2t, t2d = vocab_map_from_counts(np.random.default_rng(0).integers(0, 9, t.vocab_size), e3.draft_vocab_size)
  save_eagle3(root / "eagle3_head", e3, init_eagle3(e3, seed=1)[1], d2t, t2d)
