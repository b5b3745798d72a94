"""`Eagle3Head`: the EAGLE-3 draft head, one autoregressive draft step per call.

Semantics follow SafeAILab/EAGLE@cb7e084 `eagle/model/cnets.py` (Model, LlamaDecoderLayeremb) and
SpecForge@a6b6b02 `specforge/modeling/draft/llama3_eagle.py`, which has the same layer:

- `g = fc(concat(low, mid, high))`: 3 tapped target features -> H (no bias). fc runs only on target
  features; a step that feeds the head its own output passes that h as g directly.
- The "midlayer", a Llama decoder layer (no q/k norm, no biases) whose attention input is
  `concat(input_layernorm(embed(token)), hidden_norm(g))`, 2H wide, so q/k/v are 2H -> heads x hd.
  The residual is g itself (un-normed); then post_attention_layernorm + SwiGLU MLP.
- `logits = lm_head(norm(h))` over the draft vocabulary; h (before `norm`) is the next step's g.
- Several layers (`midlayers.{i}`): each is the same midlayer, fed the token embedding again and the
  previous layer's output as its hidden input (our choice: no reference implementation agrees).

Row t pairs (features of token t, token t + 1) and predicts token t + 2. The token embedding is the
target's frozen embed_tokens (passed in), or the head's own copy when its checkpoint has one.

The KV cache is an explicit pytree, passed in and returned (static shapes: S slots per row); a call
writes its T rows at [start, start + T) and attends to the cache through the caller's mask, so a
tree pass can later hand in an ancestor mask. Rope is Qwen3-VL's interleaved MRoPE at 3-D
positions (equal to 1-D rope on text positions), or 1-D rope on the t component when the config
has no mrope_section.

Letters: B batch, T new rows, S cache slots, D width, H q heads, K kv heads, hd head dim,
Vd draft vocabulary, V target vocabulary.
"""

from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from glance_jax import sharding as shd
from glance_jax.config import TextConfig, default_mrope_section
from glance_jax.eagle3.config import Eagle3Config
from glance_jax.qwen3_vl import rope
from glance_jax.qwen3_vl.cache import write_rows
from glance_jax.qwen3_vl.layers import Embedding, Linear, RMSNorm, matmul_t
from glance_jax.qwen3_vl.text import MLP, attend


@flax.struct.dataclass
class Eagle3Cache:
  k: tuple[jax.Array, ...]   # per midlayer [B, S, K, hd], rotated
  v: tuple[jax.Array, ...]   # per midlayer [B, S, K, hd]


def init_cache(cfg: Eagle3Config, batch: int, slots: int, dtype=jnp.float32) -> Eagle3Cache:
  shape = (batch, slots, cfg.num_key_value_heads, cfg.head_dim)
  n = cfg.num_hidden_layers
  return Eagle3Cache(k=tuple(jnp.zeros(shape, dtype) for _ in range(n)),
                     v=tuple(jnp.zeros(shape, dtype) for _ in range(n)))


def causal_mask(start: jax.Array, t: int, slots: int) -> jax.Array:
  """bool [B,T,S]: new row i (written at slot start + i) sees slots <= start + i."""
  row = jnp.asarray(start)[:, None] + jnp.arange(t)[None, :]                # [B,T]
  return jnp.arange(slots)[None, None, :] <= row[:, :, None]


def _mlp_config(cfg: Eagle3Config) -> TextConfig:
  """The SwiGLU MLP is text.MLP; it reads only the widths (the rest fills TextConfig's checks)."""
  return TextConfig(vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size,
                    intermediate_size=cfg.intermediate_size, num_hidden_layers=cfg.num_hidden_layers,
                    num_attention_heads=cfg.num_attention_heads,
                    num_key_value_heads=cfg.num_key_value_heads, head_dim=cfg.head_dim,
                    mrope_section=default_mrope_section(cfg.head_dim))


