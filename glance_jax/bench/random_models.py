"""Random "lively" models and prompts for the benchmarks that need no checkpoint.

`lively` (glance_jax.testing.random_weights) redraws every matrix N(0, 1/fan_in) with norms around
1, so the targets write varied text and random heads accept little. Sizes: `tiny` is the decode
tests' target, `small` a 20M one, `micro` one layer for smoke tests.
"""

from __future__ import annotations

import types

import jax.numpy as jnp
import numpy as np

from glance_jax.config import Qwen3VLConfig, tiny_config
from glance_jax.head import Head
from glance_jax.head.config import HeadConfig
from glance_jax.head.model import abstract_head
from glance_jax.qwen3_vl.positions import get_rope_index
from glance_jax.qwen3_vl.processor import ImageProcessor
from glance_jax.qwen3_vl.target import Target
from glance_jax.qwen3_vl.weights import abstract_model
from glance_jax.testing.images import random_images
from glance_jax.testing.random_weights import lively


def size_config(name: str) -> Qwen3VLConfig:
  if name == "tiny":        # the decode tests' target (tests/oracle.CONFIG_A)
    return tiny_config()
  if name == "small":       # text 256 / 4 layers / 4 heads / 2 kv / hd 64 / 768 / vocab 32000; vision 2 / 64
    return tiny_config(vocab_size=32000, hidden=256, layers=4, heads=4, kv_heads=2, head_dim=64,
                       intermediate=768, vision_depth=2, vision_hidden=64, vision_heads=4,
                       vision_intermediate=256, num_position_embeddings=256, deepstack=(0, 1))
  if name == "micro":       # for the smoke test only: one layer compiles fastest
    return tiny_config(layers=1, vision_depth=1, deepstack=(0,))
  raise ValueError(f"unknown size {name!r}")


def make_target(cfg: Qwen3VLConfig, seed: int, dtype=jnp.float32) -> Target:
  """= tests/decode_fixtures.lively_target (Target.random, then `lively`) in `dtype`. `lively` redraws
  every leaf from its shape and dtype alone, so it is applied to the abstract state: the same
  weights without compiling the random initialiser (~15 s on this CPU)."""
  graphdef, abstract = abstract_model(cfg, dtype)
  return Target(cfg, graphdef, lively(abstract, seed), dtype)


def make_head(target: Target, seed: int, num_layers: int = 2, dtype=jnp.float32) -> Head:
  """= tests/decode_fixtures.lively_head (init_head, then `lively` with seed + 100) in `dtype`."""
  hc = HeadConfig.for_target(target.config, num_layers=num_layers)
  graphdef, abstract = abstract_head(hc, dtype)
  return Head(hc, graphdef, lively(abstract, seed + 100))


def take_rows(b, rows, pad_to: int | None = None):
  """Rows of a right-padded fixture batch (one image per row or none), optionally re-padded."""
  rows = list(rows)
  ids, mask = np.asarray(b.input_ids)[rows], np.asarray(b.attention_mask)[rows]
  pv = grid = None
  if b.pixel_values is not None:
    g = np.asarray(b.image_grid_thw)
    starts = np.concatenate([[0], np.cumsum(g.prod(-1))])
    pv = np.concatenate([np.asarray(b.pixel_values)[starts[r]:starts[r + 1]] for r in rows])
    grid = g[rows]
  if pad_to is not None:
    width = max(pad_to, int(mask.sum(-1).max()))
    ids = np.pad(ids[:, : width], ((0, 0), (0, max(0, width - ids.shape[1]))))
    mask = np.pad(mask[:, : width], ((0, 0), (0, max(0, width - mask.shape[1]))))
  cfg_ids = b.cfg_ids
  pos, delta = get_rope_index(ids, mask, grid, None, image_token_id=cfg_ids[0], video_token_id=cfg_ids[1])
  return types.SimpleNamespace(input_ids=ids, attention_mask=mask, positions=pos, rope_delta=delta,
                               pixel_values=pv, image_grid_thw=grid, cfg_ids=cfg_ids)


def long_prompt(cfg: Qwen3VLConfig, length: int, seed: int = 0, image: bool = True,
                image_size: tuple[int, int] = (64, 96)):
  """One row of `length` tokens: random text around one image (height, width; 64x96 = 6 merged
  tokens, 448x448 = 196), or text only."""
  rng = np.random.default_rng(seed)
  pv = grid = None
  n_img = 0
  if image:
    pv, grid = ImageProcessor(min_pixels=32 * 32)(random_images(seed, [tuple(image_size)]))
    n_img = int(np.prod(grid[0])) // cfg.vision.spatial_merge_size**2
  if image and length < n_img + 3:
    raise ValueError(f"a {length}-token prompt cannot hold a {n_img}-token image and some text")
  text = rng.integers(0, cfg.text.vocab_size - 16, length - (n_img + 2 if image else 0)).tolist()
  cut = len(text) // 4
  img = [cfg.vision_start_token_id] + [cfg.image_token_id] * n_img + [cfg.vision_end_token_id] if image else []
  ids = np.asarray([text[:cut] + img + text[cut:]], np.int64)
  mask = np.ones_like(ids, bool)
  pos, delta = get_rope_index(ids, mask, grid, None, image_token_id=cfg.image_token_id,
                              video_token_id=cfg.video_token_id)
  return types.SimpleNamespace(input_ids=ids, attention_mask=mask, positions=pos, rope_delta=delta,
                               pixel_values=pv, image_grid_thw=grid,
                               cfg_ids=(cfg.image_token_id, cfg.video_token_id))
