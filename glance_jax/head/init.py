"""`init_head`: a head's (graphdef, params), random or from a DFlash checkpoint.

Above both model.py (the architecture) and checkpoint.py (DFlash files): checkpoint.py builds its
targets from model.abstract_head, so the choice between them lives here, not in model.py.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import Mesh

from glance_jax import sharding as shd
from glance_jax.head import checkpoint
from glance_jax.head.config import HeadConfig
from glance_jax.head.model import BlockHead, abstract_head
from glance_jax.qwen3_vl import leafwise_init


def init_head(cfg: HeadConfig, *, seed: int = 0, dtype=jnp.float32, from_dflash: str | None = None,
              mesh: Mesh | None = None, rules=shd.DEFAULT_RULES) -> tuple[nnx.GraphDef, nnx.State]:
  """(graphdef, params) of a head shaped by `cfg`: random, or the weights of a DFlash checkpoint.

  Random weights are created under jit with out_shardings (no unsharded copy) when a mesh is given.
  With `from_dflash` (a directory or hub repo id, e.g. z-lab/Qwen3-8B-DFlash-b16), every tensor
  shape must fit `cfg`, while `cfg` decides everything that is not a shape: target_layer_ids,
  mask_token_id, rope, block_size. That is how the paper initialises a Qwen3-VL head from a
  text head; pass `read_head_config(dir)` as `cfg` to keep the checkpoint's own choices.
  """
  if from_dflash is not None:
    return checkpoint.load_weights_into(cfg, from_dflash, dtype=dtype, mesh=mesh, rules=rules)
  graphdef, abstract = abstract_head(cfg, dtype)
  if leafwise_init.use_leafwise(abstract):     # an 8B target's head: one program would compile for minutes
    return graphdef, leafwise_init.random_state(abstract, seed, mesh, rules)

  def create():
    return nnx.split(BlockHead(cfg, dtype=dtype, rngs=nnx.Rngs(seed)))[1]

  out = None if mesh is None else shd.state_shardings(abstract, mesh, rules)
  return graphdef, jax.jit(create, out_shardings=out)()
