"""`generate`: the public entry point. A method's plan (decode/methods.py) run by the engine
(decode/loop.py): the jitted prefill, then the jitted loop of rounds; tokens and per-round records
come back as a GenerationResult.

`start` / `finish` split a run around its loop, for callers that time the loop alone or pass a plan
of their own (bench/engine.py).
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from glance_jax.decode.loop import LoopConfig, LoopState, decode_rounds, prefill, slots_needed
from glance_jax.decode.methods import Plan, plan as make_plan
from glance_jax.decode.policies import Fixed
from glance_jax.decode.sampling import SamplingConfig


@dataclasses.dataclass
class GenerationResult:
  tokens: list[np.ndarray]          # per row: the emitted tokens (stop token included)
  accepted: list[np.ndarray]        # per row, per round: A (accepted draft tokens)
  root_entropy: list[np.ndarray]    # per row, per round: target entropy at the round's root (nats)
  method: str                       # what ran ("ar" where a policy found that nothing could pay)
  budget: int | str                 # as requested
  num_nodes: int                    # the drafter's tree size N (the most nodes a round verified)
  draft_passes_per_round: int
  widths: np.ndarray | None = None  # per round: the verify width (rows after the root) it used
  # glance, per row: [rounds, P] raw predicted E[A] / observed A of the top-w tree for w in
  # record_widths (observed -1 where w exceeds the round's verified width); bench/calibrate.py
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


def generate(target, inputs, *, head=None, drafter: Plan | tuple | None = None, method: str = "glance",
             budget: int | str = 63, max_new_tokens: int = 256, temperature: float = 0.0, top_k: int = 0,
             top_p: float = 1.0, stop_tokens: Sequence[int] | None = None, seed: int = 0) -> GenerationResult:
  """Decodes `inputs` (ModelInputs: one or several rows) with a method.

  method: ar | ngram | chain | glance | eagle3 | eagle3-chain | two-model (decode/methods.py); or `drafter`: a
  (Drafter, params) pair (verifying its whole tree every round) or a Plan (a drafter with a width
  policy). head: the block head (head.Head) for chain and glance; an EAGLE-3 head
  (eagle3.Eagle3Checkpoint, from load_eagle3) for eagle3 and eagle3-chain; the draft model (a smaller
  qwen3_vl.Target) for two-model. budget: the most draft
  tokens a round verifies (the tree's N for glance; a chain's and ngram's depth cap, at most the
  draft depth; unused by eagle3 and two-model, whose presets fix N), or "auto" for glance-auto. At temperature 0
  every method emits exactly the target's greedy tokens; at T > 0 the target's own sampling
  distribution (with top_k / top_p). stop_tokens: default the target's eos ids.
  """
  if isinstance(drafter, tuple):
    d, params = drafter
    p = Plan(d.name, d, params, Fixed(d.num_nodes), d.num_nodes)
  else:
    p = drafter or make_plan(target, method, head=head, budget=budget, batch=np.shape(inputs.input_ids)[0])
  return run(target, inputs, p, max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k,
             top_p=top_p, stop_tokens=stop_tokens, seed=seed)


def run(target, inputs, p: Plan, **kw) -> GenerationResult:
  args, state = start(target, inputs, p, **kw)
  return finish(p, loop(args, state))


@dataclasses.dataclass(frozen=True)
class LoopArgs:
  """Everything the jitted loop takes besides its state."""
  target: object
  plan: Plan
  cfg: LoopConfig
  stops: jax.Array


def start(target, inputs, p: Plan, *, max_new_tokens: int = 256, temperature: float = 0.0, top_k: int = 0,
          top_p: float = 1.0, stop_tokens: Sequence[int] | None = None, seed: int = 0,
          max_length: int | None = None) -> tuple[LoopArgs, LoopState]:
  """Checks the request and runs the jitted prefill -> (the loop's arguments, the first state)."""
  p.policy.check(p.drafter)
  sampling = SamplingConfig(temperature=float(temperature), top_k=int(top_k), top_p=float(top_p))
  cfg = LoopConfig(max_new_tokens=int(max_new_tokens), sampling=sampling, mesh=getattr(target, "mesh", None))
  ids = np.asarray(inputs.input_ids)
  need = slots_needed(p.drafter, cfg, ids.shape[1])
  max_length = max_length or need
  if max_length < need:
    raise ValueError(f"max_length {max_length} is too small: prompt {ids.shape[1]} + max_new_tokens "
                     f"{max_new_tokens} + one round's rows need {need}")
  target.check_inputs(inputs, _Shape(ids.shape[0], max_length))
  stops = target.config.eos_token_ids if stop_tokens is None else tuple(stop_tokens)
  stops = jnp.asarray(list(stops) or [-1], jnp.int32)
  state = prefill(target.jit_graphdef, target.flat_params, p.drafter, p.params, p.policy, target.prompt(inputs),
                  jnp.asarray(inputs.rope_delta, jnp.int32), stops, jax.random.key(seed), cfg=cfg,
                  max_length=max_length)
  return LoopArgs(target, p, cfg, stops), state


def loop(args: LoopArgs, state: LoopState) -> LoopState:
  """The jitted loop of rounds (asynchronous: returns as soon as it is dispatched)."""
  t, p = args.target, args.plan
  return decode_rounds(t.jit_graphdef, t.flat_params, p.drafter, p.params, p.policy, state, args.stops, cfg=args.cfg)


def finish(p: Plan, state: LoopState) -> GenerationResult:
  """The loop's final state -> host results (waits for the loop)."""
  out, count = np.asarray(state.out), np.asarray(state.count)
  acc, ent = np.asarray(state.accepted), np.asarray(state.root_entropy)
  b = out.shape[0]
  live = [acc[i] >= 0 for i in range(b)]
  rec = p.policy.records(state.policy)
  per_row = lambda x: [x[i][live[i]] for i in range(b)] if x is not None else None  # noqa: E731
  return GenerationResult(tokens=[out[i, : count[i]] for i in range(b)], accepted=per_row(acc),
                          root_entropy=per_row(ent), method=p.method, budget=p.budget,
                          num_nodes=p.drafter.num_nodes, draft_passes_per_round=p.drafter.passes,
                          widths=np.asarray(state.width)[: int(state.rounds)],
                          predicted=per_row(rec.get("predicted")), observed=per_row(rec.get("observed")),
                          record_widths=tuple(p.policy.record_widths))


@dataclasses.dataclass(frozen=True)
class _Shape:
  """The cache shape `Target.check_inputs` validates against (the loop builds its own cache)."""
  batch_size: int
  max_length: int
