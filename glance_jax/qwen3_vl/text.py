"""Qwen3-VL text decoder (HF `Qwen3VLTextModel`, `model.language_model.*`).

Letters: B batch, T new tokens, S cache slots, D width, H q heads, K kv heads, G = H/K q heads per
kv head, hd head dim, F feed-forward width.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
from flax import nnx

from glance_jax import sharding as shd
from glance_jax.config import TextConfig
from glance_jax.qwen3_vl import cache_attention, rope
from glance_jax.qwen3_vl.cache import KVCache, write_rows
from glance_jax.qwen3_vl.layers import Embedding, Linear, RMSNorm


# Query rows per block when a long prompt is prefilled: the fp32 scores of one block, [B,K,G,Q_BLOCK,S],
# are what is live at once instead of [B,K,G,T,S] (an 8k prompt: 2.4 GB per layer and device on a v5e
# with 8 heads each, against 0.15 GB). Decode and verify (T <= a tree's 64 rows) take the dense path.
Q_BLOCK = 512


def attend(q: jax.Array, k, v, mask, q_block: int | None = None) -> jax.Array:
  """GQA attention. q [B,T,H,hd], k/v [B,S,K,hd], mask bool [B,T,S] -> [B,T,H,hd].

  k, v and mask may also be tuples of parts along S (the cache and the new rows, see
  Attention.__call__): one softmax runs over all parts' keys together.
  q head i uses kv head i // G (HF repeat_interleave); softmax in fp32. With q_block < T the query
  rows go through in blocks of q_block (lax.map; each row's softmax is over all S as before, so the
  result is the dense one), padded with masked rows up to a whole number of blocks.
  """
  ks, vs, ms = (x if isinstance(x, tuple) else (x,) for x in (k, v, mask))
  b, t, h, hd = q.shape
  if q_block is not None and t > q_block:
    n = -(-t // q_block)
    pad = n * q_block - t
    blocks = lambda x: jnp.pad(x, ((0, 0), (0, pad)) + ((0, 0),) * (x.ndim - 2)).reshape(  # noqa: E731
        (b, n, q_block) + x.shape[2:]).swapaxes(0, 1)
    o = jax.lax.map(lambda xs: attend(xs[0], ks, vs, tuple(xs[1:])), (blocks(q),) + tuple(blocks(m) for m in ms))
    return o.swapaxes(0, 1).reshape(b, n * q_block, h, hd)[:, :t]           # [B,T,H,hd]
  kvh = ks[0].shape[2]
  q = q.reshape(b, t, kvh, h // kvh, hd)                                  # [B,T,K,G,hd]
  s = jnp.concatenate([jnp.einsum("btkgd,bskd->bkgts", q, k_, preferred_element_type=jnp.float32) for k_ in ks],
                      axis=-1) * hd**-0.5                                 # [B,K,G,T,sum S]
  s = jnp.where(jnp.concatenate(ms, axis=-1)[:, None, None], s, jnp.finfo(jnp.float32).min)
  p = jax.nn.softmax(s, axis=-1)
  parts = jnp.split(p, list(itertools.accumulate(k_.shape[1] for k_ in ks[:-1])), axis=-1)
  o = sum(jnp.einsum("bkgts,bskd->btkgd", p_.astype(v_.dtype), v_) for p_, v_ in zip(parts, vs))
  return o.reshape(b, t, h, hd)


class Attention(nnx.Module):
  def __init__(self, cfg: TextConfig, *, dtype, rngs: nnx.Rngs):
    d, hd = cfg.hidden_size, cfg.head_dim
    self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, hd
    self.q_proj = Linear(d, self.num_heads * hd, axes=(shd.HEADS, shd.EMBED), dtype=dtype, rngs=rngs)
    self.k_proj = Linear(d, self.num_kv_heads * hd, axes=(shd.KV_HEADS, shd.EMBED), dtype=dtype, rngs=rngs)
    self.v_proj = Linear(d, self.num_kv_heads * hd, axes=(shd.KV_HEADS, shd.EMBED), dtype=dtype, rngs=rngs)
    self.o_proj = Linear(self.num_heads * hd, d, axes=(shd.EMBED, shd.HEADS), dtype=dtype, rngs=rngs)
    self.q_norm = RMSNorm(hd, eps=cfg.rms_norm_eps, dtype=dtype)          # per head, before rope
    self.k_norm = RMSNorm(hd, eps=cfg.rms_norm_eps, dtype=dtype)

  def project_kv(self, x, cos, sin):
    """x [B,T,D] -> rotated k, v [B,T,K,hd] (what the cache stores)."""
    b, t, _ = x.shape
    k = self.k_norm(self.k_proj(x).reshape(b, t, self.num_kv_heads, self.head_dim))
    v = self.v_proj(x).reshape(b, t, self.num_kv_heads, self.head_dim)
    return rope.apply_text_rope(k, cos, sin), v

  def __call__(self, x, cos, sin, k_cache, v_cache, start, mask):
    b, t, _ = x.shape
    q = self.q_norm(self.q_proj(x).reshape(b, t, self.num_heads, self.head_dim))
    q = rope.apply_text_rope(q, cos, sin)
    k, v = self.project_kv(x, cos, sin)
    k, v = k.astype(k_cache.dtype), v.astype(v_cache.dtype)
    if t > Q_BLOCK:      # a long prefill (compute-bound): write, then attend to the cache in query blocks
      k_cache, v_cache = write_rows(k_cache, k, start), write_rows(v_cache, v, start)
      o = attend(q, k_cache, v_cache, mask, q_block=Q_BLOCK)
      return self.o_proj(o.reshape(b, t, -1)), k_cache, v_cache
    # Decode / verify: attend to the cache as it was (its slots outside the T new ones) and to the new
    # rows apart, then write the new rows, so that the write is the cache's last use: an in-place
    # update of T rows in HBM. Written first and attended after, the TPU compiler staged a layer's
    # cache in VMEM at batch 8 and wrote all of it back every step (2 x 8.4 MB a layer, 0.6 GB a step).
    s_max = k_cache.shape[1]
    pos = jnp.clip(start, 0, s_max - t)                                   # where write_rows puts them
    slots = jnp.arange(s_max)[None, :]
    outside = (slots < pos[:, None]) | (slots >= pos[:, None] + t)          # [B,S]
    new_mask = jnp.take_along_axis(mask, jnp.broadcast_to((pos[:, None] + jnp.arange(t))[:, None, :], (b, t, t)),
                                   axis=2)                                 # [B,T,T]
    cache_mask = mask & outside[:, None, :]
    o, k_cache, v_cache = cache_attention.attend_cached(   # on TPU a kernel: the [T,S] scores stay on chip
        q, k_cache, v_cache, cache_mask, k, v, new_mask,
        dense=lambda: attend(q, (k_cache, k), (v_cache, v), (cache_mask, new_mask)))
    k_cache, v_cache = write_rows(k_cache, k, start), write_rows(v_cache, v, start)
    return self.o_proj(o.reshape(b, t, -1)), k_cache, v_cache


class MLP(nnx.Module):
  def __init__(self, cfg: TextConfig, *, dtype, rngs: nnx.Rngs):
    d, f = cfg.hidden_size, cfg.intermediate_size
    self.gate_proj = Linear(d, f, axes=(shd.MLP, shd.EMBED), dtype=dtype, rngs=rngs)
    self.up_proj = Linear(d, f, axes=(shd.MLP, shd.EMBED), dtype=dtype, rngs=rngs)
    self.down_proj = Linear(f, d, axes=(shd.EMBED, shd.MLP), dtype=dtype, rngs=rngs)

  def __call__(self, x):
    return self.down_proj(jax.nn.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nnx.Module):
  def __init__(self, cfg: TextConfig, *, dtype, rngs: nnx.Rngs):
    self.input_layernorm = RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps, dtype=dtype)
    self.self_attn = Attention(cfg, dtype=dtype, rngs=rngs)
    self.post_attention_layernorm = RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps, dtype=dtype)
    self.mlp = MLP(cfg, dtype=dtype, rngs=rngs)

  def __call__(self, x, cos, sin, k_cache, v_cache, start, mask):
    a, k_cache, v_cache = self.self_attn(self.input_layernorm(x), cos, sin, k_cache, v_cache, start, mask)
    x = x + a
    x = x + self.mlp(self.post_attention_layernorm(x))
    return x, k_cache, v_cache


class TextModel(nnx.Module):
  def __init__(self, cfg: TextConfig, *, dtype=jnp.float32, rngs: nnx.Rngs):
    self.cfg = cfg
    self.embed_tokens = Embedding(cfg.vocab_size, cfg.hidden_size, axes=(shd.VOCAB, shd.EMBED),
                                  dtype=dtype, rngs=rngs)
    self.layers = nnx.List([DecoderLayer(cfg, dtype=dtype, rngs=rngs) for _ in range(cfg.num_hidden_layers)])
    self.norm = RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps, dtype=dtype)

  def __call__(self, x: jax.Array, positions: jax.Array, cache: KVCache, mask: jax.Array,
               deepstack: jax.Array | None = None, tap_layers: tuple[int, ...] = ()):
    """x [B,T,D] input embeddings; positions int [3,B,T]; mask bool [B,T,S];
    deepstack [n_ds,B,T,D] (zero off the visual rows) added to the OUTPUT of layers 0..n_ds-1.

    Returns (final-normed hidden [B,T,D], cache with the T rows written, {layer: hidden [B,T,D]})
    where the tap of layer i is HF's hidden_states[i + 1] (after the deepstack addition).
    """
    cfg = self.cfg
    cos, sin = rope.text_cos_sin(positions, head_dim=cfg.head_dim, theta=cfg.rope_theta,
                                 mrope_section=cfg.mrope_section, dtype=x.dtype)
    ks, vs, taps = list(cache.k), list(cache.v), {}
    for i, layer in enumerate(self.layers):
      x, ks[i], vs[i] = layer(x, cos, sin, ks[i], vs[i], cache.length, mask)
      if deepstack is not None and i < deepstack.shape[0]:
        x = x + deepstack[i].astype(x.dtype)
      if i in tap_layers:
        taps[i] = x
    return self.norm(x), cache.replace(k=tuple(ks), v=tuple(vs)), taps
