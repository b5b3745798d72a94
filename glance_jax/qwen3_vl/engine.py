"""The target's jitted entry points: prefill, one-token decode, K-token forward with a block mask.

Functional at the jit boundary: every function takes (graphdef, params) and merges inside, so the
weights are jit arguments (not constants baked into the HLO) and the cache goes in and comes out.
The graphdef may come bare or in a static_args.Hashed holder (hashed once; Target's methods pass
one: a bare graphdef costs ~0.5 ms of hashing per call, more than a testbed decode step), and the
params bare or as a static_args.FlatState (flattened once: Target.flat_params); static_args.merge takes either.
"""

from __future__ import annotations

import functools

import flax.struct
import jax
import jax.numpy as jnp
from flax import nnx

from glance_jax.qwen3_vl.cache import KVCache
from glance_jax.qwen3_vl.prompt import Prompt
from glance_jax.static_args import merge


@flax.struct.dataclass
class Output:
  logits: jax.Array                # fp32 [B, T, V] (or [B, 1, V] with logits_at="last")
  cache: KVCache
  taps: dict[int, jax.Array]       # decoder layer i -> [B, T, D], HF hidden_states[i + 1]


def greedy_tokens(logits: jax.Array) -> jax.Array:
  """logits [..., V] -> int32 [...]: jnp.argmax over the last axis (first index of the maximum; a
  NaN counts as the maximum), computed as two plain reductions. XLA:CPU lowers jnp.argmax to a
  variadic (value, index) reduce that is ~4-5x slower (one row, 2-core CPU: 146 us vs 34 us at
  V = 32000, 1.2 ms vs 0.24 ms at V = 151936), a few % of a small model's decode step."""
  m = jnp.max(logits, axis=-1, keepdims=True)
  hit = (logits == m) | jnp.isnan(logits)
  iota = jax.lax.broadcasted_iota(jnp.int32, logits.shape, logits.ndim - 1)
  return jnp.min(jnp.where(hit, iota, logits.shape[-1] - 1), axis=-1).astype(jnp.int32)


def last_rows(h: jax.Array, lengths: jax.Array) -> jax.Array:
  """h [B,T,D] -> [B,1,D] at index lengths-1 per row."""
  idx = jnp.clip(lengths - 1, 0, h.shape[1] - 1)
  return jnp.take_along_axis(h, idx[:, None, None], axis=1)


@functools.partial(jax.jit, static_argnames=("graphdef", "tap_layers", "logits_at"),
                   donate_argnames=("cache",))
def prefill(graphdef: nnx.GraphDef, params: nnx.State, cache: KVCache, prompt: Prompt, *,
            tap_layers: tuple[int, ...] = (), logits_at: str = "all") -> Output:
  """Prompt (right-padded, with its images) -> logits, taps, and the cache advanced by each row's
  valid length."""
  model = merge(graphdef, params)
  h, cache, taps = model.forward_prompt(prompt, cache, tap_layers=tap_layers)
  lengths = prompt.lengths
  if logits_at == "last":
    h = last_rows(h, lengths)
  elif logits_at != "all":
    raise ValueError(f"logits_at must be 'all' or 'last', got {logits_at!r}")
  return Output(model.logits(h), cache.replace(length=cache.length + lengths), taps)


@functools.partial(jax.jit, static_argnames=("graphdef", "tap_layers"), donate_argnames=("cache",))
def decode_step(graphdef: nnx.GraphDef, params: nnx.State, cache: KVCache, tokens: jax.Array,
                rope_delta: jax.Array, *, tap_layers: tuple[int, ...] = ()) -> Output:
  """One token per row. tokens [B]; its position is cache.length + rope_delta on all 3 axes."""
  model = merge(graphdef, params)
  pos = jnp.broadcast_to((cache.length + rope_delta)[None, :, None], (3, tokens.shape[0], 1))
  block = jnp.ones((tokens.shape[0], 1, 1), bool)
  h, cache, taps = model(tokens[:, None], pos, cache, block, tap_layers=tap_layers)
  return Output(model.logits(h), cache.replace(length=cache.length + 1), taps)


