"""`generate`: the public entry point. Checks the request, then runs the jitted prefill and the
jitted decode loop (decode/loop.py) and returns tokens plus per-round records."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from glance_jax.decode.loop import METHODS, LoopConfig, decode_rounds, draft_passes, prefill_state
from glance_jax.decode.sampling import SamplingConfig
from glance_jax.static_args import FlatState, Hashed


ABLATIONS = ("zero-context",)   # Head.ablated kinds (decode.py bench --ablate)


@dataclasses.dataclass(frozen=True, eq=False)
class Head:
  """A block head bound for decoding: its config, graphdef and params (`Head(*load_head(path))`)."""
  config: Any
  graphdef: Any
  params: Any

  @functools.cached_property
  def jit_graphdef(self) -> Hashed:
    """graphdef as a jit static argument, hashed once (static_args.Hashed)."""
    return Hashed(self.graphdef)

  @functools.cached_property
  def flat_params(self) -> FlatState:
    """params flattened once, for jit calls (static_args.FlatState)."""
    return FlatState.of(self.params)

  @classmethod
  def load(cls, path_or_repo_id, *, target=None, dtype=None, mesh=None) -> "Head":
    from glance_jax.head.checkpoint import load_head
    return cls(*load_head(path_or_repo_id, dtype=dtype or (target.dtype if target else jnp.float32),
                          mesh=mesh if mesh is not None else getattr(target, "mesh", None),
                          target_config=target.config if target else None))

  @classmethod
  def random(cls, target, *, seed: int = 0, num_layers: int = 5, block_size: int = 16) -> "Head":
    from glance_jax.head.config import HeadConfig
    from glance_jax.head.init import init_head
    cfg = HeadConfig.for_target(target.config, num_layers=num_layers, block_size=block_size)
    return cls(cfg, *init_head(cfg, seed=seed, dtype=target.dtype, mesh=target.mesh))

  def ablated(self, kind: str) -> "Head":
    """The head under an ablation of ABLATIONS, sharing these params. "zero-context": the target's
    tapped features are zeroed before the head reads them (BlockHead.zero_context), so it drafts
    without the conditioning; decoding stays lossless (the target still verifies)."""
    if kind not in ABLATIONS:
      raise ValueError(f"unknown ablation {kind!r}; valid: {', '.join(ABLATIONS)}")
    from glance_jax.head.model import zero_context_graphdef
    return Head(self.config, zero_context_graphdef(self.graphdef, self.params), self.params)


@dataclasses.dataclass
class GenerationResult:
  tokens: list[np.ndarray]          # per row: the emitted tokens (stop token included)
  accepted: list[np.ndarray]        # per row, per round: A (accepted draft tokens)
  root_entropy: list[np.ndarray]    # per row, per round: target entropy at the round's root (nats)
  method: str
  budget: int
  draft_passes_per_round: int
  widths: np.ndarray | None = None  # per round: the verify width (rows after the root) it used
  # glance, per row: [rounds, P] raw predicted E[A] / observed A of the top-w tree for w in
  # record_widths (observed -1 where w exceeds the round's verified width); decode/calibrate.py
  predicted: list[np.ndarray] | None = None
  observed: list[np.ndarray] | None = None
  record_widths: tuple[int, ...] = ()

  @property
  def rounds(self) -> np.ndarray:
    return np.array([len(a) for a in self.accepted])

  @property
  def tau(self) -> float:
    """Mean tokens per round (mean accepted length + 1; AR = 1), over every row's rounds."""
    a = np.concatenate(self.accepted) if self.accepted else np.zeros(0)
    return float(np.mean(a + 1)) if a.size else 1.0

  @property
  def num_tokens(self) -> int:
    return int(sum(len(t) for t in self.tokens))


