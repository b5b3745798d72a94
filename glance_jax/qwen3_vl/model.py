"""Qwen3-VL for conditional generation (HF `Qwen3VLForConditionalGeneration`).

The attribute tree mirrors HF's module tree, so a parameter path joined with '.' is its checkpoint
key (`model.language_model.layers.0.self_attn.q_proj.weight`, ...). `lm_head` is absent when the
embeddings are tied, as in the checkpoint.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from glance_jax import sharding as shd
from glance_jax.config import Qwen3VLConfig
from glance_jax.qwen3_vl.cache import KVCache, attention_mask
from glance_jax.qwen3_vl.layers import Linear, matmul_t
from glance_jax.qwen3_vl.prompt import PromptForward
from glance_jax.qwen3_vl.text import TextModel
from glance_jax.qwen3_vl.vision import VisionModel


class Qwen3VLModel(nnx.Module):
  def __init__(self, cfg: Qwen3VLConfig, *, dtype, rngs: nnx.Rngs):
    self.visual = VisionModel(cfg.vision, dtype=dtype, rngs=rngs)
    self.language_model = TextModel(cfg.text, dtype=dtype, rngs=rngs)


def scatter_visual(ids_mask: jax.Array, rows: jax.Array) -> jax.Array:
  """Places rows [M, D] at the True positions of ids_mask [B, T], in row-major order
  (HF masked_scatter); zeros elsewhere. Returns [B, T, D]."""
  flat = ids_mask.reshape(-1)
  idx = jnp.clip(jnp.cumsum(flat) - 1, 0, rows.shape[0] - 1)
  out = jnp.where(flat[:, None], jnp.take(rows, idx, axis=0), 0)
  return out.reshape(ids_mask.shape + (rows.shape[-1],))


class Qwen3VL(PromptForward, nnx.Module):
  """The frozen target. Functional use: split once, merge inside every jitted entry point."""

  def __init__(self, cfg: Qwen3VLConfig, *, dtype=jnp.float32, rngs: nnx.Rngs):
    self.cfg = cfg
    self.model = Qwen3VLModel(cfg, dtype=dtype, rngs=rngs)
    if not cfg.tie_word_embeddings:
      self.lm_head = Linear(cfg.text.hidden_size, cfg.text.vocab_size, axes=(shd.VOCAB, shd.EMBED),
                            dtype=dtype, rngs=rngs)

  @property
  def embed_weight(self) -> jax.Array:
    return self.model.language_model.embed_tokens.weight[...]

  @property
  def lm_head_weight(self) -> jax.Array:
    if self.cfg.tie_word_embeddings:
      return self.embed_weight
    return self.lm_head.weight[...]

  def embed(self, ids: jax.Array) -> jax.Array:
    return self.model.language_model.embed_tokens(ids)

  def logits(self, h: jax.Array) -> jax.Array:
    """fp32 logits whatever the compute dtype (greedy ties in bf16 break losslessness checks)."""
    return matmul_t(h, self.lm_head_weight, out_dtype=jnp.float32)

  def encode_images(self, pixel_values: jax.Array, meta: dict[str, jax.Array]):
    return self.model.visual(pixel_values, meta)

  def __call__(self, ids: jax.Array, positions: jax.Array, cache: KVCache, block_mask: jax.Array, *,
               image_embeds: jax.Array | None = None, deepstack: jax.Array | None = None,
               tap_layers: tuple[int, ...] = ()):
    """One forward over T new tokens per row against the cache.

    ids int [B,T]; positions int [3,B,T]; block_mask bool [B,T,T] (which new tokens see which);
    image_embeds [M,Dt] and deepstack [n_ds,M,Dt] fill the image/video placeholder rows in order.
    Returns (final hidden [B,T,Dt], cache with rows [length, length+T) written, taps).
    """
    cfg = self.cfg
    x = self.embed(ids)
    ds = None
    if image_embeds is not None:
      vis = (ids == cfg.image_token_id) | (ids == cfg.video_token_id)
      x = jnp.where(vis[..., None], scatter_visual(vis, image_embeds).astype(x.dtype), x)
      if deepstack is not None:
        ds = jax.vmap(lambda d: scatter_visual(vis, d))(deepstack)         # [n_ds, B, T, Dt]
    mask = attention_mask(cache.length, block_mask, cache.max_length)
    return self.model.language_model(x, positions, cache, mask, ds, tap_layers)


def build_model(cfg: Qwen3VLConfig, *, dtype=jnp.float32, rngs: nnx.Rngs) -> nnx.Module:
  """The target module for `cfg`: Qwen3VL, or Qwen3ForCausalLM for a text-only (vision=None) config."""
  if cfg.text_only:
    from glance_jax.qwen3_vl.text_only import Qwen3ForCausalLM
    return Qwen3ForCausalLM(cfg, dtype=dtype, rngs=rngs)
  return Qwen3VL(cfg, dtype=dtype, rngs=rngs)