@functools.partial(jax.jit, static_argnames=("graphdef", "tap_layers"), donate_argnames=("cache",))
def forward_block(graphdef: nnx.GraphDef, params: nnx.State, cache: KVCache, tokens: jax.Array,
                  positions: jax.Array, block_mask: jax.Array, *,
                  tap_layers: tuple[int, ...] = ()) -> Output:
  """K tokens per row with an explicit mask among them (the tree verifier's call).

  tokens [B,K]; positions [3,B,K] (or [B,K], broadcast to the 3 axes); block_mask bool [B,K,K].
  The K rows' K/V land at [length, length+K); length is NOT advanced (the caller commits).
  """
  model = merge(graphdef, params)
  if positions.ndim == 2:
    positions = jnp.broadcast_to(positions[None], (3,) + positions.shape)
  h, cache, taps = model(tokens, positions, cache, block_mask, tap_layers=tap_layers)
  return Output(model.logits(h), cache, taps)


def greedy_decode(graphdef: nnx.GraphDef, params: nnx.State, cache: KVCache, first_logits: jax.Array,
                  rope_delta: jax.Array, eos_ids: jax.Array, *, max_new_tokens: int):
  """Plain AR greedy decoding in one while_loop. first_logits [B,V] from prefill.

  Returns (tokens int32 [B, max_new_tokens] padded with -1 after a stop token, num_tokens [B], cache).
  A stop token is emitted, then the row is done.

  Why a second greedy AR beside the decode loop's `ar` method (glance_jax/decode/loop.py), which
  emits the same tokens: this one is one target step per iteration and nothing else, so (1) it is
  the target's own speed (benchmarks/target_speed.py compares it with transformers and the
  bandwidth floor), where the loop's `ar` also pays the round's walk, commit and records:
  `python benchmarks/ar_paths.py --sizes tiny,small --repeats 5` measured the loop's `ar` at 1.67x
  (tiny) and 1.23x (small) this loop's ms/token (CPU, 2 cores, shared, load ~7); and (2) it is an
  oracle independent of the speculative loop, so a bug shared by all of the loop's methods (commit,
  positions, cache lengths) cannot make them agree with it.
  """
  return ar_decode(graphdef, params, cache, first_logits, rope_delta, eos_ids, jax.random.key(0),
                   max_new_tokens=max_new_tokens, sampling=None)


@functools.partial(jax.jit, static_argnames=("graphdef", "max_new_tokens", "sampling"),
                   donate_argnames=("cache",))
def ar_decode(graphdef: nnx.GraphDef, params: nnx.State, cache: KVCache, first_logits: jax.Array,
              rope_delta: jax.Array, eos_ids: jax.Array, key: jax.Array, *, max_new_tokens: int,
              sampling=None):
  """greedy_decode when `sampling` is None or greedy (key unused); else each token drawn by
  `sampling.choose(logits, key)` with step i's key fold_in(key, i) (one draw per row). `sampling` is
  a decode.sampling.SamplingConfig (hashable, a static argument), taken by what it does: the model
  layer does not import the decoding layer above it."""
  model = merge(graphdef, params)
  b = first_logits.shape[0]

  def pick(logits, i):
    if sampling is None or sampling.greedy:
      return greedy_tokens(logits)
    return sampling.choose(logits, jax.random.fold_in(key, i))

  def is_stop(tok):
    return jnp.any(tok[:, None] == eos_ids[None, :], axis=-1)

  def cond(state):
    i, _, _, done, _ = state
    return (i < max_new_tokens) & ~jnp.all(done)

  def body(state):
    i, tok, out, done, cache = state
    out = out.at[:, i].set(jnp.where(done, -1, tok))
    done = done | is_stop(tok)
    pos = jnp.broadcast_to((cache.length + rope_delta)[None, :, None], (3, b, 1))
    h, new_cache, _ = model(tok[:, None], pos, cache, jnp.ones((b, 1, 1), bool))
    # rows already done keep their cache length (their extra writes sit beyond it, unseen).
    new_cache = new_cache.replace(length=cache.length + (~done).astype(jnp.int32))
    nxt = pick(model.logits(h)[:, 0], i + 1)
    return i + 1, nxt, out, done, new_cache

  tok0 = pick(first_logits, 0)
  out0 = jnp.full((b, max_new_tokens), -1, jnp.int32)
  state = (jnp.int32(0), tok0, out0, jnp.zeros((b,), bool), cache)
  _, _, out, _, cache = jax.lax.while_loop(cond, body, state)
  return out, jnp.sum(out >= 0, axis=1), cache
