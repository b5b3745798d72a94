"""The benchmark side of `generate`: round-cost overrides, the oracle drafter and loop timings.

`generate(...)` here takes what the public one does plus what only measurements need, and runs the
same engine (decode/generate.py start -> loop -> finish):
  auto / budget  glance-auto at a widest tree of `budget` (budget="auto": 63, as the public API)
  round_cost     the cost table glance-auto and ngram choose with (default: the built-in one)
  oracle_tokens  int [B, >= max_new_tokens]: the target's known continuation; the head's marginals
                 are pushed onto it so that the tree holds it (the walk, commit and round cost at
                 full acceptance on random weights; replayed acceptance, bench/replay.py)
  timings        a dict that receives "loop_s": the loop's wall time alone (prefill excluded; both
                 are waited for, so it costs the overlap of prefill and loop dispatch)
"""

from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np

from glance_jax.decode import generate as gen
from glance_jax.decode import methods
from glance_jax.decode.drafters.block import BlockDrafter, ChainDrafter
from glance_jax.decode.policies import default_round_cost

ORACLE_BOOST = 50.0     # added to the known token's logit: it becomes the clear favourite


class OracleMixin:
  """A block drafter whose params are (head params, the known continuation int32 [B, M]): draft
  slot d of a round predicts emitted token count - 1 + d, which it pushes to the top."""

  def init(self, params, target, prefill):
    return super().init(params[0], target, prefill)

  def propose(self, params, target, state, st):
    head_params, oracle = params
    log_q, state = self.marginals(head_params, target, state, st)
    idx = jnp.clip(st.count[:, None] + jnp.arange(self.depth)[None], 0, oracle.shape[1] - 1)
    future = jnp.take_along_axis(oracle, idx, axis=1)                     # [B, L]
    log_q = jax.nn.log_softmax(log_q + ORACLE_BOOST * jax.nn.one_hot(future, log_q.shape[-1]), axis=-1)
    return self.tree(log_q), state

  def commit(self, params, target, state, st, res, feats, live):
    return super().commit(params[0], target, state, st, res, feats, live)


@dataclasses.dataclass(frozen=True)
class OracleGlance(OracleMixin, BlockDrafter):
  name = "glance"


@dataclasses.dataclass(frozen=True)
class OracleChain(OracleMixin, ChainDrafter):
  name = "chain"


def oracle_drafter(d: BlockDrafter) -> BlockDrafter:
  """The oracle version of a block drafter (its params become (head params, oracle tokens))."""
  if not isinstance(d, BlockDrafter):
    raise ValueError("oracle_tokens needs a head method (chain or glance)")
  cls = OracleChain if d.chain else OracleGlance
  return cls(**{f.name: getattr(d, f.name) for f in dataclasses.fields(d)})


def with_oracle(plan: methods.Plan, tokens, max_new_tokens: int) -> methods.Plan:
  """`plan` with its block drafter replaced by the oracle drafter for `tokens` [B, M]."""
  d = oracle_drafter(plan.drafter)
  tokens = np.asarray(tokens, np.int32)
  if tokens.ndim != 2:
    raise ValueError(f"oracle_tokens must be [batch, length], got shape {tokens.shape}")
  pad = max_new_tokens + d.block_size - tokens.shape[1]
  oracle = jnp.asarray(np.pad(tokens, ((0, 0), (0, max(pad, 0))), constant_values=0))
  return dataclasses.replace(plan, drafter=d, params=(plan.params, oracle))


def plan(target, method: str, *, head=None, budget=63, auto: bool = False, round_cost=None, batch: int = 1,
         oracle_tokens=None, max_new_tokens: int = 256) -> methods.Plan:
  if budget == "auto":  # the public API's glance-auto: the widest tree 63
    auto, budget = True, methods.AUTO_BUDGET
  if auto:
    if method != "glance":
      raise ValueError(f"auto budgets need method glance, got {method!r}")
    p = methods.glance_auto(target, head, methods.check_budget(budget),
                            round_cost if round_cost is not None else default_round_cost(batch))
  else:
    p = methods.plan(target, method, head=head, budget=budget, round_cost=round_cost, batch=batch)
  if oracle_tokens is not None:
    if np.shape(oracle_tokens)[0] != batch:
      raise ValueError(f"oracle_tokens must be [batch={batch}, length], got shape {np.shape(oracle_tokens)}")
    p = with_oracle(p, oracle_tokens, max_new_tokens)
  return p


def generate(target, inputs, *, head=None, method: str = "glance", budget=63, max_new_tokens: int = 256,
             temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int = 0, stop_tokens=None,
             max_length: int | None = None, auto: bool = False, round_cost=None, oracle_tokens=None,
             timings: dict | None = None) -> gen.GenerationResult:
  p = plan(target, method, head=head, budget=budget, auto=auto, round_cost=round_cost,
           batch=np.shape(inputs.input_ids)[0], oracle_tokens=oracle_tokens, max_new_tokens=max_new_tokens)
  args, state = gen.start(target, inputs, p, max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k,
                          top_p=top_p, stop_tokens=stop_tokens, seed=seed, max_length=max_length)
  if timings is None:
    return gen.finish(p, gen.loop(args, state))
  jax.block_until_ready(state)
  t0 = time.perf_counter()
  state = jax.block_until_ready(gen.loop(args, state))
  timings["loop_s"] = time.perf_counter() - t0
  return gen.finish(p, state)
