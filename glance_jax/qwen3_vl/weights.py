"""Our parameter tree <-> Hugging Face checkpoint keys.

Because modules mirror HF's tree and keep HF's (out, in) layouts, the map is the identity on names:
a parameter's path joined with '.' is its key, with the same shape. That keeps loading declarative
and lets every key be checked against the abstract model before any tensor is read.
"""

from __future__ import annotations

from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from glance_jax.config import Qwen3VLConfig


def key_of(path: tuple[Any, ...]) -> str:
  return ".".join(str(p) for p in path)


def state_tensors(state: nnx.State, dtype=None) -> dict[str, np.ndarray]:
  """checkpoint key -> host array of every parameter, cast to `dtype` if given (what a save writes)."""
  out = {}
  for p, v in nnx.to_flat_state(state):
    x = jax.device_get(v.get_value())
    out[key_of(p)] = np.asarray(x if dtype is None else x.astype(dtype))
  return out


def abstract_model(cfg: Qwen3VLConfig, dtype=jnp.float32):
  """(graphdef, abstract state) at zero memory: every leaf a ShapeDtypeStruct with `axes` metadata."""
  from glance_jax.qwen3_vl.model import build_model
  model = nnx.eval_shape(lambda: build_model(cfg, dtype=dtype, rngs=nnx.Rngs(0)))
  return nnx.split(model)


def expected_keys(state: nnx.State) -> dict[str, tuple[int, ...]]:
  """checkpoint key -> shape for every parameter of a (possibly abstract) state."""
  return {key_of(path): tuple(var.get_value().shape) for path, var in nnx.to_flat_state(state)}


def fill_state(state: nnx.State, arrays: Mapping[str, jax.Array]) -> nnx.State:
  """Returns `state` with every variable's value replaced by arrays[key]."""
  flat = []
  for path, var in nnx.to_flat_state(state):
    flat.append((path, var.replace(value=arrays[key_of(path)])))
  return nnx.from_flat_state(flat)


def load_state(abstract: nnx.State, entries: Mapping[str, Any], *, where: str, dtype, mesh=None,
               rules=None, progress: bool = False) -> nnx.State:
  """A checkpoint's tensors (io.index_checkpoint entries) into `abstract`'s tree: every key and shape
  checked against the abstract model before any tensor data is read (all problems in one error
  naming `where`), then one tensor at a time read straight into its sharding on `mesh` (the
  logical-axis rules) in `dtype`. The load of a target and of a head alike."""
  from glance_jax import sharding as shd
  from glance_jax.io import check_keys, load_tensors
  check_keys({k: e.shape for k, e in entries.items()}, expected_keys(abstract), where=where)
  targets = {key_of(p): jax.ShapeDtypeStruct(v.get_value().shape, dtype) for p, v in nnx.to_flat_state(abstract)}
  shardings = None
  if mesh is not None:
    sh = shd.state_shardings(abstract, mesh, rules or shd.DEFAULT_RULES)
    shardings = {key_of(p): s for p, s in nnx.to_flat_state(sh)}
  return fill_state(abstract, load_tensors(entries, targets, shardings=shardings, progress=progress))


def drop_tied(cfg: Qwen3VLConfig, keys: Mapping[str, Any]) -> dict[str, Any]:
  """A tied model has no lm_head parameter; HF's state_dict (not its saved file) still lists it."""
  return {k: v for k, v in keys.items() if not (cfg.tie_word_embeddings and k == "lm_head.weight")}


def from_state_dict(cfg: Qwen3VLConfig, sd: Mapping[str, Any], dtype=jnp.float32):
  """(graphdef, params) from an in-memory HF state dict (numpy or torch tensors)."""
  sd = drop_tied(cfg, sd)
  graphdef, abstract = abstract_model(cfg, dtype)
  want = expected_keys(abstract)
  missing = sorted(set(want) - set(sd))
  extra = sorted(set(sd) - set(want))
  bad = [k for k in want if k in sd and tuple(np.shape(sd[k])) != want[k]]
  if missing or extra or bad:
    raise ValueError(f"state dict mismatch: missing {missing[:5]}, unexpected {extra[:5]}, "
                     f"misshaped {[(k, tuple(np.shape(sd[k])), want[k]) for k in bad[:5]]}")
  arrays = {k: jnp.asarray(np.asarray(sd[k], np.float32)).astype(dtype) for k in want}
  return graphdef, fill_state(abstract, arrays)
