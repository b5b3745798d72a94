"""A parent-conditioned correction of the block head's marginals, computed in the same draft pass.

The head's per-depth marginals q_d are in effect conditioned on its own top-1 path: after an
off-path sibling is accepted, the next depth's marginal still describes the path that sibling left
(vllm PR #42910: ~22% right there against 65-84% on the path). The correction gives each tree node
its own child distribution instead, from what the node is:

    q'_d(c | parent p) = softmax_c( z_d(c) + b_d(p)(c) )
    b_d(p)   = W_out . down(gelu(P_e norm(E[p]) + P_h norm(h_d) + S[d, on(p)]
                                 [+ P_a norm(sum_{a < p} E[a])]))                          [V]

z_d [V] the head's logits at depth d, h_d [D] its hidden state there (what z_d is read from), E[p]
the target's (frozen) embedding of the parent's token, on(p) whether the parent's whole path is the
head's top-1 path (the root is), S [L, 2, m] a learned state per depth and on / off, W_out [V, r] a
rank-r output factor. TreeFlash's transition MLP reads [parent embedding, hidden at that depth];
DSpark's Markov bias is low rank: this is both, with the bias at rank r so that a round costs
N x L x r x V multiply-adds (the tree's N parents a depth), not a second lm_head pass per parent.
W_out starts at zero, so an untrained correction is the product of marginals exactly.

`path=True` adds the bracketed term: the bag of p's strict ancestors' embeddings (the root included;
empty, so zero, for the root's children). The parent alone cannot tell two paths that end in the same
token apart, and where the answer's next choice depends on what this path already said (a caption's
adjectives, four to six of eight, none twice, each after a "," that carries nothing) the parent is a
separator and the head's h_d describes its own top-1 path; the bag says which tokens this path holds.

Trained with the block head frozen (train/parent_train.py: a released DFlash head gains too) or
jointly with it; decode/tree_conditioned.py builds the exact top-N tree under the corrected scores.

Checkpoint (beside a DFlash-format head, so `decode.py --head DIR` finds it):
  parent_correction.json         {"schema": SCHEMA, "config": {hidden_size, vocab_size, depth, width,
                                 rank, path (optional, default false)}, "meta": {...}}
  parent_correction.safetensors  parent_proj.weight [m, D], hidden_proj.weight [m, D],
                                 parent_norm.weight [D], hidden_norm.weight [D], state [L, 2, m],
                                 down.weight [r, m], out [V, r]  (fp32); with path: also
                                 path_proj.weight [m, D], path_norm.weight [D]

Letters: D head / target width, V vocab (or a draft vocabulary's K), L draft depth, m MLP width,
r rank, N parents.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from glance_jax import sharding as shd
from glance_jax.qwen3_vl.layers import Linear, RMSNorm, matmul_t
from glance_jax.qwen3_vl.weights import expected_keys, fill_state, state_tensors

FILE = "parent_correction.json"
WEIGHTS = "parent_correction.safetensors"
SCHEMA = "glance-parent-correction/1"


@dataclasses.dataclass(frozen=True)
class CorrectionConfig:
  hidden_size: int          # D: the head's width (= the target's: it reads the target's embedding)
  vocab_size: int           # V: the target's vocabulary (the bias's rows)
  depth: int                # L: the head's draft depth (block_size - 1)
  width: int = 256          # m: the transition MLP's width
  rank: int = 32            # r: the bias's rank
  path: bool = False        # also read the bag of the parent's ancestors' embeddings

  def __post_init__(self):
    for name in ("hidden_size", "vocab_size", "depth", "width", "rank"):
      if int(getattr(self, name)) < 1:
        raise ValueError(f"parent correction: {name} must be >= 1, got {getattr(self, name)}")

  @classmethod
  def for_head(cls, head_cfg, *, width: int = 256, rank: int = 32, path: bool = False) -> "CorrectionConfig":
    return cls(hidden_size=head_cfg.hidden_size, vocab_size=head_cfg.vocab_size,
               depth=head_cfg.block_size - 1, width=int(width), rank=int(rank), path=bool(path))


class ParentCorrection(nnx.Module):
  def __init__(self, cfg: CorrectionConfig, *, dtype=jnp.float32, rngs: nnx.Rngs):
    d, m, r = cfg.hidden_size, cfg.width, cfg.rank
    self.cfg = cfg
    self.parent_norm = RMSNorm(d, dtype=dtype)
    self.hidden_norm = RMSNorm(d, dtype=dtype)
    self.parent_proj = Linear(d, m, axes=(shd.MLP, shd.EMBED), dtype=dtype, rngs=rngs)
    self.hidden_proj = Linear(d, m, axes=(shd.MLP, shd.EMBED), dtype=dtype, rngs=rngs)
    self.state = nnx.Param(jnp.zeros((cfg.depth, 2, m), dtype), axes=(None, None, shd.MLP))
    self.down = Linear(m, r, axes=(None, shd.MLP), dtype=dtype, rngs=rngs)
    self.out = nnx.Param(jnp.zeros((cfg.vocab_size, r), dtype), axes=(shd.VOCAB, None))
    if cfg.path:
      self.path_norm = RMSNorm(d, dtype=dtype)
      self.path_proj = Linear(d, m, axes=(shd.MLP, shd.EMBED), dtype=dtype, rngs=rngs)

  def code(self, parent_emb: jax.Array, hidden: jax.Array, depth: jax.Array, on: jax.Array,
           path_emb: jax.Array | None = None) -> jax.Array:
    """parent_emb [..., D], hidden [..., D], depth int [...] (0-based: the child's depth - 1), on
    bool [...], path_emb [..., D] (the summed embeddings of the parent's strict ancestors; only with
    cfg.path) -> the rank-r code [..., r] (fp32) whose product with `out` is the bias."""
    x = (self.parent_proj(self.parent_norm(parent_emb)) + self.hidden_proj(self.hidden_norm(hidden))
         + self.state[...][depth, jnp.where(on, 0, 1)].astype(parent_emb.dtype))
    if self.cfg.path:
      if path_emb is None:
        raise ValueError("this parent correction reads the path (config path=true): pass path_emb")
      x = x + self.path_proj(self.path_norm(path_emb.astype(parent_emb.dtype)))
    return self.down(jax.nn.gelu(x)).astype(jnp.float32)

  def bias(self, parent_emb, hidden, depth, on, rows: jax.Array | None = None,
           path_emb: jax.Array | None = None) -> jax.Array:
    """-> float32 [..., V] (or [..., K] against `rows` [K, r]: a draft vocabulary's rows of out)."""
    out = self.out[...] if rows is None else rows
    code = self.code(parent_emb, hidden, depth, on, path_emb)
    return matmul_t(code, out.astype(jnp.float32), out_dtype=jnp.float32)


def init_correction(cfg: CorrectionConfig, *, seed: int = 0, dtype=jnp.float32):
  """-> (graphdef, params): random projections, zero state and zero `out` (no correction yet)."""
  return nnx.split(ParentCorrection(cfg, dtype=dtype, rngs=nnx.Rngs(seed)))


def abstract_correction(cfg: CorrectionConfig, dtype=jnp.float32):
  return nnx.split(nnx.eval_shape(lambda: ParentCorrection(cfg, dtype=dtype, rngs=nnx.Rngs(0))))


@dataclasses.dataclass(frozen=True, eq=False)
class Correction:
  """A loaded correction: config, graphdef and params (what Head.parent holds)."""
  config: CorrectionConfig
  graphdef: nnx.GraphDef
  params: nnx.State

  def check_head(self, head_cfg, where: str = "parent correction") -> None:
    want = CorrectionConfig.for_head(head_cfg, width=self.config.width, rank=self.config.rank,
                                     path=self.config.path)
    if want != self.config:
      raise ValueError(f"{where}: made for a head of width {self.config.hidden_size}, vocabulary "
                       f"{self.config.vocab_size}, depth {self.config.depth}; this head has "
                       f"{want.hidden_size}, {want.vocab_size}, {want.depth}")


def save(head_dir: str | os.PathLike, corr: Correction, meta: dict | None = None) -> pathlib.Path:
  """Writes parent_correction.{json,safetensors} into head_dir (atomically, each)."""
  from safetensors.numpy import save_file
  root = pathlib.Path(head_dir)
  root.mkdir(parents=True, exist_ok=True)
  tmp = root / (WEIGHTS + ".tmp")
  save_file(state_tensors(corr.params, np.float32), str(tmp))
  os.replace(tmp, root / WEIGHTS)
  doc = {"schema": SCHEMA, "config": dataclasses.asdict(corr.config), "meta": meta or {}}
  tmp = root / (FILE + ".tmp")
  tmp.write_text(json.dumps(doc, indent=1) + "\n")
  os.replace(tmp, root / FILE)
  return root / FILE


def load(head_dir: str | os.PathLike, *, dtype=jnp.float32) -> Correction:
  """The correction beside a head; a missing or mis-shaped key is an error naming the file and key."""
  from safetensors.numpy import load_file
  root = pathlib.Path(head_dir)
  path = root / FILE
  try:
    doc = json.loads(path.read_text())
  except (OSError, json.JSONDecodeError) as e:
    raise ValueError(f"{path}: unreadable parent correction ({type(e).__name__}: {e})") from None
  if doc.get("schema") != SCHEMA:
    raise ValueError(f"{path}: schema {doc.get('schema')!r}, expected {SCHEMA!r}")
  try:
    cfg = CorrectionConfig(**doc["config"])
  except (KeyError, TypeError) as e:
    raise ValueError(f"{path}: bad 'config' ({e})") from None
  wpath = root / WEIGHTS
  try:
    tensors = load_file(str(wpath))
  except Exception as e:  # noqa: BLE001 - any unreadable file is reported by name
    raise ValueError(f"{wpath}: unreadable ({type(e).__name__}: {e})") from None
  graphdef, abstract = abstract_correction(cfg, dtype)
  want = expected_keys(abstract)
  for name, shape in want.items():
    if name not in tensors:
      raise ValueError(f"{wpath}: missing key {name!r}")
    if tuple(tensors[name].shape) != shape:
      raise ValueError(f"{wpath}: key {name!r} has shape {tuple(tensors[name].shape)}, the config in "
                       f"{path.name} needs {shape}")
  extra = sorted(set(tensors) - set(want))
  if extra:
    raise ValueError(f"{wpath}: unexpected keys {extra}")
  return Correction(cfg, graphdef, fill_state(abstract, {k: jnp.asarray(v, dtype) for k, v in tensors.items()}))


def exists(head_dir) -> bool:
  return (pathlib.Path(head_dir) / FILE).exists()


def widen(corr: Correction, width: int, *, dtype=jnp.float32) -> Correction:
  """The correction of a head widened `width` times (head/widen.py): the parent's embedding and the
  head's hidden state are read tiled (RMSNorm of a tiled vector is the tiled norm, and a 1 / width
  hidden scale, the tied targets' final norm, cancels in it), so the norms' weights are tiled and the
  input projections read each copy with weight 1 / width; the MLP, state and bias are unchanged."""
  from glance_jax.qwen3_vl.widen import _reader, _tile
  sd = state_tensors(corr.params, np.float32)
  norms, projs = ("parent_norm.weight", "hidden_norm.weight"), ("parent_proj.weight", "hidden_proj.weight")
  if corr.config.path:        # the bag of tiled embeddings is the tiled bag
    norms, projs = norms + ("path_norm.weight",), projs + ("path_proj.weight",)
  for key in norms:
    sd[key] = _tile(sd[key], width)
  for key in projs:
    sd[key] = _reader(sd[key], width)
  cfg = dataclasses.replace(corr.config, hidden_size=corr.config.hidden_size * width)
  graphdef, abstract = abstract_correction(cfg, dtype)
  return Correction(cfg, graphdef, fill_state(abstract, {k: jnp.asarray(v, dtype) for k, v in sd.items()}))
