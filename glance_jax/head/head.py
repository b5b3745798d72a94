"""`Head`: a block head bound for decoding (config, graphdef, params), as `Target` is for the target."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp

from glance_jax.static_args import JitArgs

ABLATIONS = ("zero-context",)   # Head.ablated kinds (decode.py bench --ablate)


@dataclasses.dataclass(frozen=True, eq=False)
class Head(JitArgs):
  """`Head(*load_head(path))`, `Head.load(path, target=)` or `Head.random(target)`; its jit
  arguments are `jit_graphdef` and `flat_params` (static_args.JitArgs)."""
  config: Any
  graphdef: Any
  params: Any

  @classmethod
  def load(cls, path_or_repo_id, *, target=None, dtype=None, mesh=None) -> "Head":
    """A DFlash-format head (directory or hub repo id), checked to fit `target` when given, in its
    dtype and on its mesh unless told otherwise."""
    from glance_jax.head.checkpoint import load_head
    return cls(*load_head(path_or_repo_id, dtype=dtype or (target.dtype if target else jnp.float32),
                          mesh=mesh if mesh is not None else getattr(target, "mesh", None),
                          target_config=target.config if target else None))

  @classmethod
  def random(cls, target, *, seed: int = 0, num_layers: int = 5, block_size: int = 16) -> "Head":
    from glance_jax.head.config import HeadConfig
    from glance_jax.head.init import init_head
    cfg = HeadConfig.for_target(target.config, num_layers=num_layers, block_size=block_size)
    return cls(cfg, *init_head(cfg, seed=seed, dtype=target.dtype, mesh=target.mesh))

  def ablated(self, kind: str) -> "Head":
    """The head under an ablation of ABLATIONS, sharing these params. "zero-context": the target's
    tapped features are zeroed before the head reads them (BlockHead.zero_context), so it drafts
    without the conditioning; decoding stays lossless (the target still verifies)."""
    if kind not in ABLATIONS:
      raise ValueError(f"unknown ablation {kind!r}; valid: {', '.join(ABLATIONS)}")
    from glance_jax.head.model import zero_context_graphdef
    return Head(self.config, zero_context_graphdef(self.graphdef, self.params), self.params)
