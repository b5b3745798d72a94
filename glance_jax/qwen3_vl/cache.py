"""The target's fixed-shape KV cache: an explicit pytree passed into and returned from every forward.

Row b holds its valid tokens contiguously in slots [0, length[b]). A forward over T new tokens
writes their K/V at [length, length + T) and attends to the prefix plus whatever the caller's
T x T block mask allows among the new tokens; whether `length` advances is the caller's choice
(prefill / decode advance it; tree verification leaves it and commits the accepted rows itself).
"""

from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp

from glance_jax import sharding as shd
from glance_jax.config import TextConfig


@flax.struct.dataclass
class KVCache:
  k: tuple[jax.Array, ...]   # per layer [B, S_max, kv_heads, head_dim]
  v: tuple[jax.Array, ...]   # per layer [B, S_max, kv_heads, head_dim]
  length: jax.Array          # int32 [B]: valid slots per row

  @property
  def max_length(self) -> int:
    return self.k[0].shape[1]

  @property
  def batch_size(self) -> int:
    return self.k[0].shape[0]


def init_cache(cfg: TextConfig, batch_size: int, max_length: int, dtype=jnp.float32,
               sharding: jax.sharding.Sharding | None = None) -> KVCache:
  shape = (batch_size, max_length, cfg.num_key_value_heads, cfg.head_dim)
  zeros = lambda: jnp.zeros(shape, dtype, device=sharding)  # noqa: E731
  n = cfg.num_hidden_layers
  return KVCache(k=tuple(zeros() for _ in range(n)), v=tuple(zeros() for _ in range(n)),
                 length=jnp.zeros((batch_size,), jnp.int32))


def pin_cache(cache: KVCache, mesh) -> KVCache:
  """The cache in its decode layout (sharding.pin_kv: rows on data, kv heads on tensor)."""
  if mesh is None:
    return cache
  return cache.replace(k=shd.pin_kv(cache.k, mesh), v=shd.pin_kv(cache.v, mesh))


def write_rows(buf: jax.Array, new: jax.Array, start: jax.Array) -> jax.Array:
  """buf [B, S, ...] <- new [B, T, ...] at per-row offsets start [B] (each clamped as
  dynamic_update_slice clamps it).

  At batch 1, one dynamic-update-slice of the whole buffer at (0, start[0], 0, ...): the vmapped
  form lowers to a scatter, and inside the decode loop the TPU compiler laid the cache out for the
  scatter ({3,2,1,0}) apart from the loop carry's layout ({3,1,2,0}: kv heads before slots, as
  attention reads it), copying every layer's whole K and V between the two around each write (0.38
  GB of kv traffic a glance-63 iteration at 8B on v5e against the round's 0.12); the update is in
  place. Above batch 1 the vmapped form stays: one dynamic-update-slice a row brought whole-cache
  copies back at batch 8 (v5e / v6e at 8B: 1.2 GB of kv writes a glance iteration; docs/tpu.md)."""
  new = new.astype(buf.dtype)
  if buf.shape[0] == 1:
    zero = jnp.zeros((), jnp.int32)
    return jax.lax.dynamic_update_slice(buf, new, (zero, start[0].astype(jnp.int32)) + (zero,) * (buf.ndim - 2))
  return jax.vmap(lambda x, n, s: jax.lax.dynamic_update_slice_in_dim(x, n, s, axis=0))(buf, new, start)


def attention_mask(length: jax.Array, block_mask: jax.Array, max_length: int) -> jax.Array:
  """bool [B, T, S_max]: slot s is visible to new token t iff s < length, or s is new token j
  (s = length + j) with block_mask[b, t, j]."""
  t = block_mask.shape[1]
  rel = jnp.arange(max_length)[None, :] - length[:, None]                 # [B, S]
  in_block = (rel >= 0) & (rel < t)
  j = jnp.clip(rel, 0, t - 1)
  from_block = jnp.take_along_axis(block_mask, jnp.broadcast_to(j[:, None, :], block_mask.shape[:2] + (max_length,)),
                                   axis=2)                                # [B, T, S]
  return (rel < 0)[:, None, :] | (in_block[:, None, :] & from_block)


def causal_block_mask(valid: jax.Array) -> jax.Array:
  """valid bool [B, T] -> [B, T, T]: causal among new tokens, padded keys hidden."""
  t = valid.shape[1]
  causal = jnp.tril(jnp.ones((t, t), bool))
  return causal[None] & valid[:, None, :]
