"""The train state, born sharded, and one jitted train step that donates it.

Functional at the jit boundary (style anchors 5-6): the head is (graphdef, params) with params an
nnx.State of fp32 Params; the frozen target's params are a separate ARGUMENT of the step (not
closed over, so not baked into the HLO, and sharded by the same logical rules), never
differentiated and never in the optimizer. Parameters and optimizer state are created directly in
their shardings (jit with out_shardings from the logical axes), and the step keeps them there.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import flax.struct
import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from glance_jax import sharding as shd
from glance_jax.config import Qwen3VLConfig
from glance_jax.head.config import HeadConfig
from glance_jax.head.init import init_head
from glance_jax.head.model import abstract_head
from glance_jax.train import objective
from glance_jax.train.batch import TrainBatch


@flax.struct.dataclass
class TrainState:
  step: jax.Array          # int32 []: optimizer steps taken
  params: nnx.State        # the head's nnx.Param state, fp32 master weights
  opt_state: Any           # optax state over `params` only
  key: jax.Array           # PRNG key; step t draws its anchors from fold_in(key, t)


def train_state_shardings(head_cfg: HeadConfig, tx: optax.GradientTransformation, mesh: Mesh,
                          rules=shd.DEFAULT_RULES) -> TrainState:
  """A TrainState of NamedShardings: params by their logical axes; optimizer moments inherit
  them (optax keeps the Param wrappers, axes metadata included, in mu / nu); scalars replicated."""
  _, abstract = abstract_head(head_cfg, jnp.float32)
  abstract_opt = jax.eval_shape(tx.init, abstract)
  rep = NamedSharding(mesh, P())
  return TrainState(step=rep, params=_canonical(shd.state_shardings(abstract, mesh, rules)),
                    opt_state=_canonical(shd.state_shardings(abstract_opt, mesh, rules)), key=rep)


def _canonical(shardings):
  """Trailing replicated dims dropped (P(None,) -> P()). The two are the same layout, but jit
  keys its executables on the spec as written and hands outputs back in the short form, so a
  state born with P(None,) would make the second step compile again."""
  def one(s):
    spec = tuple(s.spec)
    while spec and spec[-1] is None:
      spec = spec[:-1]
    return NamedSharding(s.mesh, P(*spec), memory_kind=s.memory_kind)
  return jax.tree.map(one, shardings, is_leaf=lambda x: isinstance(x, NamedSharding))


def init_train_state(head_cfg: HeadConfig, *, tx: optax.GradientTransformation, seed: int = 0,
                     head: tuple[nnx.GraphDef, nnx.State] | None = None, mesh: Mesh | None = None,
                     rules=shd.DEFAULT_RULES) -> tuple[nnx.GraphDef, TrainState]:
  """-> (head graphdef, TrainState). A random head is created already sharded (init_head under
  jit with out_shardings); `head` = (graphdef, params), e.g. a DFlash text head from
  `init_head(cfg, from_dflash=...)`, is taken as the starting point. Either way one jit with
  out_shardings casts the params to fp32 master weights and creates the optimizer state, step and
  key straight into their shardings (no host copy, no device_put: multi-process safe)."""
  if head is None:
    graphdef, params = init_head(head_cfg, seed=seed, dtype=jnp.float32, mesh=mesh, rules=rules)
  else:
    graphdef, params = head

  def build(params):
    params = _cast(params, jnp.float32)
    return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params),
                      key=jax.random.key(seed))

  if mesh is None:
    # Committed to one device, like the step's outputs: an uncommitted first state would make
    # the second call compile the step again.
    return graphdef, jax.device_put(jax.jit(build)(params), jax.devices()[0])
  sh = train_state_shardings(head_cfg, tx, mesh, rules)
  return graphdef, jax.jit(build, out_shardings=sh)(params)


def _cast(params: nnx.State, dtype) -> nnx.State:
  return jax.tree.map(lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x,
                      params)


def make_train_step(head_cfg: HeadConfig, head_graphdef: nnx.GraphDef, target_cfg: Qwen3VLConfig,
                    target_graphdef: nnx.GraphDef, *, tx: optax.GradientTransformation,
                    block_size: int, num_anchors: int, gamma: float | None = None, chunk: int = 128,
                    head_group: int | None = None,
                    compute_dtype=jnp.float32, mask_token_id: int | None = None,
                    schedule: optax.Schedule | None = None,
                    state_sharding: TrainState | None = None, rules=shd.TRAIN_RULES,
                    compiler_options: dict[str, Any] | None = None) -> Callable:
  """-> train_step(state, target_params, batch, feats=None) -> (state, metrics), jitted with the
  state donated.

  Online features (feats=None): one frozen target forward inside the step. Cached features
  (feats [B,S,F], e.g. from FeatureCache.collate): the target only lends its embedding and lm_head.
  Tap layers and the mask token are the head's own, so training and decoding cannot disagree;
  `block_size` must equal the head's. `chunk` (blocks per CE chunk) and `head_group` (blocks per
  head pass, None = all in one) bound memory; see objective.head_loss.
  `compute_dtype=jnp.bfloat16` runs the head in bf16 on casts of the fp32 master weights
  (gradients, moments and updates stay fp32). `state_sharding` (from `train_state_shardings`)
  pins the new state to the old layout, so the donated buffers are reused and the step compiles
  once; with it, the activations are also pinned on its mesh by `rules` (sharding.TRAIN_RULES:
  rows over data x fsdp, so each device holds its own rows' activations; the batch should be
  placed by the same rules, see batch.batch_shardings). `compiler_options` go to jax.jit (XLA options, e.g.
  {"xla_backend_optimization_level": 0}, which halves CPU compile time in tests).
  `train_step.num_traces()` counts traces.
  """
  if block_size != head_cfg.block_size:
    raise ValueError(f"block_size {block_size} disagrees with the head's configured block_size "
                     f"{head_cfg.block_size}")
  if num_anchors < 1:
    raise ValueError(f"num_anchors must be >= 1, got {num_anchors}")
  head_cfg.check_target(target_cfg, where="train_step")
  gamma = objective.default_gamma(block_size) if gamma is None else float(gamma)
  objective.decay_weights(block_size, gamma)  # validates gamma
  mask_token_id = head_cfg.mask_token_id if mask_token_id is None else int(mask_token_id)
  taps = head_cfg.target_layer_ids
  pin = shd.pinner(None if state_sharding is None else state_sharding.step.mesh, rules)
  traces = [0]

  def train_step(state: TrainState, target_params: nnx.State, batch: TrainBatch,
                 feats: jax.Array | None = None):
    traces[0] += 1
    target = nnx.merge(target_graphdef, target_params)
    if feats is None:
      feats = objective.target_features(target, batch, taps, pin=pin)
    feats = jax.lax.stop_gradient(feats)
    embed_w = jax.lax.stop_gradient(target.embed_weight)
    lm_head_w = jax.lax.stop_gradient(target.lm_head_weight)
    anchors, valid = objective.sample_anchors(jax.random.fold_in(state.key, state.step),
                                              batch.loss_mask, num_anchors)

    def loss_fn(params):
      head = nnx.merge(head_graphdef, _cast(params, compute_dtype))
      return objective.head_loss(head, embed_w, lm_head_w, feats, batch, anchors, valid,
                                 block_size=block_size, gamma=gamma, mask_token_id=mask_token_id,
                                 chunk=chunk, head_group=head_group, pin=pin)

    return apply_loss(state, loss_fn, tx, state_sharding, schedule)

  return jit_step(train_step, traces, compiler_options)


def apply_loss(state: TrainState, loss_fn: Callable, tx: optax.GradientTransformation,
               state_sharding: TrainState | None, schedule: optax.Schedule | None):
  """One optimizer update of `state` on loss_fn(params) -> (loss, metrics), shared by every head's
  step: the new state pinned to the old layout (donated buffers reused), metrics with loss,
  grad_norm and the step's learning rate."""
  (loss, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
  updates, opt_state = tx.update(grads, state.opt_state, state.params)
  new = state.replace(step=state.step + 1, params=optax.apply_updates(state.params, updates), opt_state=opt_state)
  if state_sharding is not None:
    new = jax.lax.with_sharding_constraint(new, state_sharding)
  metrics = dict(metrics, loss=loss, grad_norm=optax.global_norm(grads))
  if schedule is not None:
    metrics["lr"] = schedule(state.step)
  return new, metrics


def jit_step(train_step: Callable, traces: list, compiler_options) -> Callable:
  """jax.jit with the state donated and `num_traces()` (traces[0], counted by the step)."""
  jitted = jax.jit(train_step, donate_argnums=(0,), compiler_options=compiler_options)
  jitted.num_traces = lambda: traces[0]
  return jitted


def make_feature_fn(target_graphdef: nnx.GraphDef, tap_layers: Sequence[int], *,
                    compiler_options: dict[str, Any] | None = None) -> Callable:
  """-> jitted features(target_params, batch) -> [B,S,F] (to fill a FeatureCache)."""
  taps = tuple(int(i) for i in tap_layers)

  def features(target_params, batch: TrainBatch):
    return objective.target_features(nnx.merge(target_graphdef, target_params), batch, taps)

  return jax.jit(features, compiler_options=compiler_options)


__all__ = ["TrainState", "init_train_state", "make_feature_fn", "make_train_step",
           "train_state_shardings"]
