"""`Target`: the frozen Qwen3-VL (or text-only Qwen3) as (config, graphdef, params), and `load_target` for HF checkpoints.

`load_target` checks config.json and every tensor's key and shape against the abstract model before
reading any tensor data, then reads tensors one at a time straight into their shardings, so an 8B
bf16 load never holds a second full copy of the model in host memory.
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding

from glance_jax import sharding as shd
from glance_jax.config import Qwen3VLConfig
from glance_jax.io import index_checkpoint, resolve_checkpoint_dir
from glance_jax.qwen3_vl import engine, leafwise_init
from glance_jax.qwen3_vl.cache import KVCache, init_cache
from glance_jax.qwen3_vl.prompt import Prompt
from glance_jax.qwen3_vl.vision_meta import vision_meta
from glance_jax.qwen3_vl.weights import abstract_model, drop_tied, load_state
from glance_jax.static_args import JitArgs


class InputError(ValueError):
  """Model inputs that disagree with the model or the cache."""


@functools.lru_cache(maxsize=256)
def _vision_arrays(grid: bytes, shape: tuple, num_position_embeddings: int, spatial_merge_size: int):
  """The vision tower's metadata arrays for one image grid (int64 [n_images, 3] as bytes), on device.
  Memoised: they depend on the grid alone, and building them on the host took ~0.3 ms of every
  generate call with an image (the arrays are immutable, so calls share them)."""
  meta = vision_meta(np.frombuffer(grid, np.int64).reshape(shape), num_position_embeddings=num_position_embeddings,
                     spatial_merge_size=spatial_merge_size)
  return tuple((k, jnp.asarray(a)) for k, a in meta.as_dict().items())


def _random_init(cfg: Qwen3VLConfig, seed: int, dtype, out_shardings=None):
  """The jitted initialiser of one (config, seed, dtype), placed by `out_shardings` when given."""
  from glance_jax.qwen3_vl.model import build_model

  def create():
    return nnx.split(build_model(cfg, dtype=dtype, rngs=nnx.Rngs(seed)))[1]
  return jax.jit(create, out_shardings=out_shardings)


# Unsharded initialisers are kept: compiling one costs ~15 s on 2 cores, and tests and resumed
# trainings ask for the same one again in one process (sharded ones take an unhashable State).
_cached_random_init = functools.lru_cache(maxsize=8)(_random_init)


@dataclasses.dataclass(frozen=True, eq=False)
class Target(JitArgs):
  """The frozen target: config, graphdef and params (jit arguments: `jit_graphdef`, `flat_params`)."""
  config: Qwen3VLConfig
  graphdef: nnx.GraphDef
  params: nnx.State
  dtype: Any = jnp.float32
  mesh: Mesh | None = None
  path: pathlib.Path | None = None    # checkpoint directory (tokenizer, processor config)

  # --- construction --------------------------------------------------------------------------

  @classmethod
  def random(cls, cfg: Qwen3VLConfig, *, seed: int = 0, dtype=jnp.float32, mesh: Mesh | None = None,
             rules=shd.DEFAULT_RULES) -> "Target":
    """Random weights, created already sharded when a mesh is given (init under jit; leaf by leaf
    above leafwise_init.LEAFWISE_ABOVE parameters)."""
    graphdef, abstract = abstract_model(cfg, dtype)
    if leafwise_init.use_leafwise(abstract):   # 8B-sized: one program would compile for minutes
      return cls(cfg, graphdef, leafwise_init.random_state(abstract, seed, mesh, rules), dtype, mesh)
    if mesh is None:
      params = _cached_random_init(cfg, seed, dtype)()
    else:
      params = _random_init(cfg, seed, dtype, shd.state_shardings(abstract, mesh, rules))()
    return cls(cfg, graphdef, params, dtype, mesh)

  def shard(self, mesh: Mesh, rules=shd.DEFAULT_RULES) -> "Target":
    """The same weights placed on `mesh` by the logical-axis rules."""
    params = jax.device_put(self.params, shd.state_shardings(self.params, mesh, rules))
    return dataclasses.replace(self, params=params, mesh=mesh)

  # --- caches and inputs ---------------------------------------------------------------------

  def init_cache(self, batch_size: int, max_length: int) -> KVCache:
    sharding = None
    if self.mesh is not None:
      t = self.config.text
      spec = shd.logical_to_spec((shd.BATCH, None, shd.KV_HEADS, None),
                                 (batch_size, max_length, t.num_key_value_heads, t.head_dim), self.mesh)
      sharding = NamedSharding(self.mesh, spec)
    return init_cache(self.config.text, batch_size, max_length, self.dtype, sharding)

  def vision_arrays(self, grid_thw: np.ndarray) -> dict[str, jax.Array]:
    v = self.config.vision
    if v is None:
      raise InputError("this target is a text-only Qwen3 (no vision tower): it takes no images")
    grid = np.asarray(grid_thw, np.int64)
    return dict(_vision_arrays(grid.tobytes(), grid.shape, v.num_position_embeddings, v.spatial_merge_size))

  def check_inputs(self, inputs, cache: KVCache) -> None:
    ids = np.asarray(inputs.input_ids)
    if ids.ndim != 2:
      raise InputError(f"input_ids must be [batch, length], got shape {ids.shape}")
    if ids.shape[0] != cache.batch_size:
      raise InputError(f"batch of {ids.shape[0]} prompts but the cache holds {cache.batch_size} rows")
    longest = int(np.asarray(inputs.attention_mask).sum(-1).max()) if ids.size else 0
    if ids.shape[1] > cache.max_length:
      raise InputError(f"prompt of {longest} tokens (padded to {ids.shape[1]}) is longer than the "
                       f"cache (max_length {cache.max_length})")
    cfg = self.config
    if cfg.text_only and getattr(inputs, "pixel_values", None) is not None:
      raise InputError("this target is a text-only Qwen3 (model_type 'qwen3', no vision tower): "
                       "the inputs carry images")
    n_placeholders = int(np.isin(ids, [cfg.image_token_id, cfg.video_token_id]).sum())
    grid = getattr(inputs, "image_grid_thw", None)
    n_expected = 0 if grid is None else int(np.asarray(grid).prod(-1).sum()) // cfg.spatial_merge_size**2
    if n_placeholders != n_expected:
      raise InputError(f"prompt has {n_placeholders} image placeholder tokens but the images give "
                       f"{n_expected} (image_grid_thw {None if grid is None else np.asarray(grid).tolist()})")

  # --- jitted entry points -------------------------------------------------------------------

  def prompt(self, inputs) -> Prompt:
    """Host inputs (ModelInputs, or anything with input_ids, attention_mask, positions and optional
    pixel_values / image_grid_thw) -> the device Prompt, its vision tables built (memoised per grid)."""
    pv = getattr(inputs, "pixel_values", None)
    meta = None
    if pv is not None:
      meta = self.vision_arrays(np.asarray(inputs.image_grid_thw))
      pv = jnp.asarray(pv, jnp.float32)
    return Prompt(jnp.asarray(inputs.input_ids, jnp.int32), jnp.asarray(inputs.attention_mask, bool),
                  jnp.asarray(inputs.positions, jnp.int32), pv, meta)

  def prefill(self, inputs, cache: KVCache, *, tap_layers: Sequence[int] = (),
              logits_at: str = "all") -> engine.Output:
    """inputs: anything with input_ids, attention_mask, positions (and pixel_values, image_grid_thw)."""
    self.check_inputs(inputs, cache)
    return engine.prefill(self.jit_graphdef, self.flat_params, cache, self.prompt(inputs),
                          tap_layers=tuple(tap_layers), logits_at=logits_at)

  def decode(self, tokens, cache: KVCache, rope_delta, *, tap_layers: Sequence[int] = ()) -> engine.Output:
    return engine.decode_step(self.jit_graphdef, self.flat_params, cache, jnp.asarray(tokens, jnp.int32),
                              jnp.asarray(rope_delta, jnp.int32), tap_layers=tuple(tap_layers))

  def forward_block(self, tokens, positions, block_mask, cache: KVCache, *,
                    tap_layers: Sequence[int] = ()) -> engine.Output:
    return engine.forward_block(self.jit_graphdef, self.flat_params, cache, jnp.asarray(tokens, jnp.int32),
                                jnp.asarray(positions, jnp.int32), jnp.asarray(block_mask, bool),
                                tap_layers=tuple(tap_layers))

  def generate_greedy(self, inputs, max_new_tokens: int, *, max_length: int | None = None,
                      stop_tokens: Sequence[int] | None = None):
    """Plain greedy AR decoding. Returns (tokens int32 [B, max_new_tokens] with -1 after a stop, counts [B])."""
    return self.generate_ar(inputs, max_new_tokens, max_length=max_length, stop_tokens=stop_tokens)

  def generate_ar(self, inputs, max_new_tokens: int, *, sampling=None, key=None,
                  max_length: int | None = None, stop_tokens: Sequence[int] | None = None):
    """Plain AR decoding: greedy, or with `sampling` (decode.sampling.SamplingConfig at T > 0) each
    token drawn after its temperature / top-k / top-p with `key` (a jax PRNG key; required then).
    Returns as generate_greedy."""
    if sampling is not None and not sampling.greedy and key is None:
      raise ValueError("generate_ar: sampling at temperature > 0 needs a PRNG key")
    ids = np.asarray(inputs.input_ids)
    cache = self.init_cache(ids.shape[0], max_length or ids.shape[1] + max_new_tokens + 1)
    out = self.prefill(inputs, cache, logits_at="last")
    stops = self.config.eos_token_ids if stop_tokens is None else tuple(stop_tokens)
    toks, n, _ = engine.ar_decode(self.jit_graphdef, self.flat_params, out.cache, out.logits[:, 0],
                                  jnp.asarray(inputs.rope_delta, jnp.int32),
                                  jnp.asarray(list(stops) or [-2], jnp.int32),
                                  jax.random.key(0) if key is None else key,
                                  max_new_tokens=max_new_tokens, sampling=sampling)
    return np.asarray(toks), np.asarray(n)


# --- loading ---------------------------------------------------------------------------------

def load_target(path_or_repo_id: str | pathlib.Path, *, dtype=jnp.bfloat16, mesh: Mesh | None = None,
                rules=shd.DEFAULT_RULES, progress: bool = False) -> Target:
  """Loads a Hugging Face Qwen3-VL or text-only Qwen3 checkpoint (directory or hub repo id) into a `Target`.

  Checks, before any tensor data is read: config.json is a qwen3_vl or qwen3 config; every checkpoint key
  is one of our parameters with the same shape and none is missing (all problems in one error).
  With a mesh, each tensor is placed straight into its sharding from the logical-axis rules.
  """
  from glance_jax.config import Qwen3VLConfig
  root = resolve_checkpoint_dir(str(path_or_repo_id))
  cfg = Qwen3VLConfig.from_json_file(root / "config.json")
  graphdef, abstract = abstract_model(cfg, dtype)
  entries = drop_tied(cfg, index_checkpoint(root))
  params = load_state(abstract, entries, where=str(root), dtype=dtype, mesh=mesh, rules=rules, progress=progress)
  return Target(cfg, graphdef, params, dtype, mesh, root)
