"""The EAGLE-3 rival trained by `python train.py` (TrainConfig.drafter = "eagle3").

driver.train runs both drafters through one loop: the same regenerated rows, data order, sharded
batches, orbax checkpoints and metrics. This module is what differs: the head (train/step.py's
TrainState holding an Eagle3Head's fp32 params), the draft vocabulary, the step and the export.

- Draft vocabulary: the K most frequent response tokens of the training rows, exactly as the
  step sees them (after truncation to seq_len; image / video placeholders never count), picked by
  eagle3.vocab_map_from_counts. Computed before step 0 and kept in <workdir>/eagle3_vocab.npz; a
  rerun (a resume) recomputes it and refuses to go on when the file disagrees, since the head's
  lm_head rows are indexed by that vocabulary.
- Step: one frozen target forward gives the 3 taps and the final (normed) hidden state; the target
  distribution over the draft vocabulary is that hidden state against the lm_head rows of the draft
  tokens; then eagle3_objective.ttt_loss, the 7-step training-time test, and AdamW (train/optim.py).
  Tokens are embedded by the target's embed_tokens, frozen, never part of the trained state.
- Warm start: `head_init=DIR` (a midlayer-format head of this config and draft vocabulary, e.g. the
  previous build's) starts from its weights with a fresh optimizer state, as the GLANCE head's
  head_init does: a rival continued on a changed suite, with the same steps as its own recipe allows.
- Export: save_eagle3 (the released midlayer format, with d2t / t2d), what decode.py --method
  eagle3 --head and load_eagle3 read.

Letters: B rows, S seq_len, Dt target width, V target vocab, Vd (= K) draft vocab.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import os
import pathlib
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from glance_jax import sharding as shd
from glance_jax.config import DTYPES, Qwen3VLConfig
from glance_jax.eagle3 import (Eagle3Checkpoint, Eagle3Config, abstract_head, init_eagle3, save_eagle3,
                               vocab_map_from_counts, vocab_map_problem)
from glance_jax.train import eagle3_objective as obj
from glance_jax.train.batch import TrainBatch
from glance_jax.train.config import TrainConfig
from glance_jax.train.step import TrainState, _canonical, _cast, apply_loss, jit_step
from glance_jax.train.token_counts import target_response_counts

logger = logging.getLogger(__name__)

VOCAB_FILE = "eagle3_vocab.npz"


def head_config(target_cfg: Qwen3VLConfig, *, draft_vocab: int, layers: int = 1,
                aux_layer_ids: Sequence[int] = ()) -> Eagle3Config:
  """The head for a target, shaped like its text decoder (SpecForge's qwen3-vl-8b-eagle3.json: the
  target's widths, heads, rope theta and MRoPE section). K is capped at the target vocabulary; the
  taps are always written out (EAGLE-3's default when none are given), so the exported config.json
  says exactly which layers the head reads."""
  t = target_cfg.text
  probe = Eagle3Config(hidden_size=t.hidden_size, intermediate_size=t.intermediate_size,
                       num_attention_heads=t.num_attention_heads, num_key_value_heads=t.num_key_value_heads,
                       head_dim=t.head_dim, vocab_size=t.vocab_size,
                       draft_vocab_size=min(int(draft_vocab), t.vocab_size), num_hidden_layers=int(layers),
                       rms_norm_eps=t.rms_norm_eps, rope_theta=t.rope_theta, mrope_section=t.mrope_section,
                       max_position_embeddings=262144, aux_layer_ids=tuple(aux_layer_ids) or None)
  cfg = dataclasses.replace(probe, aux_layer_ids=probe.layer_ids_for(t.num_hidden_layers))
  cfg.check_target(target_cfg, where="eagle3 head config")
  return cfg


# --- the draft vocabulary --------------------------------------------------------------------------

class DraftVocab(NamedTuple):
  d2t: np.ndarray       # int64 [Vd]: target id = draft id + d2t[draft id]
  t2d: np.ndarray       # bool [V]: target token is in the draft vocabulary
  counts: np.ndarray    # int64 [V]: response-token counts over the rows
  coverage: float       # share of the rows' response tokens inside the vocabulary
  path: pathlib.Path


def draft_vocabulary(rows: Sequence[dict], target_cfg: Qwen3VLConfig, cfg: TrainConfig, size: int) -> DraftVocab:
  """The rows' draft vocabulary of `size` tokens, checked against (or saved to) <workdir>/eagle3_vocab.npz."""
  counts = target_response_counts(rows, target_cfg, seq_len=cfg.seq_len, truncate=cfg.truncate)
  d2t, t2d = vocab_map_from_counts(counts, size)
  coverage = float(counts[t2d].sum() / max(counts.sum(), 1))
  path = pathlib.Path(cfg.workdir) / VOCAB_FILE
  if path.exists():
    try:
      with np.load(path) as f:
        old_d2t, old_t2d = np.asarray(f["d2t"]), np.asarray(f["t2d"])
    except Exception as e:  # noqa: BLE001 - any unreadable file is reported by name
      raise ValueError(f"{path}: unreadable draft vocabulary ({type(e).__name__}: {e})") from None
    if old_d2t.shape != d2t.shape or old_t2d.shape != t2d.shape or not (
        np.array_equal(old_d2t, d2t) and np.array_equal(old_t2d, t2d)):
      raise ValueError(f"{path}: this workdir's draft vocabulary ({old_d2t.shape[0]} tokens) is not the one "
                       f"the regenerated rows give now ({size} tokens): the rows or eagle3_draft_vocab changed "
                       f"since the run began; restore them, or train in a fresh workdir")
  elif jax.process_index() == 0:
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    np.savez(buf, d2t=d2t, t2d=t2d, counts=counts)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(buf.getvalue())
    os.replace(tmp, path)            # atomic: another process never reads half a file
  return DraftVocab(d2t, t2d, counts, coverage, path)


# --- the train state and the step ------------------------------------------------------------------

def state_shardings(head_cfg: Eagle3Config, tx: optax.GradientTransformation, mesh: Mesh,
                    rules=shd.DEFAULT_RULES) -> TrainState:
  """As step.train_state_shardings, for an Eagle3Head: params by their logical axes, moments alike."""
  _, abstract = abstract_head(head_cfg)
  rep = NamedSharding(mesh, P())
  return TrainState(step=rep, params=_canonical(shd.state_shardings(abstract, mesh, rules)),
                    opt_state=_canonical(shd.state_shardings(jax.eval_shape(tx.init, abstract), mesh, rules)),
                    key=rep)


def init_state(head_cfg: Eagle3Config, *, tx: optax.GradientTransformation, seed: int = 0,
               mesh: Mesh | None = None, rules=shd.DEFAULT_RULES,
               params: nnx.State | None = None) -> tuple[nnx.GraphDef, TrainState]:
  """-> (head graphdef, TrainState): a random fp32 head (or `params`, a warm start) and its optimizer
  state, created under one jit straight into their shardings (no unsharded copy: multi-process
  safe). The key is unused by the TTT step (no sampling) but kept, so checkpoints have the GLANCE
  state's layout."""
  graphdef, _ = abstract_head(head_cfg)

  def build(start):
    p = init_eagle3(head_cfg, seed=seed, dtype=jnp.float32)[1] if start is None else start
    return TrainState(step=jnp.zeros((), jnp.int32), params=p, opt_state=tx.init(p), key=jax.random.key(seed))

  if mesh is None:  # committed, like the step's outputs (an uncommitted state recompiles step 2)
    return graphdef, jax.device_put(jax.jit(build)(params), jax.devices()[0])
  return graphdef, jax.jit(build, out_shardings=state_shardings(head_cfg, tx, mesh, rules))(params)


def warm_params(path: str | os.PathLike, head_cfg: Eagle3Config, target_cfg: Qwen3VLConfig,
                vocab: DraftVocab) -> nnx.State:
  """The fp32 params of a saved head to continue (`head_init`): its config must be this run's head
  config and its d2t this run's draft vocabulary, since a step's lm_head rows are indexed by it;
  otherwise a CheckpointError naming the file and what differs."""
  from glance_jax.eagle3 import load_eagle3
  from glance_jax.io import CheckpointError
  ckpt = load_eagle3(path, target_cfg, dtype=jnp.float32)
  root = pathlib.Path(path)
  if ckpt.cfg != head_cfg:
    diff = {k: (getattr(ckpt.cfg, k), getattr(head_cfg, k)) for k in dataclasses.asdict(head_cfg)
            if getattr(ckpt.cfg, k) != getattr(head_cfg, k)}
    raise CheckpointError(f"{root / 'config.json'}: head_init's head differs from this run's (saved, run): {diff}")
  if not np.array_equal(np.asarray(ckpt.d2t), np.asarray(vocab.d2t)):
    raise CheckpointError(f"{root}: head_init's draft vocabulary (d2t) is not this run's "
                          f"({vocab.path}): its lm_head rows would stand for other tokens")
  if "embed_tokens" in ckpt.params:
    raise CheckpointError(f"{root}: head_init holds its own embed_tokens; this run trains a head "
                          f"that embeds with the target's table (eagle3_save_embed only adds it at export)")
  return ckpt.params


def make_eagle3_step(head_cfg: Eagle3Config, head_graphdef: nnx.GraphDef, target_cfg: Qwen3VLConfig,
                     target_graphdef: nnx.GraphDef, *, tx: optax.GradientTransformation, d2t, t2d,
                     steps: int = obj.TTT_STEPS, decay: float = obj.TTT_DECAY, compute_dtype=jnp.float32,
                     schedule: optax.Schedule | None = None, state_sharding: TrainState | None = None,
                     rules=shd.TRAIN_RULES, compiler_options: dict[str, Any] | None = None) -> Callable:
  """-> train_step(state, target_params, batch) -> (state, metrics), jitted with the state donated
  (step.make_train_step's contract: `state_sharding` pins the new state to the old layout and the
  activations' rows on its mesh; compute_dtype runs the head on casts of the fp32 masters).

  d2t int [Vd] / t2d bool [V]: the draft vocabulary (baked in as constants: small, fixed per run).
  Metrics: ttt_loss's loss_k / acc_k / n_k per unrolled step, acc (= acc_0), loss, grad_norm, lr."""
  head_cfg.check_target(target_cfg, where="eagle3 train step")
  problem = vocab_map_problem(d2t, t2d)
  if problem or np.shape(d2t) != (head_cfg.draft_vocab_size,) or np.shape(t2d) != (head_cfg.vocab_size,):
    raise ValueError(f"eagle3 train step: bad draft vocabulary for the head: {problem or 'shapes differ'}")
  taps = tuple(head_cfg.layer_ids_for(target_cfg.text.num_hidden_layers))
  draft_ids = (np.arange(head_cfg.draft_vocab_size) + np.asarray(d2t)).astype(np.int32)   # [Vd] target ids
  t2d = np.asarray(t2d, bool)
  pin = shd.pinner(None if state_sharding is None else state_sharding.step.mesh, rules)
  traces = [0]

  def train_step(state: TrainState, target_params: nnx.State, batch: TrainBatch):
    traces[0] += 1
    target = nnx.merge(target_graphdef, target_params)
    final, _, tapped = target.forward_prompt(batch.prompt, tap_layers=tuple(sorted(set(taps))))
    feats = jnp.concatenate([pin(tapped[i], shd.BATCH, shd.LENGTH, None) for i in taps], axis=-1)   # [B,S,3Dt]
    # The lm_head rows of the draft tokens, gathered once per step (not per unrolled step): [Vd, Dt].
    draft_rows = jnp.take(target.lm_head_weight, draft_ids, axis=0)
    target_p = obj.target_distribution(pin(final, shd.BATCH, shd.LENGTH, None), draft_rows)        # [B,S,Vd] fp32
    feats, target_p = jax.lax.stop_gradient(feats), jax.lax.stop_gradient(pin(target_p, shd.BATCH, shd.LENGTH, None))
    embed_w = jax.lax.stop_gradient(target.embed_weight)                                          # [V, Dt]

    def loss_fn(params):
      head = nnx.merge(head_graphdef, _cast(params, compute_dtype))
      return obj.ttt_loss(head, embed_w, feats, target_p, batch, t2d, steps=steps, decay=decay)

    return apply_loss(state, loss_fn, tx, state_sharding, schedule)

  return jit_step(train_step, traces, compiler_options)


# --- what driver.train calls -----------------------------------------------------------------------

@dataclasses.dataclass
class Eagle3Run:
  cfg: TrainConfig
  head_cfg: Eagle3Config
  graphdef: nnx.GraphDef
  state: TrainState            # the initial state (driver.train restores over it)
  step: Callable               # make_eagle3_step's train_step
  vocab: DraftVocab
  target: Any

  def postfix(self, last: dict) -> dict:
    """The progress bar's fields: loss, first and last unrolled step's accuracy, tokens/s."""
    k = self.cfg.eagle3_ttt_steps - 1
    return dict(loss=f"{last['loss']:.3f}", acc0=f"{last['acc_0']:.2f}", **{f"acc{k}": f"{last[f'acc_{k}']:.2f}"},
                tok_s=f"{last['tokens_per_s']:.0f}")

  def finish(self, state: TrainState, summary: dict) -> dict:
    """Exports the head (midlayer format, fp32 as trained) -> train()'s summary."""
    export = pathlib.Path(self.cfg.export_dir or pathlib.Path(self.cfg.workdir) / "eagle3_head")
    params = state.params
    if self.cfg.eagle3_save_embed:   # the target's frozen table, for readers that want it in the file
      flat = list(nnx.to_flat_state(params))
      embed = nnx.merge(self.target.graphdef, self.target.params).embed_weight
      flat.append((("embed_tokens", "weight"), nnx.Param(embed.astype(jnp.float32))))
      params = nnx.from_flat_state(flat)
    if jax.process_count() > 1:      # every process takes part in gathering the sharded params
      from jax.experimental import multihost_utils
      host = multihost_utils.process_allgather(params, tiled=True)
    else:
      host = jax.device_get(params)
    if jax.process_index() == 0:
      save_eagle3(export, self.head_cfg, host, self.vocab.d2t, self.vocab.t2d)
    head = Eagle3Checkpoint(self.head_cfg, self.graphdef, state.params, jnp.asarray(self.vocab.d2t, jnp.int32),
                            jnp.asarray(self.vocab.t2d))
    return dict(summary, export=str(export), head=head,
                vocab=dict(path=str(self.vocab.path), size=int(self.vocab.d2t.shape[0]), coverage=self.vocab.coverage))


def build(cfg: TrainConfig, target, rows: Sequence[dict], mesh: Mesh, *, tx: optax.GradientTransformation,
          schedule: optax.Schedule) -> Eagle3Run:
  """Head config, draft vocabulary (before step 0), sharded initial state and step for driver.train."""
  head_cfg = head_config(target.config, draft_vocab=cfg.eagle3_draft_vocab, layers=cfg.eagle3_layers,
                         aux_layer_ids=cfg.eagle3_aux_layer_ids)
  vocab = draft_vocabulary(rows, target.config, cfg, head_cfg.draft_vocab_size)
  logger.info("eagle3: draft vocabulary of %d tokens covers %.4f of the rows' response tokens (%s); taps %s",
              head_cfg.draft_vocab_size, vocab.coverage, vocab.path, list(head_cfg.aux_layer_ids))
  start = warm_params(cfg.head_init, head_cfg, target.config, vocab) if cfg.head_init else None
  if start is not None:
    logger.info("eagle3: starting from %s", cfg.head_init)
  graphdef, state = init_state(head_cfg, tx=tx, seed=cfg.seed, mesh=mesh, params=start)
  step = make_eagle3_step(head_cfg, graphdef, target.config, target.graphdef, tx=tx, d2t=vocab.d2t, t2d=vocab.t2d,
                          steps=cfg.eagle3_ttt_steps, decay=cfg.eagle3_decay, compute_dtype=DTYPES[cfg.compute_dtype],
                          schedule=schedule, state_sharding=state_shardings(head_cfg, tx, mesh))
  return Eagle3Run(cfg, head_cfg, graphdef, state, step, vocab, target)