def generate(target, inputs, *, head: Head | None = None, method: str = "glance", budget: int = 63,
             max_new_tokens: int = 256, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
             seed: int = 0, stop_tokens: Sequence[int] | None = None, block_size: int = 16,
             max_length: int | None = None, oracle_tokens: np.ndarray | None = None, auto: bool = False,
             round_cost=None, timings: dict | None = None) -> GenerationResult:
  """Decodes `inputs` (ModelInputs, one or several rows) with the given method.

  method: ar | ngram | chain | glance. budget: N tree nodes for glance; draft depth cap for chain and
  ngram. At temperature 0 every method emits exactly the target's greedy tokens; at T > 0 the
  target's own sampling distribution (with top_k / top_p).
  oracle_tokens (benchmarks/tests only): int [B, >= max_new_tokens], the target's known continuation;
  the head's marginals are pushed onto it so that the tree contains it (measures the walk/commit and
  round cost at full acceptance on random weights).
  auto (glance): each round verifies the top-w tree for the w among the compiled widths
  (RoundCost.auto_set: the table's replay-chosen set, else those of budget.auto_widths(budget) at
  which a round could beat an AR step; the tree built is the widest of them) that maximises expected
  tokens per unit of round cost; a table whose replay found no set beating AR at its batch
  (`auto_plain_ar`) runs the AR loop (the result's method is then "ar"). round_cost: a
  budget.RoundCost (default: the built-in table for this batch, budget.default_round_cost(B)), also
  read by ngram (its own widths' costs; when no proposal could pay at the prior counts, ngram runs
  AR's program, every round being an AR step, and the result's method is "ar").
  timings (benchmarks): a dict that receives "loop_s", the decode loop's wall time alone (prefill
  excluded; both are waited for, so it costs the overlap of prefill and loop dispatch).
  """
  if method not in METHODS:
    raise ValueError(f"unknown method {method!r}; choose one of {METHODS}")
  def as_ar() -> GenerationResult:  # where every round would be an AR step: AR's own (smaller) program
    return generate(target, inputs, method="ar", max_new_tokens=max_new_tokens, temperature=temperature,
                    top_k=top_k, top_p=top_p, seed=seed, stop_tokens=stop_tokens, max_length=max_length,
                    timings=timings)

  rc = None
  if auto or method == "ngram":  # the cost table: this call's, else the built-in one for its batch
    from glance_jax.decode import budget as budget_lib
    rc = round_cost if round_cost is not None else budget_lib.default_round_cost(np.shape(inputs.input_ids)[0])
  if auto and method == "glance" and rc.plain_ar and rc.force is None:
    # the table's replay: no set of widths beats AR at its batch
    return as_ar()
  sampling = SamplingConfig(temperature=float(temperature), top_k=int(top_k), top_p=float(top_p))
  tap_layers, mask_id = (), 0
  if method in ("chain", "glance"):
    if head is None:
      raise ValueError(f"method {method!r} needs a head (--head)")
    head.config.check_target(target.config)
    block_size = head.config.block_size
    tap_layers, mask_id = tuple(head.config.target_layer_ids), head.config.mask_token_id
  if oracle_tokens is not None and method not in ("chain", "glance"):
    raise ValueError("oracle_tokens needs a head method (chain or glance)")
  if budget < 1:
    raise ValueError(f"budget must be >= 1, got {budget}")
  if method in ("chain", "ngram"):  # depth-capped chains: one compiled loop for every budget >= L
    budget = min(int(budget), block_size - 1)
  cost, calib, auto_set, tree_nodes = (), (), (), int(budget)
  if auto and method != "glance":
    raise ValueError(f"auto budgets need method glance, got {method!r}")
  if rc is not None:
    if auto:  # compile only the widths that could pay; the tree is the widest of them
      auto_set = rc.auto_set(int(budget), block_size - 1)
      cost, calib = rc.costs(auto_set), rc.knots(auto_set)
      tree_nodes = max(auto_set) or min(w for w in budget_lib.auto_widths(int(budget)) if w)
    else:
      cost = rc.costs(budget_lib.ngram_widths(int(budget)), method="ngram")
  cfg = LoopConfig(method=method, budget=tree_nodes, max_new_tokens=int(max_new_tokens), block_size=block_size,
                   sampling=sampling, tap_layers=tap_layers, mask_token_id=mask_id,
                   oracle=oracle_tokens is not None, auto=bool(auto), cost=cost, calib=calib,
                   auto_set=auto_set)
  if method == "ngram" and cost and not budget_lib.ngram_pays_at_prior(cfg.num_nodes, cfg.widths, cost,
                                                                         cfg.max_ngram):
    # no proposal can pay before a verify round, and only verify rounds change that: every round is
    # an AR step, so AR's own program runs them (the result's method is then "ar")
    return as_ar()
  ids = np.asarray(inputs.input_ids)
  need = cfg.slots_needed(ids.shape[1])
  max_length = max_length or need
  if max_length < need:
    raise ValueError(f"max_length {max_length} is too small: prompt {ids.shape[1]} + max_new_tokens "
                     f"{max_new_tokens} + one round's rows need {need}")
  stops = target.config.eos_token_ids if stop_tokens is None else tuple(stop_tokens)
  stops_arr = jnp.asarray(list(stops) or [-1], jnp.int32)
  pv = getattr(inputs, "pixel_values", None)
  meta = None
  if pv is not None:
    meta = target.vision_arrays(np.asarray(inputs.image_grid_thw))
    pv = jnp.asarray(pv, jnp.float32)
  target.check_inputs(inputs, _Shape(ids.shape[0], max_length))
  # graphdefs hashed once, params flattened once (static_args: jit redoes both on every call)
  tgd, tparams = target.jit_graphdef, target.flat_params
  hgd, hparams = (head.jit_graphdef, head.flat_params) if cfg.uses_head else (None, None)
  state = prefill_state(tgd, tparams, hgd, hparams, jnp.asarray(ids, jnp.int32),
                        jnp.asarray(inputs.attention_mask, bool), jnp.asarray(inputs.positions, jnp.int32),
                        jnp.asarray(inputs.rope_delta, jnp.int32), pv, meta, stops_arr,
                        jax.random.key(seed), _oracle_array(oracle_tokens, ids.shape[0], cfg),
                        cfg=cfg, max_length=max_length)
  if timings is not None:
    import time
    jax.block_until_ready(state)
    t0 = time.perf_counter()
    state = jax.block_until_ready(decode_rounds(tgd, tparams, hgd, hparams, state, stops_arr,
                                                cfg=cfg))
    timings["loop_s"] = time.perf_counter() - t0
  else:
    state = decode_rounds(tgd, tparams, hgd, hparams, state, stops_arr, cfg=cfg)
  out, count = np.asarray(state.out), np.asarray(state.count)
  rec_a, rec_h = np.asarray(state.rec_accepted), np.asarray(state.rec_entropy)
  live = [rec_a[b] >= 0 for b in range(ids.shape[0])]
  pred, obs = np.asarray(state.rec_pred), np.asarray(state.rec_obs)
  return GenerationResult(tokens=[out[b, : count[b]] for b in range(ids.shape[0])],
                          accepted=[rec_a[b][live[b]] for b in range(ids.shape[0])],
                          root_entropy=[rec_h[b][live[b]] for b in range(ids.shape[0])],
                          method=method, budget=int(budget), draft_passes_per_round=draft_passes(cfg),
                          widths=np.asarray(state.rec_width)[: int(state.rounds)],
                          predicted=[pred[b][live[b]] for b in range(ids.shape[0])],
                          observed=[obs[b][live[b]] for b in range(ids.shape[0])],
                          record_widths=cfg.record_widths)


def _oracle_array(tokens, batch: int, cfg: LoopConfig) -> jax.Array:
  if tokens is None:
    return jnp.zeros((batch, 0), jnp.int32)
  tokens = np.asarray(tokens, np.int32)
  if tokens.ndim != 2 or tokens.shape[0] != batch:
    raise ValueError(f"oracle_tokens must be [batch={batch}, length], got shape {tokens.shape}")
  pad = cfg.max_new_tokens + cfg.block_size - tokens.shape[1]
  return jnp.asarray(np.pad(tokens, ((0, 0), (0, max(pad, 0))), constant_values=0))


@dataclasses.dataclass(frozen=True)
class _Shape:
  """The cache shape `Target.check_inputs` validates against (the loop builds its own cache)."""
  batch_size: int
  max_length: int
