"""The head's weights on disk, in DFlash's format: `config.json` + `model.safetensors`.

Same format as z-lab's released heads (keys `fc.weight`, `hidden_norm.weight`, `norm.weight`,
`layers.{i}.{self_attn,mlp,...}.*`), so a head trained here loads in DFlash / SpecForge / SGLang
and a DFlash head loads here. Every check that can be made from config.json and the safetensors
headers (target compatibility, block size, each key and shape) runs before any tensor is read,
and each failure is one line naming both values.
"""

from __future__ import annotations

import logging
import os
import pathlib

import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh

from glance_jax import sharding as shd
from glance_jax.config import ConfigError, Qwen3VLConfig
from glance_jax.head.config import HeadConfig
from glance_jax.head.model import abstract_head
from glance_jax.io import CheckpointError, check_keys, index_checkpoint, resolve_checkpoint_dir, save_tensors, write_json
from glance_jax.qwen3_vl.weights import expected_keys, load_state, state_tensors

logger = logging.getLogger(__name__)

# Fields that fix tensor shapes; everything else in HeadConfig may differ from a checkpoint we
# initialise from (init_head(from_dflash=...)).
_SHAPE_FIELDS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                 "num_key_value_heads", "head_dim", "num_taps", "target_hidden_size")


def save_head(out_dir: str | os.PathLike, cfg: HeadConfig, params: nnx.State, *, dtype=None) -> pathlib.Path:
  """Writes `config.json` and `model.safetensors` (DFlash keys) to `out_dir`; returns the directory.

  `dtype` (e.g. jnp.bfloat16, as released heads are stored) casts every tensor; None keeps the
  params' dtype, so an fp32 head round-trips bit for bit.
  """
  root = pathlib.Path(out_dir).expanduser()
  tensors = state_tensors(params, dtype)
  want = expected_keys(abstract_head(cfg)[1])
  check_keys({k: v.shape for k, v in tensors.items()}, want, where=f"save_head({root})")
  saved = np.dtype(dtype if dtype is not None else next(iter(tensors.values())).dtype)
  save_tensors(root, tensors)
  write_json(root / "config.json", cfg.to_dflash_dict(dtype=saved.name))
  return root


def read_head_config(path_or_repo_id: str | os.PathLike) -> HeadConfig:
  """The HeadConfig of a DFlash head directory or hub repo id (only config.json is read)."""
  root = resolve_checkpoint_dir(str(path_or_repo_id))
  return HeadConfig.from_json_file(root / "config.json")


def _load_arrays(root: pathlib.Path, cfg: HeadConfig, *, dtype, mesh: Mesh | None,
                 rules) -> tuple[nnx.GraphDef, nnx.State]:
  """Checks every key and shape against `cfg`'s abstract head, then streams tensors into place."""
  graphdef, abstract = abstract_head(cfg, dtype)
  entries = index_checkpoint(root)
  fc = entries.get("fc.weight")
  if fc is not None and len(fc.shape) == 2 and fc.shape[1] != cfg.fc_in_features:
    raise CheckpointError(f"{root}: 'fc.weight' takes {fc.shape[1]} input features but the config "
                          f"expects {cfg.num_taps} taps x {cfg.target_hidden_size} = {cfg.fc_in_features}")
  return graphdef, load_state(abstract, entries, where=str(root), dtype=dtype, mesh=mesh, rules=rules)


def load_head(path_or_repo_id: str | os.PathLike, *, dtype=jnp.bfloat16, mesh: Mesh | None = None,
              target_config: Qwen3VLConfig | None = None, block_size: int | None = None,
              rules=shd.DEFAULT_RULES) -> tuple[HeadConfig, nnx.GraphDef, nnx.State]:
  """Loads a DFlash-format head: (cfg, graphdef, params).

  With `target_config`, the head must fit that target (hidden size, fc width = taps x target
  hidden, vocab, tap ids < depth); with `block_size`, the checkpoint's block size must equal it
  (the decode loop's shapes and the training recipe both assume one block size).
  """
  root = resolve_checkpoint_dir(str(path_or_repo_id))
  try:
    cfg = HeadConfig.from_json_file(root / "config.json")
    if target_config is not None:
      cfg.check_target(target_config, where=str(root))
  except ConfigError as e:
    raise CheckpointError(str(e)) from None
  if block_size is not None and cfg.block_size != block_size:
    raise CheckpointError(f"{root}: head block_size {cfg.block_size} != expected block_size {block_size}")
  graphdef, params = _load_arrays(root, cfg, dtype=dtype, mesh=mesh, rules=rules)
  return cfg, graphdef, params


def load_weights_into(cfg: HeadConfig, path_or_repo_id: str | os.PathLike, *, dtype=jnp.float32,
                      mesh: Mesh | None = None, rules=shd.DEFAULT_RULES) -> tuple[nnx.GraphDef, nnx.State]:
  """A DFlash checkpoint's weights in a head shaped by `cfg` (init_head(from_dflash=...)).

  Shape-defining fields must agree; the rest (tap ids, mask id, rope, block size) are `cfg`'s,
  and differences are logged, since they are deliberate when adapting a text head to Qwen3-VL.
  """
  root = resolve_checkpoint_dir(str(path_or_repo_id))
  try:
    ckpt = HeadConfig.from_json_file(root / "config.json")
  except ConfigError as e:
    raise CheckpointError(str(e)) from None
  bad = [f"{f} {getattr(ckpt, f)} vs {getattr(cfg, f)}" for f in _SHAPE_FIELDS
         if getattr(ckpt, f) != getattr(cfg, f)]
  if ckpt.vocab_size != cfg.vocab_size:
    logger.info("%s: head vocab_size %d, target %d (the head has no vocab-sized tensor)", root,
                ckpt.vocab_size, cfg.vocab_size)
  if bad:
    raise CheckpointError(f"{root}: checkpoint does not fit the requested head (checkpoint vs "
                          f"requested): {'; '.join(bad)}")
  for f in ("target_layer_ids", "mask_token_id", "rope_theta", "mrope_section", "block_size", "rms_norm_eps"):
    if getattr(ckpt, f) != getattr(cfg, f):
      logger.info("%s: using %s=%s instead of the checkpoint's %s", root, f, getattr(cfg, f),
                  getattr(ckpt, f))
  return _load_arrays(root, cfg, dtype=dtype, mesh=mesh, rules=rules)
