"""The parent correction trained by `python train.py` (TrainConfig.drafter = "parent").

driver.train runs it through its one loop (the same regenerated rows, data order, sharded batches,
orbax checkpoints and metrics as the block head); this module is what differs.

- Frozen (the default): the block head is `head_init` (a DFlash-format checkpoint, e.g. the
  testbed's or a released one), loaded once and passed to the step as an argument, never
  differentiated; only the correction is trained. One step: the target's features, the head's
  packed pass over the step's random anchors (objective.packed_hidden, as the head trained), then
  per block slot k >= 1 the corrected logits z_k + b_k(parent = the true token at k - 1, on = the
  true tokens 1..k-1 are the head's argmax there, and with `parent_path` the bag of the true tokens
  0..k-2) and their cross-entropy at the true token k, with the head's decay weights. Teacher forcing on the true parent is what decoding needs: a node whose
  parent is accepted asks for its children given that parent.
- Joint (`parent_joint=true`): the head's own loss plus the correction's, both trained (head_init
  optional).
- Export: <export_dir or workdir/head>: the head (a copy of head_init when frozen, with its token
  counts and tree calibration when it has them) and parent_correction.{json,safetensors} beside it,
  so `decode.py --head DIR` loads both.

Metrics: loss, acc (corrected argmax == label over supervised slots), acc_base (the head's own),
acc_off / acc_off_base (the same on slots whose parent is off the head's top-1 path: where the
correction should matter), n_off.

Letters: B rows, A anchors, Bk block, C blocks a chunk, D width, V vocab, r rank.
"""

from __future__ import annotations

import dataclasses
import logging
import pathlib
import shutil
from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from glance_jax import sharding as shd
from glance_jax.config import DTYPES
from glance_jax.head import parent_correction as pc
from glance_jax.qwen3_vl.layers import matmul_t
from glance_jax.train import objective
from glance_jax.train.config import TrainConfig
from glance_jax.train.step import TrainState, _canonical, _cast, apply_loss, jit_step

logger = logging.getLogger(__name__)


def parent_inputs(labels: jax.Array, spine: jax.Array) -> tuple[jax.Array, jax.Array]:
  """labels int [..., Bk] (slot 0 the root), spine int [..., Bk] (the head's argmax per slot) ->
  (parent tokens [..., Bk]: slot k's is labels[k - 1] (slot 0's is the root, unused), on bool
  [..., Bk]: the true tokens at slots 1..k-1 are all the head's argmax (slot 1's parent, the root,
  is on))."""
  parent = jnp.concatenate([labels[..., :1], labels[..., :-1]], axis=-1)
  match = (labels == spine).at[..., 0].set(True)                          # the root is on the path
  on = jnp.concatenate([jnp.ones_like(match[..., :1]), jnp.cumprod(match[..., :-1], axis=-1).astype(bool)], -1)
  return parent, on


def path_bags(emb: jax.Array) -> jax.Array:
  """emb [..., Bk, D] (the true tokens' embeddings, slot 0 the root) -> [..., Bk, D]: slot k's bag of
  its parent's strict ancestors, the sum of slots 0..k-2 (zero for k <= 1), as the tree builder
  carries it (decode/tree_conditioned.py)."""
  csum = jnp.cumsum(emb, axis=-2)
  pad = jnp.zeros_like(emb[..., :2, :])
  return jnp.concatenate([pad, csum[..., :-2, :]], axis=-2)


def correction_ce(corr: pc.ParentCorrection, hidden: jax.Array, lm_head_w: jax.Array, embed_w: jax.Array,
                  labels: jax.Array, chunk: int, pin=objective._no_pin) -> dict[str, jax.Array]:
  """hidden [B, A, Bk, D], labels [B, A, Bk] -> per slot (fp32 / bool [B, A, Bk]): ce (corrected),
  hit, hit_base (the head's argmax), on (the parent is on the head's top-1 path). C blocks at a
  time under jax.checkpoint (the [B, C, Bk, V] logits and bias are recomputed in the backward)."""
  depth = jnp.maximum(jnp.arange(hidden.shape[2]) - 1, 0)                 # slot k's depth index k - 1

  def one(hc, yc):
    hc = pin(hc, shd.BATCH, None, None, None)
    z = pin(matmul_t(hc, lm_head_w, out_dtype=jnp.float32), shd.BATCH, None, None, shd.VOCAB)   # [B,C,Bk,V]
    spine = jax.lax.stop_gradient(jnp.argmax(z, axis=-1))
    parent, on = parent_inputs(yc, spine)
    emb = jnp.take(embed_w, parent, axis=0).astype(hc.dtype)                # [B, C, Bk, D]
    bag = path_bags(jnp.take(embed_w, yc, axis=0).astype(hc.dtype)) if corr.cfg.path else None
    zc = z + corr.bias(emb, hc, jnp.broadcast_to(depth, yc.shape), on, path_emb=bag)
    picked = jnp.take_along_axis(zc, yc[..., None], axis=-1)[..., 0]
    return (jax.nn.logsumexp(zc, axis=-1) - picked, jnp.argmax(zc, axis=-1) == yc, spine == yc, on)

  ce, hit, hit_base, on = objective.map_block_chunks(one, hidden, labels, chunk)
  return dict(ce=ce, hit=hit, hit_base=hit_base, on=on)


