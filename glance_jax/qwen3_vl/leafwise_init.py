"""Random weights leaf by leaf, for models too large to initialise in one program.

`Target.random` and `init_head` build the whole model under one jit. At the 8B size that program
took over 9.5 minutes to compile on an H200 (jax 0.11.2; the XLA GPU compiler on ~400 RNG leaves
in one module) and on CPU it holds the fp32 draws and threefry bits of every leaf at once (a
4-layer cut of the 8B ran a 24 GB host out of memory). Here each leaf is drawn by its own small
jitted program, one compile per distinct (shape, dtype, sharding): 36 identical layers share theirs,
and the peak is one leaf's temporaries.

The distributions are the model's own (qwen3_vl/layers.py): every matrix (>= 2 dims; linear,
embedding, patch-embed conv) normal(0, 0.02), every 1-dim `weight` (RMSNorm, LayerNorm) ones,
every `bias` zeros. The draws are not the one-program init's (leaf i draws from
fold_in(key(seed), i)), so it is used above LEAFWISE_ABOVE parameters only: every testbed and
test model is far smaller and keeps its exact weights.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh

from glance_jax import sharding as shd

LEAFWISE_ABOVE = 1_000_000_000   # parameters: the 4B draft and the 8B target, nothing trained here
STD = 0.02                       # = layers._normal's std (transformers' initializer_range)


def param_count(abstract: nnx.State) -> int:
  return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(abstract))


def use_leafwise(abstract: nnx.State) -> bool:
  return param_count(abstract) > LEAFWISE_ABOVE


@functools.lru_cache(maxsize=None)
def _draw(shape: tuple[int, ...], dtype, kind: str, sharding):
  """The jitted draw of one leaf shape: normal(0, STD) from a key, or ones / zeros."""
  def draw(key):
    if kind == "normal":
      return (STD * jax.random.normal(key, shape, jnp.float32)).astype(dtype)
    return (jnp.ones if kind == "ones" else jnp.zeros)(shape, dtype)
  return jax.jit(draw, out_shardings=sharding)


def leaf_kind(path: tuple, ndim: int) -> str:
  name = str(path[-1])
  if ndim >= 2:
    return "normal"
  if name == "bias":
    return "zeros"
  if name == "weight":
    return "ones"
  raise ValueError(f"leafwise init: no rule for the {ndim}-dim parameter {'.'.join(map(str, path))} "
                   "(rules: >= 2 dims normal, 1-dim weight ones, bias zeros)")


def random_state(abstract: nnx.State, seed: int, mesh: Mesh | None = None, rules=shd.DEFAULT_RULES) -> nnx.State:
  """Concrete params shaped like `abstract` (an nnx.State of ShapeDtypeStructs with `axes`), each
  leaf placed on `mesh` by the logical-axis rules when given (born sharded: no unsharded copy)."""
  root = jax.random.key(seed)
  flat = nnx.to_flat_state(abstract)
  placed = ([s for _, s in nnx.to_flat_state(shd.state_shardings(abstract, mesh, rules))] if mesh is not None
            else [None] * len(flat))
  out = []
  for i, ((path, var), sharding) in enumerate(zip(flat, placed)):
    x = var.get_value()
    draw = _draw(tuple(x.shape), jnp.dtype(x.dtype), leaf_kind(path, x.ndim), sharding)
    out.append((path, var.replace(value=draw(jax.random.fold_in(root, i)))))
  return nnx.from_flat_state(out)
