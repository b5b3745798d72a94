"""The drafter interface (decode/drafter.py) holds a drafter the library does not ship: a second
target with its own KV cache and its own prompt prefill, drafting a chain in S sequential passes,
rolled back by length in commit (two-model speculation's shape). Written here in one small class and
run through `generate(drafter=...)` with no change to the loop: the tokens are the target's own.
"""

from __future__ import annotations

import dataclasses

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from glance_jax.decode.drafter import Drafter, Proposal
from glance_jax.decode.generate import generate
from glance_jax.decode.verify import chain_from_tokens
from glance_jax.qwen3_vl.cache import init_cache
from glance_jax.qwen3_vl.engine import greedy_tokens
from glance_jax.static_args import Hashed, merge
from tests import decode_fixtures as fx
from tests import oracle


@flax.struct.dataclass
class DraftCache:
  cache: object             # the draft target's KVCache: committed tokens' rows in [0, length)


@dataclasses.dataclass(frozen=True)
class SecondTarget(Drafter):
  """A smaller target drafts `steps` tokens greedily, one pass each (root first)."""
  name = "second-target"
  graphdef: Hashed
  steps: int = 4

  @property
  def num_nodes(self) -> int:
    return self.steps

  @property
  def max_depth(self) -> int:
    return self.steps

  @property
  def passes(self) -> int:
    return self.steps + 1

  def init(self, params, target, prefill):
    model = merge(self.graphdef, params)
    b, _ = prefill.prompt.input_ids.shape
    cache = init_cache(model.cfg.text, b, prefill.max_length + self.steps + 2, model.embed_weight.dtype)
    _, cache, _ = model.forward_prompt(prefill.prompt, cache)             # its own prefill, images included
    return DraftCache(cache.replace(length=prefill.lengths))

  def propose(self, params, target, state, st):
    model = merge(self.graphdef, params)
    b = st.root.shape[0]

    def step(carry, _):
      tok, cache = carry
      pos = jnp.broadcast_to((cache.length + st.rope_delta)[None, :, None], (3, b, 1))
      h, cache, _ = model(tok[:, None], pos, cache, jnp.ones((b, 1, 1), bool))
      nxt = greedy_tokens(model.logits(h)[:, 0])
      return (nxt, cache.replace(length=cache.length + 1)), nxt

    # steps + 1 passes: root, d_1 .. d_steps all fed, so every committed token's row is in the cache
    (_, cache), toks = jax.lax.scan(step, (st.root, state.cache), None, length=self.steps + 1)
    tokens = toks[:-1].T                                                  # [B, steps]
    tree = chain_from_tokens(tokens, jnp.ones_like(tokens, bool))
    return Proposal(tree, jnp.zeros(tokens.shape, jnp.float32)), DraftCache(cache)

  def commit(self, params, target, state, st, res, feats, live):
    # rows of root, d_1 .. d_A are the committed ones: roll back by length to just past them
    length = jnp.where(live, st.cache.length + res.accepted + 1, st.cache.length)
    return DraftCache(state.cache.replace(length=length))


@pytest.fixture(scope="module")
def world():
  cfg = oracle.CONFIG_A
  target = fx.lively_target(cfg, seed=11)
  batches = [fx.batch(cfg, seed=s, rows=4, with_images=s % 2 == 1) for s in range(2)]
  refs = [target.generate_greedy(b, 21, stop_tokens=())[0] for b in batches]
  return target, batches, refs


@pytest.mark.parametrize("same", [True, False], ids=["itself", "another"])
def test_a_second_target_drafts_through_the_interface(world, same):
  target, batches, refs = world
  draft = target if same else fx.lively_target(oracle.CONFIG_A, seed=5)
  drafter = SecondTarget(graphdef=draft.jit_graphdef, steps=4)
  for b, ref in zip(batches, refs):
    res = generate(target, b, drafter=(drafter, draft.flat_params), max_new_tokens=21, stop_tokens=())
    assert [list(t) for t in res.tokens] == [list(r[r >= 0]) for r in ref]
    assert res.method == "second-target" and res.draft_passes_per_round == 5
    full = np.concatenate([a[:-1] for a in res.accepted])
    if same:  # the target drafting for itself: every round but the last accepts the whole chain
      assert (full == 4).all(), full
    else:
      assert full.min() < 4