class Eagle3Attention(nnx.Module):
  """Llama attention over the 2H-wide midlayer input: q/k/v 2H -> heads x hd, no q/k norm."""

  def __init__(self, cfg: Eagle3Config, *, dtype, rngs: nnx.Rngs):
    d2, hd = 2 * cfg.hidden_size, cfg.head_dim
    self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, hd
    self.q_proj = Linear(d2, self.num_heads * hd, axes=(shd.HEADS, shd.EMBED), dtype=dtype, rngs=rngs)
    self.k_proj = Linear(d2, self.num_kv_heads * hd, axes=(shd.KV_HEADS, shd.EMBED), dtype=dtype, rngs=rngs)
    self.v_proj = Linear(d2, self.num_kv_heads * hd, axes=(shd.KV_HEADS, shd.EMBED), dtype=dtype, rngs=rngs)
    self.o_proj = Linear(self.num_heads * hd, cfg.hidden_size, axes=(shd.EMBED, shd.HEADS), dtype=dtype, rngs=rngs)

  def __call__(self, x, cos, sin, k_cache, v_cache, start, mask):
    """x [B,T,2D]; cos/sin [B,T,hd]; k/v_cache [B,S,K,hd]; start int [B]; mask bool [B,T,S]
    -> (out [B,T,D], k_cache, v_cache with the T rows written at [start, start + T))."""
    b, t, _ = x.shape
    q = rope.apply_text_rope(self.q_proj(x).reshape(b, t, self.num_heads, self.head_dim), cos, sin)
    k = rope.apply_text_rope(self.k_proj(x).reshape(b, t, self.num_kv_heads, self.head_dim), cos, sin)
    v = self.v_proj(x).reshape(b, t, self.num_kv_heads, self.head_dim)
    # Written first, then attended through the mask: the draft's cache is small (one layer), so the
    # target's split "old slots + new rows" path buys nothing here.
    k_cache, v_cache = write_rows(k_cache, k, start), write_rows(v_cache, v, start)
    o = attend(q, k_cache.astype(q.dtype), v_cache.astype(q.dtype), mask)                  # [B,T,H,hd]
    return self.o_proj(o.reshape(b, t, -1)), k_cache, v_cache


class MidLayer(nnx.Module):
  """EAGLE-3's decoder layer; attribute names are the checkpoint's (`midlayer.*`)."""

  def __init__(self, cfg: Eagle3Config, *, dtype, rngs: nnx.Rngs):
    d, eps = cfg.hidden_size, cfg.rms_norm_eps
    self.input_layernorm = RMSNorm(d, eps=eps, dtype=dtype)       # on the token embedding
    self.hidden_norm = RMSNorm(d, eps=eps, dtype=dtype)           # on the hidden input g
    self.self_attn = Eagle3Attention(cfg, dtype=dtype, rngs=rngs)
    self.post_attention_layernorm = RMSNorm(d, eps=eps, dtype=dtype)
    self.mlp = MLP(_mlp_config(cfg), dtype=dtype, rngs=rngs)

  def __call__(self, embeds, x, cos, sin, k_cache, v_cache, start, mask):
    """embeds, x [B,T,D] -> (h [B,T,D], k_cache, v_cache)."""
    a_in = jnp.concatenate([self.input_layernorm(embeds.astype(x.dtype)), self.hidden_norm(x)], axis=-1)
    a, k_cache, v_cache = self.self_attn(a_in, cos, sin, k_cache, v_cache, start, mask)
    h = x + a                                                     # residual: g, un-normed
    return h + self.mlp(self.post_attention_layernorm(h)), k_cache, v_cache


class Eagle3Head(nnx.Module):
  """Attribute names are checkpoint keys: a param path joined by '.' is its safetensors key."""

  def __init__(self, cfg: Eagle3Config, *, with_embed: bool = False, dtype=jnp.float32, rngs: nnx.Rngs):
    self.cfg = cfg
    d = cfg.hidden_size
    # Own copy of the target's embed_tokens, only when the checkpoint carries one (frozen either way).
    self.embed_tokens = (Embedding(cfg.vocab_size, d, axes=(shd.VOCAB, shd.EMBED), dtype=dtype, rngs=rngs)
                         if with_embed else None)
    # fc is a down projection of the 3 concatenated taps: (out, in) = (embed, wide), as in DFlash.
    self.fc = Linear(cfg.fc_in_features, d, axes=(shd.EMBED, shd.MLP), dtype=dtype, rngs=rngs)
    if cfg.num_hidden_layers == 1:
      self.midlayer = MidLayer(cfg, dtype=dtype, rngs=rngs)
    else:
      self.midlayers = nnx.List([MidLayer(cfg, dtype=dtype, rngs=rngs) for _ in range(cfg.num_hidden_layers)])
    self.norm = RMSNorm(d, eps=cfg.rms_norm_eps, dtype=dtype)
    self.lm_head = Linear(d, cfg.draft_vocab_size, axes=(shd.VOCAB, shd.EMBED), dtype=dtype, rngs=rngs)

  @property
  def layers(self) -> list[MidLayer]:
    return [self.midlayer] if self.cfg.num_hidden_layers == 1 else list(self.midlayers)

  def embed(self, ids: jax.Array, target_embed: jax.Array | None = None) -> jax.Array:
    """ids int [B,T] -> [B,T,D] by the head's own embed_tokens, else the target's [V,D] table."""
    if self.embed_tokens is not None:
      return self.embed_tokens(ids)
    if target_embed is None:
      raise ValueError("this head has no embed_tokens of its own: pass the target's embed_tokens table")
    return jnp.take(target_embed, ids, axis=0)

  def project(self, feats: jax.Array) -> jax.Array:
    """feats [B,T,3*Dt] (taps concatenated low, mid, high) -> g [B,T,D]."""
    return self.fc(feats)

  def logits(self, h: jax.Array) -> jax.Array:
    """h [B,T,D] (before the final norm) -> draft logits [B,T,Vd] in fp32."""
    return matmul_t(self.norm(h), self.lm_head.weight[...], out_dtype=jnp.float32)

  def __call__(self, g, embeds, positions, cache: Eagle3Cache, start, mask):
    """g [B,T,D] hidden input (project(feats) or the previous step's h); embeds [B,T,D] (embed(ids));
    positions int [3,B,T]; start int [B]; mask bool [B,T,S] over cache slots (causal_mask, or an
    ancestor mask) -> (logits fp32 [B,T,Vd], h [B,T,D] before the final norm, cache)."""
    c = self.cfg
    section = c.mrope_section
    if section is None:  # 1-D rope: every frequency follows the t component
      positions, section = jnp.broadcast_to(positions[:1], positions.shape), default_mrope_section(c.head_dim)
    cos, sin = rope.text_cos_sin(positions, head_dim=c.head_dim, theta=c.rope_theta,
                                 mrope_section=section, dtype=g.dtype)
    x, ks, vs = g, [], []
    for layer, k, v in zip(self.layers, cache.k, cache.v):
      x, k, v = layer(embeds, x, cos, sin, k, v, start, mask)
      ks.append(k)
      vs.append(v)
    return self.logits(x), x, Eagle3Cache(k=tuple(ks), v=tuple(vs))


