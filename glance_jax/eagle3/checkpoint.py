"""EAGLE-3 heads on disk in the released "midlayer" layout: `config.json` + `model.safetensors`.

Keys (EAGLE / SpecForge / AngelSlim): `fc.weight` [H, 3H], `midlayer.{input_layernorm,
hidden_norm,post_attention_layernorm}.weight` [H], `midlayer.self_attn.{q,k,v}_proj.weight`
[heads x hd, 2H], `midlayer.self_attn.o_proj.weight` [H, heads x hd],
`midlayer.mlp.{gate,up,down}_proj.weight`, `norm.weight`, `lm_head.weight` [draft_vocab, H],
`d2t` int64 [draft_vocab], `t2d` bool [V], and optionally `embed_tokens.weight` [V, H] (a copy of
the target's). Several layers are `midlayers.{i}.*`. So a head trained here loads in SpecForge /
SGLang, and a released head loads here.

Every check that config.json and the safetensors headers allow (the head against its target,
every key, shape and dtype kind) runs before any tensor is read; then the small vocabulary map is
read and checked before the weights. Each failure is one line naming the file and the key.
"""

from __future__ import annotations

import os
import pathlib
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh

from glance_jax import sharding as shd
from glance_jax.config import ConfigError, Qwen3VLConfig
from glance_jax.eagle3.config import Eagle3Config
from glance_jax.eagle3.model import abstract_head, vocab_map_problem
from glance_jax.io import (CheckpointError, check_keys, index_checkpoint, load_tensors, resolve_checkpoint_dir,
                           save_tensors, write_json)
from glance_jax.qwen3_vl.weights import expected_keys, load_state, state_tensors

EMBED_KEY = "embed_tokens.weight"
VOCAB_KEYS = ("d2t", "t2d")


class Eagle3Checkpoint(NamedTuple):
  cfg: Eagle3Config
  graphdef: nnx.GraphDef
  params: nnx.State
  d2t: jax.Array     # int32 [draft_vocab] (int64 on disk): target id = draft id + d2t[draft id]
  t2d: jax.Array     # bool [V]: target token is in the draft vocabulary


def _expected(cfg: Eagle3Config, with_embed: bool) -> dict[str, tuple[int, ...]]:
  """Every key and shape of a head file: the parameters plus the vocabulary map."""
  want = expected_keys(abstract_head(cfg, with_embed=with_embed)[1])
  want.update(d2t=(cfg.draft_vocab_size,), t2d=(cfg.vocab_size,))
  return want


def _weights_file(root: pathlib.Path) -> pathlib.Path:
  index = root / "model.safetensors.index.json"
  return index if index.is_file() else root / "model.safetensors"


def save_eagle3(out_dir: str | os.PathLike, cfg: Eagle3Config, params: nnx.State, d2t, t2d, *,
                dtype=None) -> pathlib.Path:
  """Writes `config.json` and `model.safetensors` (midlayer keys, d2t int64, t2d bool); returns the
  directory. `dtype` (e.g. jnp.bfloat16, as released heads are stored) casts the weights; None
  keeps the params' dtype, so an fp32 head round-trips bit for bit. An own `embed_tokens` in
  `params` is written too."""
  root = pathlib.Path(out_dir).expanduser()
  where = f"save_eagle3({root})"
  tensors = state_tensors(params, dtype)
  with_embed = EMBED_KEY in tensors
  tensors["d2t"], tensors["t2d"] = np.asarray(d2t, np.int64), np.asarray(t2d, bool)
  check_keys({k: v.shape for k, v in tensors.items()}, _expected(cfg, with_embed), where=where)
  problem = vocab_map_problem(tensors["d2t"], tensors["t2d"])
  if problem:
    raise CheckpointError(f"{where}: {problem}")
  saved = np.dtype(dtype if dtype is not None else tensors["fc.weight"].dtype)
  save_tensors(root, tensors)
  write_json(root / "config.json", cfg.to_dict(dtype=saved.name))
  return root


def read_eagle3_config(path_or_repo_id: str | os.PathLike) -> Eagle3Config:
  """The Eagle3Config of a head directory or hub repo id (only config.json is read)."""
  root = resolve_checkpoint_dir(str(path_or_repo_id))
  try:
    return Eagle3Config.from_json_file(root / "config.json")
  except ConfigError as e:
    raise CheckpointError(str(e)) from None


def load_eagle3(path_or_repo_id: str | os.PathLike, target_cfg: Qwen3VLConfig | None = None, *,
                dtype=jnp.bfloat16, mesh: Mesh | None = None, rules=shd.DEFAULT_RULES) -> Eagle3Checkpoint:
  """Loads a midlayer-format EAGLE-3 head: (cfg, graphdef, params, d2t, t2d).

  With `target_cfg` the head must fit that target (hidden size, feature width, vocabulary, tap ids
  within its depth). The head has its own embed_tokens exactly when the file holds
  `embed_tokens.weight`; otherwise the caller passes the target's table to `Eagle3Head.embed`.
  """
  root = resolve_checkpoint_dir(str(path_or_repo_id))
  cfg_path = root / "config.json"
  try:
    cfg = Eagle3Config.from_json_file(cfg_path)
    if target_cfg is not None:
      cfg.check_target(target_cfg, where=str(cfg_path))
  except ConfigError as e:
    raise CheckpointError(str(e)) from None
  entries = index_checkpoint(root)                                   # headers only
  where = str(_weights_file(root))
  with_embed = EMBED_KEY in entries
  check_keys({k: e.shape for k, e in entries.items()}, _expected(cfg, with_embed), where=where)
  # The vocabulary map first: two small tensors whose values must agree before GBs are read.
  vocab = load_tensors({k: entries[k] for k in VOCAB_KEYS},
                       {"d2t": jax.ShapeDtypeStruct((cfg.draft_vocab_size,), jnp.int32),
                        "t2d": jax.ShapeDtypeStruct((cfg.vocab_size,), jnp.bool_)})
  problem = vocab_map_problem(np.asarray(vocab["d2t"]), np.asarray(vocab["t2d"]))
  if problem:
    raise CheckpointError(f"{where}: {problem}")
  graphdef, abstract = abstract_head(cfg, with_embed=with_embed, dtype=dtype)
  weights = {k: e for k, e in entries.items() if k not in VOCAB_KEYS}
  params = load_state(abstract, weights, where=where, dtype=dtype, mesh=mesh, rules=rules)
  return Eagle3Checkpoint(cfg, graphdef, params, vocab["d2t"], vocab["t2d"])
