"""Shared fixtures for the training tests: a tiny target and batches of prompt + response rows."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from flax import nnx

from glance_jax.config import Qwen3VLConfig, tiny_config
from glance_jax.head.config import HeadConfig
from glance_jax.head.model import abstract_head
from glance_jax.qwen3_vl.processor import ImageProcessor
from glance_jax.qwen3_vl.target import Target
from glance_jax.qwen3_vl.weights import abstract_model
from glance_jax.testing.random_weights import lively
from glance_jax.train.batch import Example, collate
from tests import oracle

# 4 decoder layers (head taps (1, 3): layer 1 is inside the deepstack range), 2 vision blocks.
TARGET_CFG = tiny_config(vision_depth=2, deepstack=(0, 1))
SEQ_LEN = 32
MAX_PATCHES = 64     # two 64x96 images (24 patches each) + padding


def lively_target(cfg: Qwen3VLConfig, seed: int) -> Target:
  """Lively random weights written straight into the abstract model (no jitted random init:
  that compile is most of a tiny test's time)."""
  graphdef, abstract = abstract_model(cfg, jnp.float32)
  return Target(cfg, graphdef, lively(abstract, seed))


def lively_head(hc: HeadConfig, seed: int) -> tuple[nnx.GraphDef, nnx.State]:
  graphdef, abstract = abstract_head(hc, jnp.float32)
  return graphdef, lively(abstract, seed)


def examples(cfg: Qwen3VLConfig, rows: int, seed: int, *, images: bool = True) -> list[Example]:
  """Even rows carry one 64x96 image (6 placeholders) in the prompt when `images`; responses are
  10..17 tokens from a small range, so a head can learn them."""
  rng = np.random.default_rng(seed)
  proc = ImageProcessor(min_pixels=32 * 32)
  out = []
  for r in range(rows):
    prompt = list(rng.integers(40, 60, int(rng.integers(2, 5))))
    pv = grid = None
    if images and r % 2 == 0:
      pv, grid = proc(oracle.random_images(seed * 10 + r, [(64, 96)]))
      n = int(np.prod(grid) // cfg.vision.spatial_merge_size**2)
      prompt += [cfg.vision_start_token_id] + [cfg.image_token_id] * n + [cfg.vision_end_token_id, 41]
    response = list(rng.integers(0, 12, int(rng.integers(10, 18))))
    ids = np.asarray(prompt + response, np.int64)
    mask = np.asarray([False] * len(prompt) + [True] * len(response))
    out.append(Example(ids, mask, pv, grid, example_id=f"ex{seed}_{r}"))
  return out


def image_batch(cfg: Qwen3VLConfig, rows: int = 2, seed: int = 0):
  return collate(examples(cfg, rows, seed), cfg, seq_len=SEQ_LEN, max_patches=MAX_PATCHES)


def text_batch(cfg: Qwen3VLConfig, rows: int = 2, seed: int = 0):
  return collate(examples(cfg, rows, seed, images=False), cfg, seq_len=SEQ_LEN)
