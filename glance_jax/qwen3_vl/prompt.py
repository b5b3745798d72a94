"""`Prompt`: one batch of right-padded prompts as the model reads them, and the model's prompt forward.

Every causal pass over whole prompts goes through `forward_prompt`: decoding's prefill, the head's
training features, the target's own training loss, the image-swap test and the testbed's probes.
It embeds the tokens, encodes the images when there are any (their rows fill the placeholder
tokens in order), and runs the decoder against a KV cache (a throwaway one of S slots when none is
given), tapping the decoder layers asked for.

Letters: B rows, S padded prompt length, Np image patches (all rows' images in order), P pixel
features per patch.
"""

from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp

from glance_jax.qwen3_vl.cache import KVCache, causal_block_mask, init_cache


@flax.struct.dataclass
class Prompt:
  """Device (or host) arrays of one prefill: a pytree, so it crosses jit boundaries whole."""
  input_ids: jax.Array                          # int32 [B, S], right-padded
  attention_mask: jax.Array                     # bool [B, S]: real tokens
  positions: jax.Array                          # int32 [3, B, S]: MRoPE positions; padding 0
  pixel_values: jax.Array | None = None         # float32 [Np, P]; None without images
  vision_meta: dict[str, jax.Array] | None = None  # the tower's patch tables (vision_meta.VisionMeta)

  @property
  def lengths(self) -> jax.Array:
    """int32 [B]: real tokens per row."""
    return jnp.sum(self.attention_mask.astype(jnp.int32), axis=1)


class PromptForward:
  """The prompt forward of a target module (mixed into Qwen3VL and Qwen3ForCausalLM)."""

  def forward_prompt(self, prompt: Prompt, cache: KVCache | None = None, *, tap_layers: tuple[int, ...] = ()):
    """A causal pass over `prompt` -> (final hidden [B, S, D], cache with rows [length, length + S)
    written (length not advanced), taps {layer: [B, S, D]}). Padded keys are hidden from every row."""
    if cache is None:
      cache = init_cache(self.cfg.text, *prompt.input_ids.shape, self.embed_weight.dtype)
    image_embeds = deepstack = None
    if prompt.pixel_values is not None:
      image_embeds, deepstack = self.encode_images(prompt.pixel_values, prompt.vision_meta)
    return self(prompt.input_ids, prompt.positions, cache, causal_block_mask(prompt.attention_mask.astype(bool)),
                image_embeds=image_embeds, deepstack=deepstack, tap_layers=tuple(tap_layers))
