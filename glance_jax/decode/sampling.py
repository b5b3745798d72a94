"""The target's own choice at a verified row: argmax at temperature 0, else one sample from the
target's distribution after temperature, top-k and top-p. Each tree row gets an independent draw,
which is what makes the tree walk lossless at T > 0: a node is accepted iff its token equals the
sample drawn at its parent's row, so every committed token is a draw from the target's distribution
given its committed prefix, whatever the draft (the chi-square test in tests/test_decode_sampling.py)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from glance_jax.qwen3_vl.engine import greedy_tokens


@dataclasses.dataclass(frozen=True)
class SamplingConfig:
  temperature: float = 0.0
  top_k: int = 0          # 0 = off
  top_p: float = 1.0      # 1 = off

  def __post_init__(self):
    if self.temperature < 0:
      raise ValueError(f"temperature must be >= 0, got {self.temperature}")
    if self.top_k < 0:
      raise ValueError(f"top_k must be >= 0, got {self.top_k}")
    if not 0 < self.top_p <= 1:
      raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")

  @property
  def greedy(self) -> bool:
    return self.temperature == 0.0

  def choose(self, logits: jax.Array, key: jax.Array) -> jax.Array:
    """choose(logits, key, self): what qwen3_vl.engine.ar_decode calls to draw a token."""
    return choose(logits, key, self)


def filtered_logits(logits: jax.Array, cfg: SamplingConfig) -> jax.Array:
  """logits [..., V] fp32 -> temperature-scaled logits with top-k / top-p cut to -inf."""
  x = logits.astype(jnp.float32) / cfg.temperature
  neg = jnp.finfo(jnp.float32).min
  if cfg.top_k > 0 and cfg.top_k < x.shape[-1]:
    kth = jax.lax.top_k(x, cfg.top_k)[0][..., -1:]
    x = jnp.where(x < kth, neg, x)
  if cfg.top_p < 1.0:
    order = jnp.argsort(-x, axis=-1)
    sorted_x = jnp.take_along_axis(x, order, axis=-1)
    probs = jax.nn.softmax(sorted_x, axis=-1)
    # keep a token if the mass strictly before it is < top_p (the top token is always kept)
    keep_sorted = (jnp.cumsum(probs, axis=-1) - probs) < cfg.top_p
    keep = jnp.zeros_like(keep_sorted).at[..., :].set(
        jnp.take_along_axis(keep_sorted, jnp.argsort(order, axis=-1), axis=-1))
    x = jnp.where(keep, x, neg)
  return x


def choose(logits: jax.Array, key: jax.Array, cfg: SamplingConfig) -> jax.Array:
  """logits [..., V] -> int32 [...]: argmax (T = 0) or an independent sample per row."""
  if cfg.greedy:
    return greedy_tokens(logits)
  return jax.random.categorical(key, filtered_logits(logits, cfg), axis=-1).astype(jnp.int32)


def entropy(logits: jax.Array) -> jax.Array:
  """Shannon entropy (nats) of softmax(logits) at temperature 1: the paper's root entropy H."""
  logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
  return -jnp.sum(jnp.exp(logp) * logp, axis=-1)
