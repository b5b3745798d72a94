"""`BlockHead`: the DFlash block-diffusion draft head, drafting a whole block in one forward pass.

Semantics follow z-lab/dflash@44947fb `dflash/model.py` (DFlashDraftModel, Qwen3DFlashAttention,
Qwen3DFlashDecoderLayer), and SpecForge@a6b6b023 `specforge/modeling/draft/dflash.py`, which has
the same layer:

- Context: `target_hidden = hidden_norm(fc(concat(taps)))` ONCE per token (DFlashDraftModel.forward).
  It is NOT passed through any layer's `input_layernorm`: each layer feeds the same projected
  context straight into its own `k_proj` / `v_proj` (Qwen3DFlashAttention.forward).
- Layer: pre-norm Qwen3 block on the noise stream only: `x + attn(input_layernorm(x), ctx)`, then
  `x + mlp(post_attention_layernorm(x))`; a final `norm` after the last layer.
- Attention: Q from the block only (q_norm, rope at the block's positions); K = k_norm(k_proj(.))
  and V = v_proj(.) of the context and of the block, concatenated [context ; block]. k_norm applies
  to both parts (it runs on the concatenation, per head). Non-causal (`is_causal = False`).
- Rope: one position list [context ; block]; keys rotate at their own positions, queries at the
  last q_len (the block's). The draft KV cache keeps only context K/V (post-rope) and is cropped
  back to `start` after every pass, so context K/V is computed once per committed token.
- No embedding / lm_head of its own: the block `[root, MASK x (B-1)]` is embedded by the target's
  `embed_tokens` and hidden states go through the target's `lm_head`; slot k predicts the token at
  position start + k (no shift).

The context is "strictly before the root": at decode time the cache holds the target's features of
committed tokens only (the root has not been fed to the target yet); SpecForge's training mask
(`create_dflash_block_mask`) allows context kv < anchor plus the own block, bidirectionally.

Rope is Qwen3-VL's interleaved MRoPE (`rope.text_cos_sin`), so image rows of the context keep
their 3-D positions; on text positions (t = h = w) it equals the 1-D rope DFlash uses.

Letters: B batch, T context tokens being projected, S context cache slots, Q block slots,
D head width, Dt target width, K kv heads, hd head dim.
"""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
from flax import nnx

from glance_jax import sharding as shd
from glance_jax.config import TextConfig
from glance_jax.head.config import HeadConfig
from glance_jax.qwen3_vl import rope
from glance_jax.qwen3_vl.layers import Linear, RMSNorm
from glance_jax.qwen3_vl.text import DecoderLayer, attend


def text_config(cfg: HeadConfig) -> TextConfig:
  """The head's layers are Qwen3 decoder layers of this shape (vocab unused by them)."""
  return TextConfig(vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size,
                    intermediate_size=cfg.intermediate_size, num_hidden_layers=cfg.num_hidden_layers,
                    num_attention_heads=cfg.num_attention_heads,
                    num_key_value_heads=cfg.num_key_value_heads, head_dim=cfg.head_dim,
                    rms_norm_eps=cfg.rms_norm_eps, rope_theta=cfg.rope_theta,
                    mrope_section=cfg.mrope_section)


class HeadLayer(DecoderLayer):
  """A DFlash layer: the target's Qwen3 decoder layer (same parameters, same names:
  input_layernorm, self_attn.{q,k,v,o}_proj, self_attn.{q,k}_norm, post_attention_layernorm,
  mlp.{gate,up,down}_proj) with attention over [context ; block] instead of a causal cache."""

  def context_kv(self, ctx: jax.Array, cos: jax.Array, sin: jax.Array) -> tuple[jax.Array, jax.Array]:
    """ctx [B,T,D] (already fc + hidden_norm; no input_layernorm) -> rotated k, v [B,T,K,hd]."""
    return self.self_attn.project_kv(ctx, cos, sin)

  def __call__(self, x, cos, sin, ctx_k, ctx_v, mask):
    """x [B,Q,D]; cos/sin [B,Q,hd]; ctx_k/ctx_v [B,S,K,hd]; mask bool [B,Q,S+Q] -> [B,Q,D]."""
    attn = self.self_attn
    b, q_len, _ = x.shape
    h = self.input_layernorm(x)
    q = attn.q_norm(attn.q_proj(h).reshape(b, q_len, attn.num_heads, attn.head_dim))
    q = rope.apply_text_rope(q, cos, sin)                                  # [B,Q,H,hd]
    k_blk, v_blk = attn.project_kv(h, cos, sin)                            # [B,Q,K,hd]
    k = jnp.concatenate([ctx_k.astype(k_blk.dtype), k_blk], axis=1)        # [B,S+Q,K,hd]
    v = jnp.concatenate([ctx_v.astype(v_blk.dtype), v_blk], axis=1)
    o = attend(q, k, v, mask)                                              # [B,Q,H,hd]
    x = x + attn.o_proj(o.reshape(b, q_len, -1))
    return x + self.mlp(self.post_attention_layernorm(x))


