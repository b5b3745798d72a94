"""The EAGLE-3 head widened alike with its target (glance_jax/qwen3_vl/widen.py), drafting exactly as
before, so the rival runs in the testbed's memory-bound regime with the acceptance it was trained to.

As the GLANCE head (head/widen.py), on its residual only, `width` = k times (its heads and MLP units
are not duplicated: its weights grow k times against the target's k^2):
  fc          (D, 3 Dt): each tap's block of columns tiled and / k (the widened target's features
              are tiled), its output rows tiled.
  midlayer    the attention input is concat(input_layernorm(embed), hidden_norm(g)) = [a, b] (2D):
              widened it is [tile(a), tile(b)], so q/k/v tile each half's columns apart, / k; o_proj
              and down_proj write the residual (rows tiled), gate/up read it (columns tiled, / k);
              every norm's weight tiles (RMSNorm of a tiled vector is the tiled RMSNorm).
  lm_head     the head's own draft-vocabulary rows read norm(h): columns tiled, / k (never tied).
  embed       an own embed_tokens copy writes the residual: columns tiled, as the target's.
d2t / t2d, rope and head_dim are unchanged. Powers of two make every division exact.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from glance_jax.qwen3_vl.widen import _check_factors, _reader, _tile

_LAYER = re.compile(r"^(midlayer\.|midlayers\.\d+\.)(.+)$")


def _halves_reader(w: np.ndarray, k: int) -> np.ndarray:
  """(out, 2D) reading [a, b] -> (out, 2kD) reading [tile(a), tile(b)]: each half tiled apart, / k."""
  a, b = np.split(w, 2, axis=1)
  return np.concatenate([_reader(a, k), _reader(b, k)], axis=1)


def _widen_layer(name: str, w: np.ndarray, k: int) -> np.ndarray:
  if name in ("input_layernorm.weight", "hidden_norm.weight", "post_attention_layernorm.weight"):
    return _tile(w, k)
  if name in ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"):
    return _halves_reader(w, k)
  if name in ("self_attn.o_proj.weight", "mlp.down_proj.weight"):
    return _tile(w, k, 0)
  if name in ("mlp.gate_proj.weight", "mlp.up_proj.weight"):
    return _reader(w, k)
  raise ValueError(f"widen: no rule for EAGLE-3 midlayer key {name!r}")


def widen_eagle3_state_dict(cfg, sd, width: int):
  """An EAGLE-3 head's state dict (midlayer keys, no d2t / t2d) -> (widened Eagle3Config, state dict)."""
  _check_factors(width, 1)
  new_cfg = dataclasses.replace(cfg, hidden_size=cfg.hidden_size * width,
                                target_hidden_size=cfg.feature_size * width)
  out = {}
  for key, w in sd.items():
    w = np.asarray(w)
    m = _LAYER.match(key)
    if m:
      out[key] = _widen_layer(m.group(2), w, width)
    elif key == "fc.weight":    # (D, 3 * Dt): each tap's block of columns tiled, / k; rows tiled
      per_tap = w.reshape(w.shape[0], 3, cfg.feature_size)
      wide = _tile(per_tap, width, 2) / np.asarray(width, w.dtype)
      out[key] = _tile(wide.reshape(w.shape[0], -1), width, 0)
    elif key == "norm.weight":
      out[key] = _tile(w, width)
    elif key == "lm_head.weight":
      out[key] = _reader(w, width)
    elif key == "embed_tokens.weight":
      out[key] = _tile(w, width, 1)
    else:
      raise ValueError(f"widen: no rule for EAGLE-3 head key {key!r}")
  return new_cfg, out


def widen_eagle3(head, width: int, *, target):
  """An Eagle3Checkpoint widened for `target` (the widened target it drafts for: its dtype, mesh)."""
  import jax.numpy as jnp

  from glance_jax.eagle3.checkpoint import EMBED_KEY, Eagle3Checkpoint
  from glance_jax.eagle3.model import abstract_head
  from glance_jax.qwen3_vl.weights import fill_state, state_tensors
  sd = state_tensors(head.params)
  cfg, wide = widen_eagle3_state_dict(head.cfg, sd, width)
  cfg.check_target(target.config, where="widen_eagle3")
  graphdef, abstract = abstract_head(cfg, with_embed=EMBED_KEY in sd, dtype=target.dtype)
  params = fill_state(abstract, {k: jnp.asarray(v, target.dtype) for k, v in wide.items()})
  if target.mesh is not None:
    import jax

    from glance_jax import sharding as shd
    params = jax.device_put(params, shd.state_shardings(params, target.mesh))
  return Eagle3Checkpoint(cfg, graphdef, params, head.d2t, head.t2d)
