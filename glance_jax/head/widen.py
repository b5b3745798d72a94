"""The GLANCE head widened alike with its target (glance_jax/qwen3_vl/widen.py), drafting exactly as
before: its residual is tiled `width` times (it embeds block tokens with the widened target's
embedding and decodes with its lm_head), fc reads each tap's tiled feature with weight 1 / width,
and its own heads and MLP units are NOT duplicated (inner factor 1), so the head's share of a
round's cost stays what it was: its weights grow `width` times against the target's width^2.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from glance_jax.qwen3_vl.widen import _check_factors, _tile, widen_layers


def widen_head_state_dict(cfg, sd, width: int, *, tied: bool):
  """A DFlash head's state dict -> (widened HeadConfig, state dict). `tied`: the target ties its
  embeddings (then the final norm carries the 1 / width, as the target's does)."""
  _check_factors(width, 1)
  new_cfg = dataclasses.replace(cfg, hidden_size=cfg.hidden_size * width,
                                target_hidden_size=cfg.target_hidden_size * width)
  out = widen_layers(sd, width, 1)
  for key, w in sd.items():
    if key in out:
      continue
    w = np.asarray(w)
    if key == "fc.weight":      # (hidden, taps * target_hidden): each tap's block of columns tiled
      rows, _ = w.shape
      per_tap = w.reshape(rows, cfg.num_taps, cfg.target_hidden_size)
      wide = _tile(per_tap, width, 2) / np.asarray(width, w.dtype)
      out[key] = _tile(wide.reshape(rows, -1), width, 0)
    elif key == "hidden_norm.weight":
      out[key] = _tile(w, width)
    elif key == "norm.weight":
      out[key] = _tile(w, width) / np.asarray(width if tied else 1, w.dtype)
    else:
      raise ValueError(f"widen: no rule for head key {key!r}")
  return new_cfg, out


def widen_head(head, width: int, *, target):
  """The Head widened for `target` (the widened target it will draft for: its tie flag, dtype, mesh),
  with its token counts (a draft vocabulary is gathered from the widened target afterwards)."""
  import jax.numpy as jnp

  from glance_jax.head.head import Head
  from glance_jax.head.model import abstract_head
  from glance_jax.qwen3_vl.weights import fill_state, state_tensors
  cfg, sd = widen_head_state_dict(head.config, state_tensors(head.params), width,
                                  tied=target.config.tie_word_embeddings)
  cfg.check_target(target.config, where="widen_head")
  graphdef, abstract = abstract_head(cfg, target.dtype)
  params = fill_state(abstract, {k: jnp.asarray(v, target.dtype) for k, v in sd.items()})
  if target.mesh is not None:
    import jax

    from glance_jax import sharding as shd
    params = jax.device_put(params, shd.state_shardings(params, target.mesh))
  from glance_jax.head import parent_correction as pc
  corr = None if head.correction is None else pc.widen(head.correction, width, dtype=target.dtype)
  return Head(cfg, graphdef, params, token_counts=head.token_counts, calibration=head.calibration,
              scores=head.scores, correction=corr, parent=None if head.parent is None else corr)
