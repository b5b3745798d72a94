"""One decode loop for every method: the whole generation is one jitted `lax.while_loop` of rounds.

A round: propose (the drafter's tree of N nodes and their scores) -> [the width policy picks how
many of them to verify] -> verify (one target pass over the root and the first w nodes, under the
ancestor mask) -> walk (the longest path the target agrees with, and its bonus token) -> commit
(the accepted rows' K/V moved into place; the drafter's own commit, e.g. the features of the
committed rows) -> emit (A accepted tokens plus the bonus, cut at a stop token and at
max_new_tokens). Nothing here knows which method runs: the drafter (decode/drafter.py) and the
width policy (decode/policies) are static arguments with state pytrees of their own, so every
method is timed in the same engine.

Letters: B rows, S cache slots, N drafter nodes, C = max_depth + 1 commit rows, R = max_new_tokens
round records, V vocab.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from glance_jax import sharding as shd
from glance_jax.decode.drafter import Drafter, Prefill, Proposal
from glance_jax.decode.sampling import SamplingConfig, choose, entropy
from glance_jax.decode.verify import WalkResult, commit_kv, empty_tree, first_nodes, walk
from glance_jax.qwen3_vl import cache_attention
from glance_jax.qwen3_vl.cache import KVCache, init_cache, pin_cache, write_rows
from glance_jax.qwen3_vl.engine import last_rows
from glance_jax.qwen3_vl.prompt import Prompt
from glance_jax.static_args import merge


@dataclasses.dataclass(frozen=True)
class LoopConfig:
  """Static knobs of the engine (one compiled loop per distinct value, drafter and policy)."""
  max_new_tokens: int = 256
  sampling: SamplingConfig = SamplingConfig()
  mesh: Mesh | None = None      # the decode state's layout: rows on `data`, cache kv heads on `tensor`

  def __post_init__(self):
    if self.max_new_tokens < 1:
      raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")


@flax.struct.dataclass
class LoopState:
  cache: KVCache
  root: jax.Array           # int32 [B]: chosen by the target, emitted, not yet fed
  rope_delta: jax.Array     # int32 [B]
  history: jax.Array        # int32 [B, S + C + 1]: committed tokens then the root (prompt lookup)
  out: jax.Array            # int32 [B, R + C]: emitted tokens
  count: jax.Array          # int32 [B]: tokens emitted
  done: jax.Array           # bool [B]
  rounds: jax.Array         # int32 []
  key: jax.Array
  accepted: jax.Array       # int32 [B, R]: A per round (-1 once the row is done)
  root_entropy: jax.Array   # float32 [B, R]: target entropy at the round's root (nats)
  width: jax.Array          # int32 [R]: the verify width of each round (-1 = not run)
  drafter: Any              # the drafter's state
  policy: Any               # the width policy's state


def slots_needed(drafter: Drafter, cfg: LoopConfig, prompt_len: int) -> int:
  """Cache slots: the prompt, every emitted token, and one round's writes past the end (the N + 1
  verify rows, the C rows a commit moves). A write that ran past the end would be clamped back
  by dynamic_update_slice onto committed rows."""
  return prompt_len + cfg.max_new_tokens + max(drafter.num_nodes, drafter.max_depth) + 2


def _is_stop(tokens: jax.Array, stops: jax.Array) -> jax.Array:
  return jnp.any(tokens[..., None] == stops, axis=-1)


def _pin_rows(x: jax.Array, mesh: Mesh | None) -> jax.Array:
  if mesh is None:
    return x
  return shd.pinner(mesh, shd.DEFAULT_RULES)(x, shd.BATCH, *([None] * (x.ndim - 1)))


@functools.partial(jax.jit, static_argnames=("tgd", "drafter", "policy", "cfg", "max_length"))
def prefill(tgd, tparams, drafter: Drafter, dparams, policy, prompt: Prompt, rope_delta: jax.Array,
            stops: jax.Array, key: jax.Array, *, cfg: LoopConfig, max_length: int) -> LoopState:
  """The prompt -> the first round's state: the target cache, the first token (emitted), the
  drafter's state (init from the prompt and its taps) and the policy's. tgd / tparams: the target's
  graphdef and params (either form static_args.merge takes)."""
  target = merge(tgd, tparams)
  b, s = prompt.input_ids.shape
  cache = pin_cache(init_cache(target.cfg.text, b, max_length, target.embed_weight.dtype), cfg.mesh)
  h, cache, taps = target.forward_prompt(prompt, cache, tap_layers=drafter.tap_layers)
  lengths = prompt.lengths
  cache = pin_cache(cache.replace(length=lengths), cfg.mesh)
  key, sub = jax.random.split(key)
  first = choose(target.logits(last_rows(h, lengths))[:, 0], sub, cfg.sampling)
  c = drafter.max_depth + 1
  history = jnp.zeros((b, max_length + c + 1), jnp.int32)
  history = history.at[:, :s].set(jnp.where(prompt.attention_mask, prompt.input_ids, 0))
  history = write_rows(history[..., None], first[:, None, None], lengths)[..., 0]
  feats = jnp.concatenate([taps[i] for i in drafter.tap_layers], axis=-1) if drafter.tap_layers else None
  view = Prefill(prompt=prompt, taps=feats, lengths=lengths, first=first, rope_delta=rope_delta.astype(jnp.int32),
                 max_length=max_length)
  r = cfg.max_new_tokens
  out = jnp.zeros((b, r + c), jnp.int32).at[:, 0].set(first)
  return LoopState(cache=cache, root=first, rope_delta=rope_delta.astype(jnp.int32), history=_pin_rows(history, cfg.mesh),
                   out=_pin_rows(out, cfg.mesh), count=jnp.ones((b,), jnp.int32),
                   done=_is_stop(first, stops) | (r <= 1), rounds=jnp.int32(0), key=key,
                   accepted=jnp.full((b, r), -1, jnp.int32), root_entropy=jnp.zeros((b, r), jnp.float32),
                   width=jnp.full((r,), -1, jnp.int32), drafter=drafter.init(dparams, target, view),
                   policy=policy.init(b, r))


class Rounds:
  """One generation's round functions, built while tracing: what a width policy's `run` drives."""

  def __init__(self, target, drafter: Drafter, dparams, policy, cfg: LoopConfig, stops: jax.Array):
    self.target, self.drafter, self.dparams, self.policy, self.cfg, self.stops = (
        target, drafter, dparams, policy, cfg, stops)

  def running(self, st: LoopState) -> jax.Array:
    return (st.rounds < self.cfg.max_new_tokens) & ~jnp.all(st.done)

  def propose(self, st: LoopState) -> tuple[Proposal, LoopState]:
    proposal, dstate = self.drafter.propose(self.dparams, self.target, st.drafter, st)
    return proposal, st.replace(drafter=dstate)

  def round(self, st: LoopState, proposal: Proposal | None, w: int, *, uniform: bool = False) -> LoopState:
    """Verifies the root plus the first w nodes of `proposal` (static w; None: the round drafted
    nothing and w must be 0), walks, commits and emits. uniform: commit C rows even at w = 0
    (branches of one lax.switch must agree in shape)."""
    target, drafter, cfg = self.target, self.drafter, self.cfg
    b = st.root.shape[0]
    if proposal is None and w:
      raise ValueError(f"a round without a proposal verifies the root alone, not {w} nodes")
    tree = first_nodes(proposal.tree, w) if proposal is not None else empty_tree(b)
    live = ~st.done
    key, sub = jax.random.split(st.key)
    ids = jnp.concatenate([st.root[:, None], tree.tokens], axis=1)        # [B, w + 1]
    depth = jnp.concatenate([jnp.zeros((b, 1), jnp.int32), tree.depths], axis=1)
    pos = st.cache.length + st.rope_delta
    pos = jnp.broadcast_to((pos[:, None] + depth)[None], (3, b, w + 1)).astype(jnp.int32)
    h, cache, taps = target(ids, pos, st.cache, tree.ancestor_mask, tap_layers=drafter.tap_layers)
    logits = target.logits(h)                                             # [B, w + 1, V] fp32
    choice = choose(logits, sub, cfg.sampling)
    c = drafter.max_depth + 1 if (w or uniform or drafter.tap_layers) else 1
    if w:
      res = walk(tree, choice, drafter.max_depth)
      cache = commit_kv(cache, res.commit_rows, jnp.where(live, res.accepted + 1, 0))
    else:  # the root's K/V already sit at slot `length`: nothing to move
      res = _root_only(choice, c)
      cache = cache.replace(length=cache.length + jnp.where(live, 1, 0))
    feats = None
    if drafter.tap_layers:
      tapped = jnp.concatenate([taps[i] for i in drafter.tap_layers], axis=-1)   # [B, w + 1, F]
      feats = jnp.take_along_axis(tapped, res.commit_rows[:, :, None], axis=1)   # [B, C, F]
    dstate = drafter.commit(self.dparams, target, st.drafter, st, res, feats, live)
    st = self._emit(st, res, live, entropy(logits[:, 0]), w)
    return st.replace(cache=pin_cache(cache, cfg.mesh), key=key, drafter=dstate,
                      policy=self.policy.update(st.policy, proposal, res, w, live, st.rounds - 1))

  def _emit(self, st: LoopState, res: WalkResult, live, root_h, w: int) -> LoopState:
    """A accepted + the bonus, cut at the first stop token and at max_new_tokens; the round's records."""
    n_new = res.accepted + 1
    c = res.new_tokens.shape[1]
    j = jnp.arange(c)[None]
    stop_at = jnp.where(_is_stop(res.new_tokens, self.stops) & (j < n_new[:, None]), j, c)
    first_stop = jnp.min(stop_at, axis=1)
    n_emit = jnp.minimum(jnp.minimum(n_new, first_stop + 1), self.cfg.max_new_tokens - st.count)
    n_emit = jnp.where(live, n_emit, 0)
    out = write_rows(st.out[..., None], res.new_tokens[..., None], st.count)[..., 0]
    count = st.count + n_emit
    history = write_rows(st.history[..., None], res.new_tokens[..., None], st.cache.length + 1)[..., 0]
    r = st.rounds
    return st.replace(root=jnp.where(live, res.bonus, st.root),
                      history=jnp.where(live[:, None], history, st.history),
                      out=jnp.where(live[:, None], out, st.out), count=count,
                      done=st.done | (live & ((first_stop < n_new) | (count >= self.cfg.max_new_tokens))),
                      rounds=r + 1, accepted=st.accepted.at[:, r].set(jnp.where(live, res.accepted, -1)),
                      root_entropy=st.root_entropy.at[:, r].set(jnp.where(live, root_h, 0.0)),
                      width=st.width.at[r].set(w))


