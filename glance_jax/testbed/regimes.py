"""The testbed's two cost regimes, one trained pair.

  compute  the shipped target as trained (3.0M parameters, ~12 MB in fp32): it sits in a CPU's caches,
           so its AR step is compute-bound and a 16-row verify costs ~8-13 AR steps. Tests and quick runs.
  memory   the same pair widened WIDTH = 8 times at load time (glance_jax/qwen3_vl/widen.py: every
           logit and every draft unchanged, so acceptance is the trained pair's): 101M decoder
           parameters, 403 MB in fp32, beyond the largest cache of these machines (32-300 MiB L3),
           so an AR step is a read of the weights and a verify of 16-64 rows costs a few AR steps, as
           on an accelerator at batch 1. The head is widened on its residual only (~11M), so its
           share of a round stays small.

Nothing of the wide pair is stored: `load(regime)` derives it from testbed/target and testbed/head.
Every figure quoted from the testbed names its regime.
"""

from __future__ import annotations

import jax.numpy as jnp

REGIMES = ("compute", "memory")
DEFAULT = "memory"
WIDTH = {"compute": 1, "memory": 8}
LABEL = {"compute": "compute-bound CPU (the 3.0M testbed target, in cache)",
         "memory": "memory-bound CPU (the testbed pair widened x8 at load: 403 MB of target weights)"}


def check(regime: str) -> str:
  if regime not in REGIMES:
    raise ValueError(f"unknown testbed regime {regime!r}; expected one of {REGIMES}")
  return regime


def resolve(regime: str | None, on_testbed: bool) -> str | None:
  """The regime a run uses: the one asked for, or DEFAULT, on the shipped testbed; for any other
  model only the one asked for (its pair widened alike: a testbed build not shipped yet, e.g.
  runs/testbed_v5/testbed), else None."""
  if not on_testbed:
    return check(regime) if regime else None
  return check(regime or DEFAULT)


def widen_pair(target, head, regime: str):
  """(target, head) in `regime` (the compute regime returns them as they are)."""
  k = WIDTH[check(regime)]
  if k == 1:
    return target, head
  from glance_jax.head.widen import widen_head
  from glance_jax.qwen3_vl.widen import widen_target
  wide = widen_target(target, k)
  return wide, (None if head is None else widen_head(head, k, target=wide))


def widen_eagle3(head, regime: str, *, target):
  """An EAGLE-3 head (Eagle3Checkpoint) widened for `target`, the pair's target already in `regime`."""
  k = WIDTH[check(regime)]
  if k == 1:
    return head
  from glance_jax.eagle3.widen import widen_eagle3 as widen
  return widen(head, k, target=target)


def load(regime: str = DEFAULT, *, dtype=jnp.float32, with_head: bool = True):
  """The shipped testbed's (target, head or None, processor) in `regime`."""
  from glance_jax.head import Head
  from glance_jax.qwen3_vl.inputs import Processor
  from glance_jax.qwen3_vl.target import load_target
  from glance_jax.testbed import paths
  check(regime)
  if not paths.available():
    raise FileNotFoundError(f"the shipped testbed is missing under {paths.SHIPPED} (rebuild it with "
                            f"`python -m glance_jax.testbed.build`)")
  target = load_target(paths.TARGET, dtype=dtype)
  head = Head.load(paths.HEAD, target=target) if with_head else None
  target, head = widen_pair(target, head, regime)
  return target, head, Processor.from_pretrained(str(paths.TARGET))
