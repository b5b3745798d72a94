"""A function-preserving widening of a Qwen3 / Qwen3-VL decoder (Net2Net-style), for a cost regime.

A small trained target fits in a CPU's caches, so its AR step is compute-bound and a verify pass of
16-64 rows costs many AR steps; a user's accelerator at batch 1 is memory-bound instead. Widening
the trained target k times gives a model whose every logit is the small one's (up to float
rounding) but whose AR step is a read of k^2 times the weights: the acceptance of the trained pair
in the cost regime of a large model. Nothing is stored: the wide model is derived at load time.

With residual factor `width` = k and inner factor `inner` = m (attention heads and MLP units):
  residual   every residual vector is tiled k times, h' = [h, h, ..., h] (copy-major, d -> k d):
             RMSNorm(h') = tile(RMSNorm(h)) exactly, since mean(h'^2) = mean(h^2); its weight tiles.
  readers    a linear reading the residual (q/k/v, gate/up, fc, an untied lm_head) gets its input
             columns tiled and divided by k: W' h' = W h.
  writers    a linear writing the residual (o_proj, down_proj, the vision mergers' last layer, the
             embedding) gets its output rows tiled.
  inner      heads (q heads with their kv heads, so each group keeps its kv head: q head c nq + i
             reads kv head c nkv + i // g) and MLP units are duplicated m times, copy-major, and the
             writer after them reads each copy with weight 1 / m.
  tied head  with tied embeddings lm_head = E' = tile(E) is not divided, so the final norm's weight
             is (tile / k) instead: logits' = (h'' w / k) . E' = logits.
head_dim, rope, q/k norms, softmax scale and the vision tower are unchanged (the mergers' outputs
tile). Powers of two for k and m make every division exact; sums then differ from the small model's
only in their order (logits agree to ~1e-6 relative, tests/test_widen.py).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Mapping

import numpy as np

from glance_jax.config import Qwen3VLConfig

_LAYER = re.compile(r"^(.*layers\.\d+\.)(.+)$")


def _tile(w: np.ndarray, k: int, axis: int = 0) -> np.ndarray:
  """k copies along `axis`, copy-major (index c * n + j holds j)."""
  return np.concatenate([w] * k, axis=axis) if k > 1 else w


def _reader(w: np.ndarray, k: int) -> np.ndarray:
  """(out, d) -> (out, k d): input columns tiled, / k."""
  return _tile(w, k, 1) / np.asarray(k, w.dtype) if k > 1 else w


def widen_layer(name: str, w: np.ndarray, width: int, inner: int) -> np.ndarray:
  """One decoder-layer tensor (a Qwen3 layer key without its `...layers.i.` prefix)."""
  if name in ("input_layernorm.weight", "post_attention_layernorm.weight"):
    return _tile(w, width)
  if name in ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
              "mlp.gate_proj.weight", "mlp.up_proj.weight"):
    return _tile(_reader(w, width), inner, 0)
  if name in ("self_attn.o_proj.weight", "mlp.down_proj.weight"):
    return _tile(_reader(w, inner), width, 0)
  if name in ("self_attn.q_norm.weight", "self_attn.k_norm.weight"):
    return w
  raise ValueError(f"widen: no rule for decoder-layer key {name!r} (biases and other layer kinds are "
                   f"not supported)")


def widen_layers(sd: Mapping[str, np.ndarray], width: int, inner: int) -> dict[str, np.ndarray]:
  """The decoder-layer entries of a state dict, widened; other keys are left out."""
  out = {}
  for key, w in sd.items():
    m = _LAYER.match(key)
    if m:
      out[key] = widen_layer(m.group(2), np.asarray(w), width, inner)
  return out


def _check_factors(width: int, inner: int) -> None:
  for flag, v in (("width", width), ("inner", inner)):
    if not isinstance(v, int) or v < 1:
      raise ValueError(f"widen: {flag} must be an integer >= 1, got {v!r}")


def widen_config(cfg: Qwen3VLConfig, width: int, inner: int) -> Qwen3VLConfig:
  """The widened architecture: hidden x width; heads, kv heads and MLP units x inner."""
  _check_factors(width, inner)
  t = cfg.text
  text = dataclasses.replace(t, hidden_size=t.hidden_size * width, intermediate_size=t.intermediate_size * inner,
                             num_attention_heads=t.num_attention_heads * inner,
                             num_key_value_heads=t.num_key_value_heads * inner)
  vision = None if cfg.vision is None else dataclasses.replace(cfg.vision, out_hidden_size=text.hidden_size)
  return dataclasses.replace(cfg, text=text, vision=vision)


def widen_state_dict(cfg: Qwen3VLConfig, sd: Mapping[str, np.ndarray], width: int,
                     inner: int) -> tuple[Qwen3VLConfig, dict[str, np.ndarray]]:
  """A target's HF state dict (our keys) -> (widened config, widened state dict)."""
  new_cfg = widen_config(cfg, width, inner)
  out = widen_layers(sd, width, inner)
  lm = "model.language_model."
  for key, w in sd.items():
    if key in out:
      continue
    w = np.asarray(w)
    if key == lm + "embed_tokens.weight":
      out[key] = _tile(w, width, 1)
    elif key == lm + "norm.weight":
      out[key] = _tile(w, width) / np.asarray(width if cfg.tie_word_embeddings else 1, w.dtype)
    elif key == "lm_head.weight":
      out[key] = _reader(w, width)
    elif re.fullmatch(r"model\.visual\.(merger|deepstack_merger_list\.\d+)\.linear_fc2\.(weight|bias)", key):
      out[key] = _tile(w, width, 0)
    elif key.startswith("model.visual."):
      out[key] = w                                   # the vision tower itself is unchanged
    else:
      raise ValueError(f"widen: no rule for target key {key!r}")
  return new_cfg, out


def widen_target(target, width: int, inner: int | None = None):
  """The Target widened (inner defaults to width), on the same mesh and in the same dtype."""
  from glance_jax.qwen3_vl.target import Target
  from glance_jax.qwen3_vl.weights import from_state_dict, state_tensors
  inner = width if inner is None else inner
  cfg, sd = widen_state_dict(target.config, state_tensors(target.params), width, inner)
  graphdef, params = from_state_dict(cfg, sd, dtype=target.dtype)
  wide = Target(cfg, graphdef, params, target.dtype, None, target.path)
  return wide.shard(target.mesh) if target.mesh is not None else wide