def abstract_head(cfg: Eagle3Config, *, with_embed: bool = False,
                  dtype=jnp.float32) -> tuple[nnx.GraphDef, nnx.State]:
  """(graphdef, abstract state) at zero memory, every leaf a ShapeDtypeStruct with `axes`."""
  return nnx.split(nnx.eval_shape(lambda: Eagle3Head(cfg, with_embed=with_embed, dtype=dtype, rngs=nnx.Rngs(0))))


def init_eagle3(cfg: Eagle3Config, *, seed: int = 0, with_embed: bool = False,
                dtype=jnp.float32) -> tuple[nnx.GraphDef, nnx.State]:
  """(graphdef, params) with random weights (norms at 1, as a fresh head is trained from)."""
  return nnx.split(Eagle3Head(cfg, with_embed=with_embed, dtype=dtype, rngs=nnx.Rngs(seed)))


# --- the draft vocabulary ------------------------------------------------------------------------

def draft_to_target(ids: jax.Array, d2t: jax.Array) -> jax.Array:
  """Draft ids (any shape) -> target ids: d + d2t[d]."""
  d2t = jnp.asarray(d2t)
  return ids + jnp.take(d2t, ids, axis=0).astype(ids.dtype)


def vocab_map_from_counts(counts, draft_vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
  """Token counts [V] -> (d2t int64 [K], t2d bool [V]) for the K most frequent tokens.

  As EAGLE-3 builds it: the K most frequent ids sorted ascending (`used`), d2t[i] = used[i] - i,
  t2d[v] = v in used. Ties, and zero counts when fewer than K tokens were seen, go to the lower id.
  """
  counts = np.asarray(counts)
  k = int(draft_vocab_size)
  if counts.ndim != 1 or not 0 < k <= counts.shape[0]:
    raise ValueError(f"draft_vocab_size {k} must be in [1, {counts.shape[-1]}] for counts of shape {counts.shape}")
  used = np.sort(np.argsort(-counts, kind="stable")[:k])
  t2d = np.zeros(counts.shape[0], bool)
  t2d[used] = True
  return (used - np.arange(k)).astype(np.int64), t2d


def vocab_map_problem(d2t, t2d) -> str | None:
  """Why (d2t, t2d) is not one draft vocabulary (ids ascending in [0, V), t2d marks exactly them)."""
  d2t, t2d = np.asarray(d2t, np.int64), np.asarray(t2d, bool)
  used = np.arange(d2t.shape[0]) + d2t
  if used.size and (used.min() < 0 or used.max() >= t2d.shape[0] or np.any(np.diff(used) <= 0)):
    return f"'d2t' maps to target ids that are not ascending in [0, {t2d.shape[0]})"
  if int(t2d.sum()) != used.size or (used.size and not t2d[used].all()):
    return f"'t2d' marks {int(t2d.sum())} tokens, not the {used.size} that 'd2t' maps to"
  return None
