"""`ar`: no draft. Every round verifies the root alone, which is one plain decode step of the target,
so autoregressive decoding runs in the same loop (and is timed alike) as every speculative method."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from glance_jax.decode.drafter import Drafter, Proposal
from glance_jax.decode.verify import empty_tree


@dataclasses.dataclass(frozen=True)
class AR(Drafter):
  name = "ar"
  stateless = True

  @property
  def num_nodes(self) -> int:
    return 0

  @property
  def max_depth(self) -> int:
    return 0

  def propose(self, params, target, state, st):
    b = st.root.shape[0]
    return Proposal(empty_tree(b), jnp.zeros((b, 0), jnp.float32)), state


def build(target, head=None, budget=None):
  return AR(), ()
