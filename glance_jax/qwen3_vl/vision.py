"""Qwen3-VL vision tower (HF `Qwen3VLVisionModel`, `model.visual.*`).

Shapes: N patches (all images concatenated, merge-block order), D vision width, H heads, hd = D/H,
M = N / merge^2 merged tokens, Dt = text width.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from glance_jax import sharding as shd
from glance_jax.config import VisionConfig
from glance_jax.qwen3_vl import rope, text
from glance_jax.qwen3_vl.layers import Embedding, LayerNorm, Linear, _normal, matmul_t


def gelu_tanh(x):
  return jax.nn.gelu(x, approximate=True)


def gelu_erf(x):
  # The mergers use torch.nn.GELU() = exact erf (transformers' Qwen3VLVisionPatchMerger, while the
  # blocks' MLP is gelu_pytorch_tanh); tanh here moves a tiny model's logits by ~8e-4.
  return jax.nn.gelu(x, approximate=False)


class Conv3dAsLinear(nnx.Module):
  """Conv3d with kernel == stride over one (C, T, P, P) patch: a Linear on the flattened patch."""

  def __init__(self, cfg: VisionConfig, *, dtype, rngs: nnx.Rngs):
    shape = (cfg.hidden_size, cfg.in_channels, cfg.temporal_patch_size, cfg.patch_size, cfg.patch_size)
    self.weight = nnx.Param(_normal(rngs, shape, dtype), axes=(shd.EMBED, None, None, None, None))
    self.bias = nnx.Param(jnp.zeros((cfg.hidden_size,), dtype), axes=(shd.NORM,))

  def __call__(self, x):  # [N, C*T*P*P] -> [N, D]
    w = self.weight[...]
    return matmul_t(x.astype(w.dtype), w.reshape(w.shape[0], -1)) + self.bias[...]


class PatchEmbed(nnx.Module):
  def __init__(self, cfg: VisionConfig, *, dtype, rngs: nnx.Rngs):
    self.proj = Conv3dAsLinear(cfg, dtype=dtype, rngs=rngs)

  def __call__(self, x):
    return self.proj(x)


class VisionAttention(nnx.Module):
  def __init__(self, cfg: VisionConfig, *, dtype, rngs: nnx.Rngs):
    d = cfg.hidden_size
    self.num_heads = cfg.num_heads
    self.qkv = Linear(d, 3 * d, axes=(shd.HEADS, shd.EMBED), use_bias=True, dtype=dtype, rngs=rngs)
    self.proj = Linear(d, d, axes=(shd.EMBED, shd.HEADS), use_bias=True, dtype=dtype, rngs=rngs)

  def __call__(self, x, cos, sin, seg_mask):
    n, d = x.shape
    hd = d // self.num_heads
    qkv = self.qkv(x).reshape(n, 3, self.num_heads, hd)                  # rows of W: [q | k | v]
    q, k, v = qkv[:, 0], qkv[:, 1], qkv[:, 2]                             # [N, H, hd]
    q = rope.apply_vision_rope(q, cos, sin)
    k = rope.apply_vision_rope(k, cos, sin)
    # all images' patches in one sequence, block-diagonal mask; in query blocks when long (32 images
    # of 448x448 are 25088 patches: dense fp32 scores would be 40 GB)
    o = text.attend(q[None], k[None], v[None], seg_mask[None], q_block=text.Q_BLOCK)[0]   # [N, H, hd]
    return self.proj(o.reshape(n, d))


class VisionMLP(nnx.Module):
  def __init__(self, cfg: VisionConfig, *, dtype, rngs: nnx.Rngs):
    self.linear_fc1 = Linear(cfg.hidden_size, cfg.intermediate_size, axes=(shd.MLP, shd.EMBED),
                             use_bias=True, dtype=dtype, rngs=rngs)
    self.linear_fc2 = Linear(cfg.intermediate_size, cfg.hidden_size, axes=(shd.EMBED, shd.MLP),
                             use_bias=True, dtype=dtype, rngs=rngs)

  def __call__(self, x):
    return self.linear_fc2(gelu_tanh(self.linear_fc1(x)))


class VisionBlock(nnx.Module):
  def __init__(self, cfg: VisionConfig, *, dtype, rngs: nnx.Rngs):
    self.norm1 = LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps, dtype=dtype)
    self.norm2 = LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps, dtype=dtype)
    self.attn = VisionAttention(cfg, dtype=dtype, rngs=rngs)
    self.mlp = VisionMLP(cfg, dtype=dtype, rngs=rngs)

  def __call__(self, x, cos, sin, seg_mask):
    x = x + self.attn(self.norm1(x), cos, sin, seg_mask)
    return x + self.mlp(self.norm2(x))


class PatchMerger(nnx.Module):
  """2x2 merge + MLP. Main merger: LN over D before the merge; deepstack: LN over 4D after it."""

  def __init__(self, cfg: VisionConfig, *, postshuffle_norm: bool, dtype, rngs: nnx.Rngs):
    md = cfg.merged_dim
    self.postshuffle_norm = postshuffle_norm
    self.norm = LayerNorm(md if postshuffle_norm else cfg.hidden_size, eps=cfg.layer_norm_eps, dtype=dtype)
    self.linear_fc1 = Linear(md, md, axes=(shd.MLP, shd.EMBED), use_bias=True, dtype=dtype, rngs=rngs)
    self.linear_fc2 = Linear(md, cfg.out_hidden_size, axes=(shd.EMBED, shd.MLP), use_bias=True,
                             dtype=dtype, rngs=rngs)
    self.merged_dim = md

  def __call__(self, x):  # [N, D] -> [M, Dt]; 4 consecutive rows are one 2x2 block
    if self.postshuffle_norm:
      x = self.norm(x.reshape(-1, self.merged_dim))
    else:
      x = self.norm(x).reshape(-1, self.merged_dim)
    return self.linear_fc2(gelu_erf(self.linear_fc1(x)))


class VisionModel(nnx.Module):
  def __init__(self, cfg: VisionConfig, *, dtype=jnp.float32, rngs: nnx.Rngs):
    self.cfg = cfg
    self.patch_embed = PatchEmbed(cfg, dtype=dtype, rngs=rngs)
    self.pos_embed = Embedding(cfg.num_position_embeddings, cfg.hidden_size, axes=(None, shd.EMBED),
                               dtype=dtype, rngs=rngs)
    self.blocks = nnx.List([VisionBlock(cfg, dtype=dtype, rngs=rngs) for _ in range(cfg.depth)])
    self.merger = PatchMerger(cfg, postshuffle_norm=False, dtype=dtype, rngs=rngs)
    self.deepstack_merger_list = nnx.List([
        PatchMerger(cfg, postshuffle_norm=True, dtype=dtype, rngs=rngs)
        for _ in cfg.deepstack_visual_indexes])

  def __call__(self, pixel_values: jax.Array, meta: dict[str, jax.Array]):
    """pixel_values [N, C*T*P*P] -> (image_embeds [M, Dt], deepstack [n_ds, M, Dt])."""
    cfg = self.cfg
    x = self.patch_embed(pixel_values)                                    # [N, D]
    table = self.pos_embed.weight[...]
    taps = jnp.take(table, meta["pos_index"], axis=0).astype(jnp.float32)  # [N, 4, D]
    pe = jnp.sum(taps * meta["pos_weight"][..., None], axis=1)            # 4-tap sum in fp32
    x = x + pe.astype(x.dtype)
    cos, sin = rope.vision_cos_sin(meta["rows_cols"], head_dim=cfg.head_dim, theta=cfg.rope_theta)
    seg = meta["segment"]
    seg_mask = seg[:, None] == seg[None, :]                               # [N, N]
    deepstack = []
    for i, block in enumerate(self.blocks):
      x = block(x, cos, sin, seg_mask)
      if i in cfg.deepstack_visual_indexes:
        j = cfg.deepstack_visual_indexes.index(i)
        deepstack.append(self.deepstack_merger_list[j](x))
    return self.merger(x), jnp.stack(deepstack) if deepstack else None
