"""The named methods: each a drafter (decode/drafters) paired with its width policy (decode/policies).

  ar       no draft; one width: the root alone
  ngram    prompt lookup, cost-gated (policies/ngram_gate.py); when no proposal can pay at the prior
           counts (true of every built-in table), every round would be an AR step: AR's own program
  chain    the block head's argmax chain, fixed depth min(budget, L)
  glance   the block head's top-N tree, fixed N = budget (recording the calibration data of its
           widths); budget "auto": glance-auto (policies/auto.py) over the widths its cost table
           compiles, or AR's loop where the table says no width beats AR at its batch
  eagle3   an EAGLE-3 head's EAGLE-2 dynamic tree (S=8 levels, top-8, 32 verified incl. the root),
           every node verified; eagle3-chain: the released 3-token chain (S=3, K=1, N=4). The head is
           an eagle3.Eagle3Checkpoint; the budget is not used (the presets fix N)
  two-model  a second, smaller Qwen3-VL (the head argument: a qwen3_vl.Target) drafts a chain of 4
           in 4 passes over its own cache and its own image prefill; the budget is not used

A method is one entry of METHODS: (target, head, budget, round_cost, batch) -> Plan. A new drafter
adds its module under decode/drafters and one entry here.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from glance_jax.decode.drafter import Drafter
from glance_jax.decode.drafters import ar, block, eagle3, ngram, two_model
from glance_jax.decode.policies import (PAUSE, Auto, Fixed, NgramGate, RoundCost, WidthPolicy, auto_widths,
                                        default_round_cost, ngram_pays_at_prior, ngram_widths)

AUTO_BUDGET = 63        # glance-auto's widest tree


@dataclasses.dataclass(frozen=True)
class Plan:
  """What one generate() call runs."""
  method: str           # the method that runs ("ar" where a policy found that nothing could pay)
  drafter: Drafter
  params: Any           # the drafter's weights (a pytree; () for none)
  policy: WidthPolicy
  budget: int | str     # as requested (an int N, or "auto")


def check_budget(budget, method: str | None = None, *, names=("budget", "method")) -> int | str:
  """The one place a budget is validated: the most draft tokens a round verifies (an int >= 1; a
  chain's or ngram's is capped at its draft depth), or "auto" (glance-auto, method glance only).
  names: what the error calls the two (a CLI passes its flags)."""
  if budget == "auto":
    if method is not None and method != "glance":
      raise ValueError(f"{names[0]} auto needs {names[1]} glance, got {method!r}")
    return budget
  if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
    raise ValueError(f"{names[0]} must be an integer >= 1 or 'auto', got {budget!r}")
  return budget


def _ar(target, head, budget, rc, batch) -> Plan:
  drafter, params = ar.build(target)
  return Plan("ar", drafter, params, Fixed(0), budget)


def _ngram(target, head, budget, rc, batch) -> Plan:
  drafter, params = ngram.build(target, budget=budget)
  widths = ngram_widths(drafter.num_nodes)
  cost = (rc or default_round_cost(batch)).costs(widths, method="ngram")
  if not ngram_pays_at_prior(drafter.num_nodes, widths, cost, drafter.max_ngram):
    return _ar(target, head, budget, rc, batch)
  return Plan("ngram", drafter, params, NgramGate(widths, cost, drafter.max_ngram), budget)


def _chain(target, head, budget, rc, batch) -> Plan:
  drafter, params = block.build_chain(target, head, budget)
  return Plan("chain", drafter, params, Fixed(drafter.num_nodes), budget)


def recorded_widths(num_nodes: int) -> tuple[int, ...]:
  """The widths a glance round records calibration data at (bench/calibrate.py fits them)."""
  return tuple(w for w in auto_widths(num_nodes) if w)


def _glance(target, head, budget, rc, batch) -> Plan:
  if budget == "auto":
    return glance_auto(target, head, AUTO_BUDGET, rc or default_round_cost(batch))
  drafter, params = block.build(target, head, budget)
  return Plan("glance", drafter, params, Fixed(drafter.num_nodes, recorded_widths(drafter.num_nodes)), budget)


def glance_auto(target, head, budget: int, table: RoundCost, *, scheduled: bool = False) -> Plan:
  """glance-auto at widest tree `budget` under `table`: the widths the table compiles (RoundCost.
  auto_set; the tree built is the widest of them), or AR's loop where the table's replay found no
  set that beats AR (`auto_plain_ar`, unless the table forces a width)."""
  if table.plain_ar and table.force is None and not scheduled:
    return _ar(target, head, "auto", table, 1)
  depth = head.config.block_size - 1 if head is not None else 15
  widths = table.auto_set(int(budget), depth)
  nodes = max(widths) or min(w for w in auto_widths(int(budget)) if w)
  drafter, params = block.build(target, head, nodes)
  # the pause weighs what rounds earn against the table's costs: off where the costs are not real
  # (a forced width's measurement) or the widths are given (a replayed schedule)
  pause = PAUSE if table.pause and table.force is None and not scheduled else 0
  policy = Auto(widths, table.costs(widths), table.knots(widths), recorded_widths(nodes), scheduled, pause)
  return Plan("glance", drafter, params, policy, "auto")


def _eagle3(preset: str) -> Callable[..., Plan]:
  def make(target, head, budget, rc, batch) -> Plan:
    drafter, params = eagle3.build(target, head, budget, preset=preset)
    return Plan(preset, drafter, params, Fixed(drafter.num_nodes), budget)
  return make


def _two_model(target, head, budget, rc, batch) -> Plan:
  drafter, params = two_model.build(target, head, budget)
  return Plan("two-model", drafter, params, Fixed(drafter.num_nodes), budget)


METHODS: dict[str, Callable[..., Plan]] = {"ar": _ar, "ngram": _ngram, "chain": _chain, "glance": _glance,
                                           "eagle3": _eagle3("eagle3"), "eagle3-chain": _eagle3("eagle3-chain"),
                                           "two-model": _two_model}


def plan(target, method: str, *, head=None, budget=63, round_cost: RoundCost | None = None, batch: int = 1) -> Plan:
  """The drafter and policy of a named method (round_cost: glance-auto's and ngram's table, default
  the built-in one for `batch`)."""
  if method not in METHODS:
    raise ValueError(f"unknown method {method!r}; choose one of {tuple(METHODS)}")
  budget = check_budget(budget, method)
  return METHODS[method](target, head, budget, round_cost, batch)
