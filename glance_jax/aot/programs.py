"""The programs users run, as (jitted function, abstract arguments) pairs for ahead-of-time compiles.

Every argument is a `jax.ShapeDtypeStruct` carrying the `NamedSharding` a real run gives it: the
weights by the logical-axis rules (glance_jax.sharding), prompt rows on `data`, the decode state in
the layout the compiled prefill hands the loop (its output shardings), or by the same rules when
prefill did not compile. Nothing is allocated, so an 8B model compiles on a CPU host for any TPU
topology libtpu knows.

Programs (names are the report's rows):
  prefill               decode.loop.prefill of the glance loop: image tower, prompt, first token, head context
  ar_step               engine.decode_step: one plain token (the reference the ratios divide by)
  round.<m>             one round of decode/loop.py for method m (ar, ngram, chain, glance15, ...): loop.one_round
  loop.<m>              the whole generation: one lax.while_loop of rounds (cost is per compile)
  regen.prefill/.loop   regeneration's batch: method ar at the recipe's regen batch and length
  train<mesh>           the head's train step at the recipe (configs/train_qwen3_vl_8b.py)
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from glance_jax import sharding as shd
from glance_jax.config import Qwen3VLConfig

METHOD_RUNS = (("ar", "ar", 1), ("ngram", "ngram", 15), ("chain", "chain", 15), ("glance15", "glance", 15),
               ("glance31", "glance", 31), ("glance63", "glance", 63))
# The rivals (decode/drafters/eagle3.py presets, two_model.py): compiled on request
# (--methods eagle3,eagle3chain,twomodel).
RIVAL_RUNS = (("eagle3", "eagle3", 32), ("eagle3chain", "eagle3-chain", 4), ("twomodel", "two-model", 4))
# GLANCE with its head drafting over a draft vocabulary of Sizes.draft_vocab tokens
# (head/draft_vocab.py): compiled on request (--methods glance31v,glance63v).
VOCAB_RUNS = (("glance31v", "glance-vocab", 31), ("glance63v", "glance-vocab", 63))
# GLANCE with calibrated node scores (head/tree_calibration.py; compiled on request: --methods glance63c).
# GLANCE with a parent correction (head/parent_correction.py: each node's own children; --methods glance63p,
# glance63pv over the draft vocabulary, glance63pa reading the path's bag too).
SCORE_RUNS = (("glance63c", "glance-calibrated", 63), ("glance63p", "glance-parent", 63),
              ("glance63pv", "glance-parent-vocab", 63), ("glance63pa", "glance-parent-path", 63))
# Budgets past 63 (compiled on request): on v6e the ridge is ~560 rows a pass, so a 128- or 256-row
# verify may cost about what one row does there.
WIDE_RUNS = (("glance127", "glance", 127), ("glance255", "glance", 255))


@dataclasses.dataclass(frozen=True)
class Sizes:
  """What one report compiles: model, head, prompt, decode and training shapes."""
  config: Qwen3VLConfig
  dtype: Any = jnp.bfloat16
  head_layers: int = 5
  block_size: int = 16
  prompt_len: int = 1024
  image_hw: tuple[int, int] | None = (448, 448)   # one image in the prompt (None: text only)
  max_length: int = 2048                           # cache slots
  max_new_tokens: int = 512
  batch: int = 1
  regen_batch: int = 32
  regen_max_new: int = 512
  train_batch: int = 32
  train_seq: int = 3072
  train_anchors: int = 512
  train_patches: int = 1024
  # blocks per checkpointed head pass (objective.head_group, TrainConfig.head_group: 32 in the 8B recipe);
  # None: all anchors' blocks in one pass: [B, H, 8192, 11264] fp32 scores, TBs per device at 8B
  train_head_group: int | None = 32
  train_ce_chunk: int = 128                        # blocks per CE chunk (TrainConfig.ce_chunk)
  draft_vocab: int = 32000                         # K of the glance*v runs (EAGLE3-VL's draft vocabulary size)


@dataclasses.dataclass
class Program:
  name: str
  fn: Callable            # a jax.jit-wrapped function
  args: tuple
  kwargs: dict
  kind: str               # prefill | step | round | loop | train


def abstract(tree, shardings):
  """Abstract arrays (shape, dtype, sharding) for a pytree of arrays / ShapeDtypeStructs (nnx
  Variables kept, with their metadata) and a matching pytree of shardings."""
  def one(s, x):
    if isinstance(x, nnx.Variable):
      v = x.get_value()
      return x.replace(value=jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=s))
    return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s)
  return jax.tree.map(one, shardings, tree, is_leaf=lambda x: isinstance(x, (jax.sharding.Sharding, nnx.Variable)))


def abstract_state(state: nnx.State, mesh: Mesh) -> nnx.State:
  """An nnx.State of abstract values with the shardings its logical axes give on `mesh`."""
  return abstract(state, shd.state_shardings(state, mesh))


def _by_rows(mesh: Mesh, shape, batch_dim: int = 0) -> NamedSharding:
  axes = [None] * len(shape)
  axes[batch_dim] = shd.BATCH
  return NamedSharding(mesh, shd.logical_to_spec(axes, shape, mesh))


def _sds(shape, dtype, sharding):
  return jax.ShapeDtypeStruct(tuple(shape), dtype, sharding=sharding)


def models(sizes: Sizes, mesh: Mesh):
  """(target graphdef, abstract params, head config, head graphdef, abstract head params)."""
  from glance_jax.head import HeadConfig
  from glance_jax.head.model import abstract_head
  from glance_jax.qwen3_vl.weights import abstract_model
  tgd, tstate = abstract_model(sizes.config, sizes.dtype)
  hcfg = HeadConfig.for_target(sizes.config, num_layers=sizes.head_layers, block_size=sizes.block_size)
  hgd, hstate = abstract_head(hcfg, sizes.dtype)
  return tgd, abstract_state(tstate, mesh), hcfg, hgd, abstract_state(hstate, mesh)


def prompt_args(sizes: Sizes, mesh: Mesh, batch: int) -> dict:
  """Abstract prefill inputs: [B, prompt_len] ids with one image's placeholders, its patches."""
  cfg = sizes.config
  s = sizes.prompt_len
  rows = _by_rows(mesh, (batch, s))
  rep = NamedSharding(mesh, P())
  out = dict(input_ids=_sds((batch, s), jnp.int32, rows), attention_mask=_sds((batch, s), jnp.bool_, rows),
             positions=_sds((3, batch, s), jnp.int32, _by_rows(mesh, (3, batch, s), 1)),
             rope_delta=_sds((batch,), jnp.int32, _by_rows(mesh, (batch,))), pixel_values=None, vision_meta=None)
  if sizes.image_hw is not None:
    from glance_jax.qwen3_vl.vision_meta import vision_meta
    v = cfg.vision
    grid = np.array([[1, sizes.image_hw[0] // v.patch_size, sizes.image_hw[1] // v.patch_size]] * batch)
    n_tokens = int(grid.prod(-1).sum()) // v.spatial_merge_size**2
    if n_tokens > batch * s:
      raise ValueError(f"prompt_len {s} is shorter than the image's {n_tokens // batch} placeholder tokens")
    meta = vision_meta(grid, num_position_embeddings=v.num_position_embeddings,
                       spatial_merge_size=v.spatial_merge_size).as_dict()
    out["pixel_values"] = _sds((int(grid.prod(-1).sum()), v.patch_dim), jnp.float32, rep)
    out["vision_meta"] = {k: _sds(a.shape, a.dtype, rep) for k, a in meta.items()}
  return out


@dataclasses.dataclass(frozen=True)
class Spec:
  """One method's static arguments: its drafter, its width policy, the loop's knobs."""
  drafter: Any
  policy: Any
  cfg: Any
  params: Any = None        # the drafter's abstract weights where they are not the GLANCE head's (m[4])

  def slots_needed(self, prompt_len: int) -> int:
    from glance_jax.decode.loop import slots_needed
    return slots_needed(self.drafter, self.cfg, prompt_len)


def loop_config(sizes: Sizes, method: str, budget: int, m, mesh: Mesh | None = None, *,
                max_new_tokens: int | None = None) -> Spec:
  """generate()'s drafter and policy for (method, budget) on the abstract models `m`, except ngram:
  its per-round choice of the smallest width holding the proposal (policies.Holding; generate's
  cost gate runs AR's program under every built-in table)."""
  from glance_jax.decode import methods, policies
  from glance_jax.decode.drafters import ar, block, ngram
  from glance_jax.decode.loop import LoopConfig
  from glance_jax.static_args import Hashed
  _, _, hcfg, hgd, _ = m
  params = None
  if method == "ar":
    drafter, policy = ar.AR(), policies.Fixed(0)
  elif method.startswith("eagle3"):
    from glance_jax.decode.drafters import eagle3
    head = eagle3_head(sizes, mesh)
    drafter = eagle3.drafter_for(head.cfg, head.graphdef, sizes.config, *eagle3.PRESETS[method], mesh=mesh)
    params = (head.params, head.d2t)
    policy = policies.Fixed(drafter.num_nodes)
  elif method == "two-model":
    from glance_jax.decode.drafters import two_model
    dcfg, dgd, dparams = draft_model(sizes, mesh)
    two_model.check_pair(dcfg, sizes.config)
    drafter, params = two_model.TwoModelDrafter(graphdef=Hashed(dgd), depth=two_model.PRESETS[method], mesh=mesh), dparams
    policy = policies.Fixed(drafter.num_nodes)
  elif method == "ngram":
    drafter = ngram.NGram(depth=min(budget, sizes.block_size - 1))
    policy = policies.Holding(policies.ngram_widths(drafter.num_nodes))
  else:
    cls = block.ChainDrafter if method == "chain" else block.BlockDrafter
    vocab = (min(sizes.draft_vocab, sizes.config.text.vocab_size)
             if method in ("glance-vocab", "glance-parent-vocab") else 0)
    calibrated = method == "glance-calibrated"
    corr = (parent_correction(hcfg, sizes, mesh, path=method == "glance-parent-path")
            if method.startswith("glance-parent") else None)
    drafter = cls(graphdef=Hashed(hgd), block_size=sizes.block_size, taps=tuple(hcfg.target_layer_ids),
                  mask_token_id=hcfg.mask_token_id, budget=budget, mesh=mesh, draft_vocab=vocab,
                  calibrated=calibrated, correction=None if corr is None else Hashed(corr[0]))
    if vocab or corr is not None:
      params = (m[4], draft_vocab(sizes, mesh, vocab) if vocab else None, None,
                None if corr is None else corr[1])
    if calibrated:   # (spine, off) [L, K] tables, K = the tree's ranks a depth
      k = min(budget, sizes.config.text.vocab_size)
      table = _sds((sizes.block_size - 1, k), jnp.float32, NamedSharding(mesh, P()))
      params = (m[4], None, (table, table), None)
    record = methods.recorded_widths(drafter.num_nodes) if method != "chain" else ()
    policy = policies.Fixed(drafter.num_nodes, record)
  return Spec(drafter, policy, LoopConfig(max_new_tokens=max_new_tokens or sizes.max_new_tokens, mesh=mesh), params)



def _dparams(spec: Spec, m):
  if spec.params is not None:
    return spec.params
  return m[4] if spec.drafter.tap_layers else ()


def eagle3_head(sizes: Sizes, mesh: Mesh, draft_vocab: int = 32000):
  """An abstract EAGLE-3 head for the target (Eagle3Checkpoint with abstract params; d2t as an
  abstract array): the target's widths, one midlayer, a `draft_vocab` lm_head, SpecForge's
  Qwen3-VL taps (3, L/2 - 1, L - 4) where the target has 36 layers, EAGLE-3's default otherwise."""
  from glance_jax.eagle3 import Eagle3Checkpoint, abstract_head
  from glance_jax.train.eagle3_train import head_config
  layers = sizes.config.text.num_hidden_layers
  taps = (3, 17, 32) if layers == 36 else ()
  cfg = head_config(sizes.config, draft_vocab=draft_vocab, aux_layer_ids=taps)
  gd, state = abstract_head(cfg, dtype=sizes.dtype)
  rep = NamedSharding(mesh, P())
  d2t = _sds((cfg.draft_vocab_size,), jnp.int32, rep)
  return Eagle3Checkpoint(cfg, gd, abstract_state(state, mesh), d2t, _sds((cfg.vocab_size,), jnp.bool_, rep))


def draft_vocab(sizes: Sizes, mesh: Mesh, k: int):
  """An abstract head/draft_vocab.DraftVocab of K rows at the target's width, laid out as gather() lays it."""
  from glance_jax.head import draft_vocab as dv
  k = min(k, sizes.config.text.vocab_size)
  d = sizes.config.text.hidden_size
  sh = dv.shardings(k, d, mesh)
  return dv.DraftVocab(ids=_sds((k,), jnp.int32, sh.ids), rows=_sds((k, d), sizes.dtype, sh.rows))


def parent_correction(head_cfg, sizes: Sizes, mesh: Mesh, path: bool = False):
  """An abstract parent correction for the head (width 256, rank 32; `path`: reading the ancestors'
  bag too): (graphdef, params)."""
  from glance_jax.head import parent_correction as pc
  gd, state = pc.abstract_correction(pc.CorrectionConfig.for_head(head_cfg, path=path), sizes.dtype)
  return gd, abstract_state(state, mesh)


def draft_model(sizes: Sizes, mesh: Mesh):
  """The two-model arm's abstract draft: (config, graphdef, params), two_model.draft_config_for's
  config (Qwen3-VL-4B for the 8B)."""
  from glance_jax.decode.drafters.two_model import draft_config_for
  from glance_jax.qwen3_vl.weights import abstract_model
  dcfg = draft_config_for(sizes.config)
  gd, state = abstract_model(dcfg, sizes.dtype)
  return dcfg, gd, abstract_state(state, mesh)


def _key(mesh):
  k = jax.eval_shape(lambda: jax.random.key(0))
  return _sds(k.shape, k.dtype, NamedSharding(mesh, P()))


def stops_arg(sizes: Sizes, mesh: Mesh):
  return _sds((len(sizes.config.eos_token_ids) or 1,), jnp.int32, NamedSharding(mesh, P()))


def prefill_program(name: str, sizes: Sizes, mesh: Mesh, spec: Spec, batch: int, max_length: int, m) -> Program:
  from glance_jax.decode.loop import prefill
  from glance_jax.qwen3_vl.prompt import Prompt
  a = prompt_args(sizes, mesh, batch)
  prompt = Prompt(a["input_ids"], a["attention_mask"], a["positions"], a["pixel_values"], a["vision_meta"])
  args = (m[0], m[1], spec.drafter, _dparams(spec, m), spec.policy, prompt, a["rope_delta"], stops_arg(sizes, mesh),
          _key(mesh))
  return Program(name, prefill, args, dict(cfg=spec.cfg, max_length=max_length), "prefill")


def state_from_prefill(prefill: Program, mesh: Mesh, compiled=None):
  """The decode state the loop receives: prefill's output shapes, in the shardings a compiled
  prefill chose, or (compiled=None) by the rules: K/V rows on data and kv heads on tensor, every
  other array's rows on data."""
  shapes = jax.eval_shape(*_dynamic(prefill))
  if compiled is not None:
    return abstract(shapes, compiled.output_shardings)

  def rule(x):
    if x.ndim == 4:     # [B, S, kv_heads, head_dim]: the target's and the head's K/V
      return NamedSharding(mesh, shd.logical_to_spec((shd.BATCH, None, shd.KV_HEADS, None), x.shape, mesh))
    return _by_rows(mesh, x.shape) if x.ndim else NamedSharding(mesh, P())
  return jax.tree.map(lambda x: _sds(x.shape, x.dtype, rule(x)), shapes)


def _dynamic(program: Program):
  """(a function of the program's array arguments alone, those arguments): its drafter and policy,
  static arguments that are not pytrees, are closed over (jax.eval_shape takes arrays only)."""
  from glance_jax.decode.drafter import Drafter
  from glance_jax.decode.policies import WidthPolicy
  static = {i: a for i, a in enumerate(program.args) if isinstance(a, (Drafter, WidthPolicy))}

  def fn(*dynamic):
    it = iter(dynamic)
    return program.fn(*(static[i] if i in static else next(it) for i in range(len(program.args))), **program.kwargs)
  return fn, *(a for i, a in enumerate(program.args) if i not in static)


def round_program(name: str, spec: Spec, state, stops, m) -> Program:
  from glance_jax.decode.loop import one_round
  return Program(name, one_round, (m[0], m[1], spec.drafter, _dparams(spec, m), spec.policy, state, stops),
                 dict(cfg=spec.cfg), "round")


def loop_program(name: str, spec: Spec, state, stops, m) -> Program:
  from glance_jax.decode.loop import decode_rounds
  return Program(name, decode_rounds, (m[0], m[1], spec.drafter, _dparams(spec, m), spec.policy, state, stops),
                 dict(cfg=spec.cfg), "loop")


def ar_step_program(sizes: Sizes, mesh: Mesh, batch: int, state, m) -> Program:
  from glance_jax.qwen3_vl import engine
  tgd, tparams = m[0], m[1]
  return Program(f"ar_step.b{batch}", engine.decode_step,
                 (tgd, tparams, state.cache, state.root, state.rope_delta), {}, "step")


def train_program(sizes: Sizes, mesh: Mesh, m) -> Program:
  """The head's train step at the recipe on `mesh` (fp32 master weights + AdamW, bf16 compute)."""
  from glance_jax.train import step as step_lib
  from glance_jax.train.batch import TrainBatch, batch_shardings
  from glance_jax.train.optim import make_optimizer
  from glance_jax.head.model import abstract_head
  from glance_jax.qwen3_vl.vision_meta import vision_meta
  tgd, tparams, hcfg, hgd, _ = m
  tx, schedule = make_optimizer(total_steps=1000, lr=6e-4, weight_decay=0.0, warmup_frac=0.04, clip=1.0)
  state_sh = step_lib.train_state_shardings(hcfg, tx, mesh)
  _, habs = abstract_head(hcfg, jnp.float32)
  state_shapes = jax.eval_shape(lambda p: step_lib.TrainState(step=jnp.zeros((), jnp.int32), params=p,
                                                              opt_state=tx.init(p), key=jax.random.key(0)), habs)
  state = abstract(state_shapes, state_sh)
  b, s, v = sizes.train_batch, sizes.train_seq, sizes.config.vision
  host = TrainBatch(input_ids=np.zeros((b, s), np.int32), loss_mask=np.zeros((b, s), bool),
                    attention_mask=np.zeros((b, s), bool), positions=np.zeros((3, b, s), np.int32))
  if sizes.train_patches:
    meta = vision_meta(np.array([[1, 2, sizes.train_patches // 2]]), num_position_embeddings=v.num_position_embeddings,
                       spatial_merge_size=v.spatial_merge_size).as_dict()
    host = host.replace(pixel_values=np.zeros((sizes.train_patches, v.patch_dim), np.float32), **meta)
  batch = abstract(host, batch_shardings(host, mesh))
  fn = step_lib.make_train_step(hcfg, hgd, sizes.config, tgd, tx=tx, block_size=sizes.block_size,
                                num_anchors=sizes.train_anchors, compute_dtype=jnp.bfloat16, schedule=schedule,
                                state_sharding=state_sh, head_group=sizes.train_head_group,
                                chunk=sizes.train_ce_chunk)
  shape = "x".join(str(x) for x in mesh.devices.shape)
  group = "" if sizes.train_head_group is None else f".g{sizes.train_head_group}"
  ce = "" if sizes.train_ce_chunk == 128 else f".ce{sizes.train_ce_chunk}"
  return Program(f"train.{shape}{group}{ce}", fn, (state, tparams, batch), {}, "train")


def method_list(names) -> list[tuple[str, str, int]]:
  known = {n: (n, m, b) for n, m, b in METHOD_RUNS + RIVAL_RUNS + VOCAB_RUNS + SCORE_RUNS + WIDE_RUNS}
  bad = [n for n in names if n not in known]
  if bad:
    raise ValueError(f"unknown method run(s) {bad}; choose from {list(known)}")
  return [known[n] for n in names]