def correction_loss(corr, hidden, lm_head_w, embed_w, labels, sup, weights, chunk, pin=objective._no_pin):
  """-> (sum w CE / sum w, metrics)."""
  out = correction_ce(corr, hidden, lm_head_w, embed_w, labels, chunk, pin=pin)
  w = sup * weights
  loss = jnp.sum(out["ce"] * w) / jnp.maximum(jnp.sum(w), 1e-9)
  den = jnp.maximum(jnp.sum(sup), 1)
  off = sup & ~out["on"]
  n_off = jnp.maximum(jnp.sum(off), 1)
  return loss, dict(acc=jnp.sum(out["hit"] & sup) / den, acc_base=jnp.sum(out["hit_base"] & sup) / den,
                    acc_off=jnp.sum(out["hit"] & off) / n_off, acc_off_base=jnp.sum(out["hit_base"] & off) / n_off,
                    n_off=jnp.sum(off), corr_loss=loss)


def make_parent_step(head_cfg, head_graphdef, corr_graphdef, target_cfg, target_graphdef, *,
                     tx: optax.GradientTransformation, num_anchors: int, gamma: float | None, chunk: int,
                     joint: bool, compute_dtype=jnp.float32, schedule=None, state_sharding=None,
                     rules=shd.TRAIN_RULES, compiler_options: dict[str, Any] | None = None) -> Callable:
  """-> step(state, target_params, head_params, batch) -> (state, metrics), jitted, state donated.
  state.params: the correction's (frozen head) or (head's, correction's) (joint); head_params is
  the frozen head's (ignored when joint)."""
  block_size = head_cfg.block_size
  gamma = objective.default_gamma(block_size) if gamma is None else float(gamma)
  weights = jnp.asarray(objective.decay_weights(block_size, gamma))
  taps = head_cfg.target_layer_ids
  pin = shd.pinner(None if state_sharding is None else state_sharding.step.mesh, rules)
  traces = [0]

  def train_step(state: TrainState, target_params, head_params, batch):
    traces[0] += 1
    target = nnx.merge(target_graphdef, target_params)
    feats = objective.target_features(target, batch, taps, pin=pin)
    embed_w = jax.lax.stop_gradient(target.embed_weight)
    lm_head_w = jax.lax.stop_gradient(target.lm_head_weight)
    anchors, valid = objective.sample_anchors(jax.random.fold_in(state.key, state.step), batch.loss_mask, num_anchors)
    labels, sup = objective.block_targets(batch.input_ids, batch.loss_mask, anchors, valid, block_size=block_size)
    b, a = anchors.shape

    def hidden_of(hp):
      head = nnx.merge(head_graphdef, _cast(hp, compute_dtype))
      h = objective.packed_hidden(head, embed_w, feats, batch, anchors, valid, block_size=block_size,
                                  mask_token_id=head_cfg.mask_token_id, pin=pin)
      return h.reshape(b, a, block_size, -1)

    frozen_hidden = None if joint else jax.lax.stop_gradient(hidden_of(head_params))

    def loss_fn(params):
      cp = params[1] if joint else params
      corr = nnx.merge(corr_graphdef, _cast(cp, compute_dtype))
      if joint:
        head_l, head_m = objective.head_loss(nnx.merge(head_graphdef, _cast(params[0], compute_dtype)), embed_w,
                                             lm_head_w, feats, batch, anchors, valid, block_size=block_size,
                                             gamma=gamma, mask_token_id=head_cfg.mask_token_id, chunk=chunk, pin=pin)
        hidden = hidden_of(params[0])
      else:
        head_l, head_m, hidden = 0.0, {}, frozen_hidden
      loss, m = correction_loss(corr, hidden, lm_head_w, embed_w, labels, sup, weights, chunk, pin=pin)
      return loss + head_l, dict(m, **{f"head_{k}": v for k, v in head_m.items() if k in ("acc", "accept_len")})

    return apply_loss(state, loss_fn, tx, state_sharding, schedule)

  return jit_step(train_step, traces, compiler_options)


def _shardings(abstract, mesh):
  return _canonical(shd.state_shardings(abstract, mesh, shd.DEFAULT_RULES))


