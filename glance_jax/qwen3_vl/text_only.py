"""A text-only Qwen3 target (HF `Qwen3ForCausalLM`, model_type "qwen3") from the Qwen3-VL modules.

Qwen3's decoder is the Qwen3-VL text decoder (q/k norms, GQA, SwiGLU) with 1-D rope; our interleaved
MRoPE equals 1-D rope when the three position components are equal, which `get_rope_index` gives every
prompt without image placeholders (positions = token index). Only the checkpoint keys differ:
`model.layers.*` / `model.embed_tokens` / `model.norm` instead of `model.language_model.*`, and there
is no `model.visual`. The attribute tree below mirrors that, so the path -> key map stays the identity.
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


class Qwen3ForCausalLM(PromptForward, nnx.Module):
  """Same interface as `Qwen3VL` (embed, logits, __call__), for configs with `vision=None`."""

  def __init__(self, cfg: Qwen3VLConfig, *, dtype=jnp.float32, rngs: nnx.Rngs):
    if not cfg.text_only:
      raise ValueError("Qwen3ForCausalLM needs a text-only config (vision=None)")
    self.cfg = cfg
    self.model = TextModel(cfg.text, dtype=dtype, rngs=rngs)
    if not cfg.tie_word_embeddings:
      self.lm_head = Linear(cfg.text.hidden_size, cfg.text.vocab_size, axes=(shd.VOCAB, shd.EMBED),
                            dtype=dtype, rngs=rngs)

  @property
  def embed_weight(self) -> jax.Array:
    return self.model.embed_tokens.weight[...]

  @property
  def lm_head_weight(self) -> jax.Array:
    return self.embed_weight if self.cfg.tie_word_embeddings else self.lm_head.weight[...]

  def embed(self, ids: jax.Array) -> jax.Array:
    return self.model.embed_tokens(ids)

  def logits(self, h: jax.Array) -> jax.Array:
    return matmul_t(h, self.lm_head_weight, out_dtype=jnp.float32)

  def encode_images(self, pixel_values, meta):
    raise ValueError("a text-only Qwen3 target (model_type 'qwen3') has no vision tower: pass no images")

  def __call__(self, ids: jax.Array, positions: jax.Array, cache: KVCache, block_mask: jax.Array, *,
               image_embeds=None, deepstack=None, tap_layers: tuple[int, ...] = ()):
    """As `Qwen3VL.__call__`; positions [3,B,T] hold three equal copies of the 1-D position."""
    if image_embeds is not None:
      raise ValueError("a text-only Qwen3 target takes no image embeddings")
    mask = attention_mask(cache.length, block_mask, cache.max_length)
    return self.model(self.embed(ids), positions, cache, mask, None, tap_layers)