def _root_only(choice: jax.Array, c: int) -> WalkResult:
  """The width-0 round (no draft rows, so no walk): the root's choice is the bonus, nothing accepted."""
  b = choice.shape[0]
  zeros = jnp.zeros((b, c), jnp.int32)
  return WalkResult(jnp.zeros((b,), jnp.int32), zeros, zeros.at[:, 0].set(choice[:, 0]), choice[:, 0])


LOOP_STATIC = ("tgd", "drafter", "policy", "cfg")     # the loop's static arguments (one compile per value)


@functools.partial(jax.jit, static_argnames=LOOP_STATIC, donate_argnames=("state",))
def decode_rounds(tgd, tparams, drafter: Drafter, dparams, policy, state: LoopState, stops: jax.Array, *,
                  cfg: LoopConfig) -> LoopState:
  """Every round of the generation in one `lax.while_loop` (nothing returns to the host); the
  policy's `run` gives the loop its structure."""
  loop = Rounds(merge(tgd, tparams), drafter, dparams, policy, cfg, stops)
  with cache_attention.sharded_over(cfg.mesh):   # on TPU: the attention kernel, split as the cache is
    return policy.run(loop, state)


@functools.partial(jax.jit, static_argnames=LOOP_STATIC, donate_argnames=("state",))
def one_round(tgd, tparams, drafter: Drafter, dparams, policy, state: LoopState, stops: jax.Array, *,
              cfg: LoopConfig) -> LoopState:
  """A single round as the policy runs it (Fixed / Holding: propose, choose, verify), for
  ahead-of-time compiles and profiles of one round."""
  with cache_attention.sharded_over(cfg.mesh):
    return policy.step(Rounds(merge(tgd, tparams), drafter, dparams, policy, cfg, stops), state)
