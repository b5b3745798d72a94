"""Rotary embeddings: the text decoder's interleaved MRoPE and the vision tower's 2-D axial rope.

The two follow different dtype paths in transformers, and the port keeps both (a bf16 parity trap):
text cos/sin are cast to the activation dtype and the rotation runs in that dtype; the vision
rotation upcasts q/k to fp32, rotates, and casts back.
"""

from __future__ import annotations

import numpy as np
import jax
import jax.numpy as jnp

from glance_jax.qwen3_vl.layers import rotate_half


def inv_freq(dim: int, theta: float) -> np.ndarray:
  """1 / theta^(2i/dim) in fp32, as torch computes it (arange in int64, then float32 pow)."""
  exponent = np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / np.float32(dim)
  return (np.float32(1.0) / np.power(np.float32(theta), exponent, dtype=np.float32)).astype(np.float32)


def mrope_axis_of_freq(head_dim: int, mrope_section: tuple[int, int, int]) -> np.ndarray:
  """[head_dim/2] -> which position axis (0=t, 1=h, 2=w) drives each frequency.

  Interleaved layout: j % 3 == 1 (j < 3*s_h) -> h, j % 3 == 2 (j < 3*s_w) -> w, else t.
  NOT Qwen2-VL's chunked [t | h | w] layout.
  """
  half = head_dim // 2
  axis = np.zeros((half,), np.int32)
  s_t, s_h, s_w = mrope_section
  del s_t
  j = np.arange(half)
  axis[(j % 3 == 1) & (j < 3 * s_h)] = 1
  axis[(j % 3 == 2) & (j < 3 * s_w)] = 2
  return axis


def text_cos_sin(positions: jax.Array, *, head_dim: int, theta: float,
                 mrope_section: tuple[int, int, int], dtype) -> tuple[jax.Array, jax.Array]:
  """positions int [3, B, T] (t, h, w) -> cos, sin [B, T, head_dim] in `dtype`."""
  inv = jnp.asarray(inv_freq(head_dim, theta))                            # [hd/2]
  axis = mrope_axis_of_freq(head_dim, mrope_section)                      # [hd/2] static
  pos = positions.astype(jnp.float32)[axis]                               # [hd/2, B, T]
  freqs = jnp.moveaxis(pos, 0, -1) * inv                                  # [B, T, hd/2] fp32
  emb = jnp.concatenate([freqs, freqs], axis=-1)                          # [B, T, hd]
  return jnp.cos(emb).astype(dtype), jnp.sin(emb).astype(dtype)


def apply_text_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
  """x [B, T, H, hd]; cos/sin [B, T, hd] in x's dtype (HF rotates in the activation dtype)."""
  cos, sin = cos[:, :, None, :], sin[:, :, None, :]
  return x * cos + rotate_half(x) * sin


def vision_cos_sin(rows_cols: jax.Array, *, head_dim: int, theta: float) -> tuple[jax.Array, jax.Array]:
  """rows_cols int [N, 2] (unmerged patch row, col) -> fp32 cos, sin [N, head_dim].

  Layout [h-freqs | w-freqs | h-freqs | w-freqs], head_dim/4 frequencies per axis.
  """
  inv = jnp.asarray(inv_freq(head_dim // 2, theta))                       # [hd/4]
  rc = rows_cols.astype(jnp.float32)
  f = jnp.concatenate([rc[:, :1] * inv, rc[:, 1:] * inv], axis=-1)        # [N, hd/2]
  emb = jnp.concatenate([f, f], axis=-1)                                  # [N, hd]
  return jnp.cos(emb), jnp.sin(emb)


def apply_vision_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
  """x [N, H, hd] -> rotated in fp32, cast back to x's dtype."""
  xf = x.astype(jnp.float32)
  out = xf * cos[:, None, :] + rotate_half(xf) * sin[:, None, :]
  return out.astype(x.dtype)