@dataclasses.dataclass
class ParentRun:
  """What driver.train needs: the initial state, the step (state, target_params, batch), postfix, finish."""
  cfg: TrainConfig
  head: Any                    # head.Head: the frozen head (or the joint run's starting head)
  corr_cfg: pc.CorrectionConfig
  corr_graphdef: nnx.GraphDef
  state: TrainState
  jitted: Callable

  def step(self, state, target_params, batch):
    return self.jitted(state, target_params, self.head.params, batch)

  def postfix(self, last: dict) -> dict:
    return dict(loss=f"{last['loss']:.3f}", acc=f"{last['acc']:.3f}", base=f"{last['acc_base']:.3f}",
                off=f"{last['acc_off']:.2f}/{last['acc_off_base']:.2f}", tok_s=f"{last['tokens_per_s']:.0f}")

  def finish(self, state: TrainState, summary: dict) -> dict:
    from glance_jax.head import Head, save_head
    export = pathlib.Path(self.cfg.export_dir or pathlib.Path(self.cfg.workdir) / "head")
    params = jax.device_get(state.params)
    corr = pc.Correction(self.corr_cfg, self.corr_graphdef, params[1] if self.cfg.parent_joint else params)
    if jax.process_index() == 0:
      if self.cfg.parent_joint:
        save_head(export, self.head.config, params[0])
      else:                    # the frozen head as it was, with what lies beside it
        src = pathlib.Path(self.cfg.head_init)
        export.mkdir(parents=True, exist_ok=True)
        if src.resolve() != export.resolve():
          for f in src.iterdir():
            if f.is_file() and not f.name.startswith(pc.FILE.split(".")[0]):
              shutil.copy2(f, export / f.name)
      pc.save(export, corr, {"steps": summary.get("steps"), "joint": self.cfg.parent_joint,
                             "head": str(self.cfg.head_init), "last": summary.get("last")})
    head = Head(self.head.config, self.head.graphdef,
                params[0] if self.cfg.parent_joint else self.head.params)
    return dict(summary, export=str(export), head=head.with_parent_correction(corr))


def build(cfg: TrainConfig, target, mesh: Mesh, *, tx: optax.GradientTransformation, schedule) -> ParentRun:
  """The frozen (or joint) head, the correction's config and sharded initial state, and the step."""
  from glance_jax.head import Head, HeadConfig
  from glance_jax.head.init import init_head
  if cfg.head_init:
    head = Head.load(cfg.head_init, target=target, dtype=jnp.float32, mesh=mesh)
  elif cfg.parent_joint:
    hc = HeadConfig.for_target(target.config, num_layers=cfg.head_layers, block_size=cfg.block_size)
    head = Head(hc, *init_head(hc, seed=cfg.seed, dtype=jnp.float32, mesh=mesh))
  else:
    raise ValueError("drafter=parent: head_init is not set (TrainConfig checks this)")
  corr_cfg = pc.CorrectionConfig.for_head(head.config, width=cfg.parent_width, rank=cfg.parent_rank,
                                          path=cfg.parent_path)
  corr_graphdef, corr_abstract = pc.abstract_correction(corr_cfg)
  seed = cfg.seed

  def params0(head_params):
    corr = pc.init_correction(corr_cfg, seed=seed)[1]
    return (_cast(head_params, jnp.float32), corr) if cfg.parent_joint else corr

  def build_state(head_params):
    p = params0(head_params)
    return TrainState(step=jnp.zeros((), jnp.int32), params=p, opt_state=tx.init(p), key=jax.random.key(seed))

  abstract_p = jax.eval_shape(params0, head.params)
  p_sh = (_shardings(head.params, mesh), _shardings(corr_abstract, mesh)) if cfg.parent_joint else \
      _shardings(corr_abstract, mesh)
  rep = NamedSharding(mesh, P())
  opt_sh = _shardings(jax.eval_shape(tx.init, abstract_p), mesh)   # moments follow their params' axes
  sh = TrainState(step=rep, params=p_sh, opt_state=opt_sh, key=rep)
  state = jax.jit(build_state, out_shardings=sh)(head.params)
  jitted = make_parent_step(head.config, head.graphdef, corr_graphdef, target.config, target.graphdef, tx=tx,
                            num_anchors=cfg.num_anchors, gamma=cfg.gamma, chunk=cfg.ce_chunk, joint=cfg.parent_joint,
                            compute_dtype=DTYPES[cfg.compute_dtype], schedule=schedule, state_sharding=sh)
  logger.info("parent correction: width %d, rank %d, %s head %s", corr_cfg.width, corr_cfg.rank,
              "joint with the" if cfg.parent_joint else "frozen", cfg.head_init or "(random)")
  return ParentRun(cfg, head, corr_cfg, corr_graphdef, state, jitted)