class BlockHead(nnx.Module):
  """Attribute names are DFlash checkpoint keys: a param path joined by '.' is its key."""

  def __init__(self, cfg: HeadConfig, *, dtype=jnp.float32, rngs: nnx.Rngs, zero_context: bool = False):
    self.cfg = cfg
    # Ablation (decode.py bench --ablate zero-context): the target's tapped features are replaced by
    # zeros before fc, so the head drafts from the block alone. A static attribute: it lives in the
    # graphdef (a separate compile), not in the params, so checkpoints are unaffected.
    self.zero_context = bool(zero_context)
    tcfg = text_config(cfg)
    # fc is a down projection of the concatenated taps: (out, in) = (embed, wide), like mlp.down_proj.
    self.fc = Linear(cfg.fc_in_features, cfg.hidden_size, axes=(shd.EMBED, shd.MLP), dtype=dtype, rngs=rngs)
    self.hidden_norm = RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps, dtype=dtype)
    self.layers = nnx.List([HeadLayer(tcfg, dtype=dtype, rngs=rngs) for _ in range(cfg.num_hidden_layers)])
    self.norm = RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps, dtype=dtype)

  def _cos_sin(self, positions: jax.Array, dtype) -> tuple[jax.Array, jax.Array]:
    c = self.cfg
    return rope.text_cos_sin(positions, head_dim=c.head_dim, theta=c.rope_theta,
                             mrope_section=c.mrope_section, dtype=dtype)

  def project_context(self, feats: jax.Array) -> jax.Array:
    """feats [B,T,n_taps*Dt] (taps concatenated in target_layer_ids order) -> ctx [B,T,D]."""
    if self.zero_context:
      feats = jnp.zeros_like(feats)
    return self.hidden_norm(self.fc(feats))

  def context_kv(self, ctx: jax.Array,
                 positions: jax.Array) -> tuple[tuple[jax.Array, ...], tuple[jax.Array, ...]]:
    """ctx [B,T,D], positions int [3,B,T] -> (k per layer [B,T,K,hd], v per layer [B,T,K,hd]).

    What the draft's context cache stores: rows are independent, so they can be computed once per
    committed token and appended, in any chunking.
    """
    cos, sin = self._cos_sin(positions, ctx.dtype)
    kv = [layer.context_kv(ctx, cos, sin) for layer in self.layers]
    return tuple(k for k, _ in kv), tuple(v for _, v in kv)

  def __call__(self, noise: jax.Array, noise_positions: jax.Array, ctx_k: Sequence[jax.Array],
               ctx_v: Sequence[jax.Array], mask: jax.Array) -> jax.Array:
    """noise [B,Q,D] (target-embedded block tokens), noise_positions int [3,B,Q],
    ctx_k/ctx_v per layer [B,S,K,hd], mask bool [B,Q,S+Q] over [context slots ; block slots]
    -> hidden [B,Q,D] after the final norm (logits = hidden @ target lm_head.T, in fp32).

    Decoding uses `block_mask`; the packed training pass uses one row of blocks per sequence with
    a mask that lets block j see context < anchor_j and its own block only.
    """
    if len(ctx_k) != len(self.layers) or len(ctx_v) != len(self.layers):
      raise ValueError(f"ctx_k/ctx_v hold {len(ctx_k)}/{len(ctx_v)} layers, the head has {len(self.layers)}")
    b, q_len, _ = noise.shape
    s = ctx_k[0].shape[1]
    if mask.shape != (b, q_len, s + q_len):
      raise ValueError(f"mask shape {mask.shape} != (batch, block, context + block) = "
                       f"{(b, q_len, s + q_len)}")
    cos, sin = self._cos_sin(noise_positions, noise.dtype)
    x = noise
    for layer, k, v in zip(self.layers, ctx_k, ctx_v):
      x = layer(x, cos, sin, k, v, mask)
    return self.norm(x)


def block_mask(ctx_len: jax.Array, ctx_slots: int, block: int) -> jax.Array:
  """Decoding mask [B,Q,S+Q]: context slots < ctx_len[b] (strictly before the root), whole block."""
  ctx = jnp.arange(ctx_slots)[None, :] < jnp.asarray(ctx_len)[:, None]    # [B,S]
  ctx = jnp.broadcast_to(ctx[:, None, :], (ctx.shape[0], block, ctx_slots))
  blk = jnp.ones((ctx.shape[0], block, block), bool)
  return jnp.concatenate([ctx, blk], axis=-1)


def abstract_head(cfg: HeadConfig, dtype=jnp.float32) -> tuple[nnx.GraphDef, nnx.State]:
  """(graphdef, abstract state) at zero memory, every leaf a ShapeDtypeStruct with `axes`."""
  return nnx.split(nnx.eval_shape(lambda: BlockHead(cfg, dtype=dtype, rngs=nnx.Rngs(0))))


def zero_context_graphdef(graphdef: nnx.GraphDef, params: nnx.State) -> nnx.GraphDef:
  """The same head with `zero_context` set: pairs with the unchanged `params` (no copy)."""
  head = nnx.merge(graphdef, params)
  head.zero_context = True
  return nnx.split(head)[0]


def param_count(state: nnx.State) -> int:
  """Number of scalars in a (possibly abstract) state."""
  return sum(int(v.get_value().size) for _, v in nnx.to_flat_state(state))
