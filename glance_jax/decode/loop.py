"""One decode loop for every method: the whole generation is one jitted `lax.while_loop`.

A round (design.md): [project the last round's committed features into the head's context cache]
-> [draft: one head pass over [root, MASK x L]] -> [tree] -> [verify: one target pass over the root
plus N nodes with the ancestor mask] -> [walk] -> [commit: accepted K/V moved into place, their
features kept, A + 1 tokens emitted]. `ar` is the same round with N = 0, so every method runs in
the same engine and is timed alike.

Letters: B rows, S cache slots, L = block_size - 1 draft depth, C = L + 1, F = taps x target width.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import flax.struct
import jax
import jax.numpy as jnp
from flax import nnx

from glance_jax.decode import budget as budget_lib
from glance_jax.decode import drafters
from glance_jax.decode.sampling import SamplingConfig, choose, entropy
from glance_jax.decode.verify import WalkResult, commit_kv, walk
from glance_jax.qwen3_vl.cache import KVCache, causal_block_mask, init_cache, write_rows
from glance_jax.qwen3_vl.engine import last_rows
from glance_jax.static_args import as_tree, unwrap

METHODS = ("ar", "ngram", "chain", "glance")

# How often each loop configuration has been traced (a Python side effect runs only while tracing):
# tests assert one trace per (config, shapes, head graph: an ablated head is another program).
TRACE_COUNTS: collections.Counter = collections.Counter()


@dataclasses.dataclass(frozen=True)
class LoopConfig:
  """Static knobs: one compiled loop per distinct value."""
  method: str = "glance"
  budget: int = 63                 # N for glance; max draft depth for chain / ngram
  max_new_tokens: int = 256
  block_size: int = 16             # the head's B (draft depth L = B - 1); ngram uses it too
  sampling: SamplingConfig = SamplingConfig()
  tap_layers: tuple[int, ...] = ()
  mask_token_id: int = 0
  max_ngram: int = 3
  oracle: bool = False             # benchmark/test only: the head's marginals are pushed onto a
                                   # given continuation (DecodeState.oracle), so the tree holds it
  auto: bool = False               # glance: verify width chosen per round (decode/budget.py)
  cost: tuple[float, ...] = ()     # auto: round cost t(w) / t_AR per width of `widths`
  calib: tuple = ()                # auto: (predicted, observed) knots of the E[A] calibration, or
                                   # one such pair per width (RoundCost.knots)
  auto_set: tuple[int, ...] = ()   # auto: the widths compiled (RoundCost.auto_set); () = every
                                   # width of budget.auto_widths(budget). The tree has `budget` nodes.

  def __post_init__(self):
    if self.method not in METHODS:
      raise ValueError(f"unknown method {self.method!r}; choose one of {METHODS}")
    if self.budget < 1:
      raise ValueError(f"budget must be >= 1, got {self.budget}")
    if self.max_new_tokens < 1:
      raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
    if self.auto and self.method != "glance":
      raise ValueError(f"auto budgets need method glance, got {self.method!r}")
    if self.auto_set and (not self.auto or max(self.auto_set) > self.budget):
      raise ValueError(f"auto_set {self.auto_set} needs auto and widths <= budget {self.budget}")
    if self.auto and len(self.cost) != len(self.widths):
      raise ValueError(f"auto budgets need one round cost per width {self.widths}, got {self.cost}")
    if self.method == "ngram" and self.cost and len(self.cost) != len(self.widths):
      raise ValueError(f"ngram needs one round cost per width {self.widths}, got {self.cost}")

  @property
  def widths(self) -> tuple[int, ...]:
    """The static verify widths this loop compiles (decode/budget.py); one = no switch."""
    if self.method == "ar":
      return (0,)
    if self.method == "ngram":
      return budget_lib.ngram_widths(self.num_nodes)
    if self.auto:
      return self.auto_set or budget_lib.auto_widths(self.num_nodes)
    return (self.num_nodes,)

  @property
  def record_widths(self) -> tuple[int, ...]:
    """Widths at which each glance round records the predicted and observed accepted length (the
    calibration data of decode/calibrate.py); none for the other methods."""
    return tuple(w for w in budget_lib.auto_widths(self.num_nodes) if w) if self.method == "glance" else ()

  @property
  def depth(self) -> int:
    return self.block_size - 1

  @property
  def uses_head(self) -> bool:
    return self.method in ("chain", "glance")

  @property
  def num_nodes(self) -> int:
    """Static N of the verify pass (root excluded)."""
    if self.method == "ar":
      return 0
    if self.method == "glance":
      return self.budget
    return min(self.budget, self.depth)

  def slots_needed(self, prompt_len: int) -> int:
    """Cache slots: the prompt, every emitted token, and one round's writes past the end (the
    N + 1 verify rows, and the C = L + 1 rows every commit / context write moves). A write that
    ran past the end would be clamped back by dynamic_update_slice onto committed rows."""
    return prompt_len + self.max_new_tokens + max(self.num_nodes, self.depth) + 2


@flax.struct.dataclass
class DecodeState:
  cache: KVCache
  root: jax.Array           # int32 [B]: chosen by the target, emitted, not yet fed
  rope_delta: jax.Array     # int32 [B]
  history: jax.Array        # int32 [B, S]: committed tokens then the root (prompt lookup)
  head_k: tuple             # per head layer [B, S, K, hd] (empty without a head)
  head_v: tuple
  ctx_len: jax.Array        # int32 [B]: committed rows already projected into head_k / head_v
  pending: jax.Array        # [B, C, F]: features of last round's committed rows (not yet projected)
  n_pending: jax.Array      # int32 [B]
  out: jax.Array            # int32 [B, max_new + C]: emitted tokens
  count: jax.Array          # int32 [B]
  done: jax.Array           # bool [B]
  rounds: jax.Array         # int32 []
  rec_accepted: jax.Array   # int32 [B, R]: A per round (-1 once the row is done)
  rec_entropy: jax.Array    # float32 [B, R]: target entropy at the round's root
  rec_width: jax.Array      # int32 [R]: verify width of each round (-1 = not run)
  rec_pred: jax.Array       # float32 [B, R, P]: raw E[A] of the top-w tree, w in cfg.record_widths
  rec_obs: jax.Array        # int32 [B, R, P]: A within the top-w tree (-1: w > the verified width)
  ngram_stats: jax.Array    # float32 [B, max_ngram, 2]: ngram's (accepted, trials) per match length
  key: jax.Array
  oracle: jax.Array         # int32 [B, M]: the known continuation (oracle drafter), else [B, 0]
  ahead: tuple | None = None  # glance-auto: (DraftTree, scores [B, N]) drafted for the current root


def _feats(taps: dict[int, jax.Array], layers: tuple[int, ...]) -> jax.Array:
  return jnp.concatenate([taps[i] for i in layers], axis=-1) if layers else None


def _text_positions(start: jax.Array, offsets: jax.Array) -> jax.Array:
  """start [B] + offsets [B, T] or [T] -> int32 [3, B, T] (generated text: equal on all axes)."""
  pos = start[:, None] + offsets
  return jnp.broadcast_to(pos[None], (3,) + pos.shape).astype(jnp.int32)


def _is_stop(tokens: jax.Array, stops: jax.Array) -> jax.Array:
  return jnp.any(tokens[..., None] == stops, axis=-1)


@functools.partial(jax.jit, static_argnames=("tgd", "hgd", "cfg", "max_length"))
def prefill_state(tgd, tparams, hgd, hparams, input_ids, attention_mask, positions, rope_delta,
                  pixel_values, vision_meta, stops, key, oracle, *, cfg: LoopConfig,
                  max_length: int) -> DecodeState:
  """Prompt -> the first round's state: target cache, first token (emitted), head context cache.
  tgd / hgd: graphdefs, bare or in static_args.Hashed holders (hashed once: generate's); tparams /
  hparams: parameter trees, bare or as static_args.FlatState (flattened once)."""
  tgd, hgd, tparams, hparams = unwrap(tgd), unwrap(hgd), as_tree(tparams), as_tree(hparams)
  target = nnx.merge(tgd, tparams)
  b, s = input_ids.shape
  t = target.cfg.text
  cache = init_cache(t, b, max_length, target.embed_weight.dtype)
  image_embeds = deepstack = None
  if pixel_values is not None:
    image_embeds, deepstack = target.encode_images(pixel_values, vision_meta)
  valid = attention_mask.astype(bool)
  lengths = jnp.sum(valid, axis=1).astype(jnp.int32)
  h, cache, taps = target(input_ids, positions, cache, causal_block_mask(valid), image_embeds=image_embeds,
                          deepstack=deepstack, tap_layers=cfg.tap_layers if cfg.uses_head else ())
  cache = cache.replace(length=lengths)
  last = last_rows(h, lengths)
  key, sub = jax.random.split(key)
  first = choose(target.logits(last)[:, 0], sub, cfg.sampling)
  history = jnp.zeros((b, max_length + cfg.block_size + 1), jnp.int32)
  history = history.at[:, :s].set(jnp.where(valid, input_ids, 0))
  history = write_rows(history[..., None], first[:, None, None], lengths)[..., 0]
  n_rec = cfg.max_new_tokens
  c = cfg.depth + 1
  head_k = head_v = ()
  pending = jnp.zeros((b, c, 0), jnp.float32)
  if cfg.uses_head:
    head = nnx.merge(hgd, hparams)
    ctx = head.project_context(_feats(taps, cfg.tap_layers))
    k, v = head.context_kv(ctx, positions)                                # per layer [B, s, K, hd]
    pad = lambda x: jnp.pad(x, ((0, 0), (0, max_length - s), (0, 0), (0, 0)))  # noqa: E731
    head_k, head_v = tuple(pad(x) for x in k), tuple(pad(x) for x in v)
    pending = jnp.zeros((b, c, len(cfg.tap_layers) * t.hidden_size), h.dtype)
  out = jnp.zeros((b, cfg.max_new_tokens + c), jnp.int32).at[:, 0].set(first)
  done = _is_stop(first, stops) | (cfg.max_new_tokens <= 1)
  return DecodeState(cache=cache, root=first, rope_delta=rope_delta.astype(jnp.int32), history=history,
                     head_k=head_k, head_v=head_v, ctx_len=lengths, pending=pending,
                     n_pending=jnp.zeros((b,), jnp.int32), out=out, count=jnp.ones((b,), jnp.int32), done=done,
                     rounds=jnp.int32(0), rec_accepted=jnp.full((b, n_rec), -1, jnp.int32),
                     rec_entropy=jnp.zeros((b, n_rec), jnp.float32),
                     rec_width=jnp.full((n_rec,), -1, jnp.int32),
                     rec_pred=jnp.zeros((b, n_rec, len(cfg.record_widths)), jnp.float32),
                     rec_obs=jnp.full((b, n_rec, len(cfg.record_widths)), -1, jnp.int32),
                     ngram_stats=budget_lib.ngram_prior(b, cfg.max_ngram), key=key, oracle=oracle)


def _draft(head, target, st: DecodeState, cfg: LoopConfig):
  """One head pass -> ((DraftTree, node scores [B, N] | ngram match length [B] | None), updated state).
  Projects last round's features into the head's context cache first."""
  b = st.root.shape[0]
  if not cfg.uses_head:
    if cfg.method == "ar":
      return (drafters.empty_tree(b), None), st
    return drafters.ngram_lookup(st.history, st.cache.length + 1, cfg.num_nodes, cfg.max_ngram), st
  c = cfg.depth + 1
  ctx = head.project_context(st.pending)                                  # [B, C, H]
  k, v = head.context_kv(ctx, _text_positions(st.ctx_len + st.rope_delta, jnp.arange(c)))
  head_k = tuple(write_rows(buf, x, st.ctx_len) for buf, x in zip(st.head_k, k))
  head_v = tuple(write_rows(buf, x, st.ctx_len) for buf, x in zip(st.head_v, v))
  ctx_len = st.ctx_len + st.n_pending
  block = jnp.concatenate([st.root[:, None], jnp.full((b, cfg.depth), cfg.mask_token_id, jnp.int32)], 1)
  noise = target.embed(block)                                             # [B, Bk, Dt]
  pos = _text_positions(st.cache.length + st.rope_delta, jnp.arange(cfg.block_size))
  from glance_jax.head.model import block_mask
  mask = block_mask(ctx_len, head_k[0].shape[1], cfg.block_size)
  hidden = head(noise, pos, head_k, head_v, mask)                         # [B, Bk, H]
  log_q = jax.nn.log_softmax(target.logits(hidden[:, 1:]), axis=-1)       # [B, L, V]
  if cfg.oracle:  # slot d drafts emitted token count - 1 + d: make the known one the clear favourite
    idx = jnp.clip(st.count[:, None] + jnp.arange(cfg.depth)[None], 0, st.oracle.shape[1] - 1)
    future = jnp.take_along_axis(st.oracle, idx, axis=1)                  # [B, L]
    log_q = jax.nn.log_softmax(log_q + 50.0 * jax.nn.one_hot(future, log_q.shape[-1]), axis=-1)
  tree, scores = drafters.scored_head_tree(log_q, cfg.method, cfg.budget)
  return (tree, scores), st.replace(head_k=head_k, head_v=head_v, ctx_len=ctx_len, n_pending=jnp.zeros_like(st.n_pending))


def _ar_result(choice: jax.Array, c: int) -> WalkResult:
  """The width-0 round (no draft rows, so no walk): the root's choice is the bonus, nothing accepted."""
  b = choice.shape[0]
  zeros = jnp.zeros((b, c), jnp.int32)
  return WalkResult(jnp.zeros((b,), jnp.int32), zeros, zeros.at[:, 0].set(choice[:, 0]), choice[:, 0])


def _verify(target, cfg: LoopConfig, st: DecodeState, tree, live, key, w: int, alone: bool = False):
  """Verifies the root plus the first w nodes in one target pass, walks, commits.

  Returns (cache, WalkResult with C = L + 1 commit rows (1 for ar), features of the committed rows
  [B, C, F] (None without a head), root entropy [B])."""
  b = st.root.shape[0]
  sub = drafters.first_nodes(tree, w)
  ids = jnp.concatenate([st.root[:, None], sub.tokens], axis=1)           # [B, w + 1]
  depth = jnp.concatenate([jnp.zeros((b, 1), jnp.int32), sub.depths], axis=1)
  pos = _text_positions(st.cache.length + st.rope_delta, depth)
  h, cache, taps = target(ids, pos, st.cache, sub.ancestor_mask,
                          tap_layers=cfg.tap_layers if cfg.uses_head else ())
  logits = target.logits(h)                                               # [B, w + 1, V] fp32
  choice = choose(logits, key, cfg.sampling)
  # commit rows: C, the same in every switch branch; 1 for AR and for an AR step outside a switch
  # without a head (ngram's AR runs: no C-row writes per token)
  c = cfg.depth + 1 if (max(cfg.widths) or cfg.uses_head) and (w or cfg.uses_head or not alone) else 1
  if w:
    res = walk(sub, choice, cfg.depth)
    advance = jnp.where(live, res.accepted + 1, 0)
    cache = commit_kv(cache, res.commit_rows, advance)
  else:  # the root's K/V already sit at slot `length`: nothing to move
    res = _ar_result(choice, c)
    cache = cache.replace(length=cache.length + jnp.where(live, 1, 0))
  pending = None
  if cfg.uses_head:
    feats = _feats(taps, cfg.tap_layers)                                  # [B, w + 1, F]
    pending = jnp.take_along_axis(feats, res.commit_rows[:, :, None], axis=1)
  return cache, res, pending, entropy(logits[:, 0])


def _choose_width(cfg: LoopConfig, st: DecodeState, tree, scores, live) -> jax.Array:
  """Index into cfg.widths for this round (decode/budget.py)."""
  if cfg.method == "ngram":
    if cfg.cost:
      return budget_lib.ngram_width(st.ngram_stats, scores, jnp.sum(tree.valid, axis=1), live, cfg.widths,
                                    cfg.cost)
    need = jnp.max(jnp.where(live, jnp.sum(tree.valid, axis=1), 0))
    return budget_lib.smallest_width_holding(need, cfg.widths)
  return budget_lib.best_width(scores, live, cfg.widths, cfg.cost, cfg.calib)


def _round(tgd, tparams, hgd, hparams, stops, cfg: LoopConfig, st: DecodeState, only: int | None = None
           ) -> DecodeState:
  """One round; `only` (static): verify that width, no per-round choice. With st.ahead (glance-auto)
  the round verifies that draft instead of drafting."""
  target = nnx.merge(tgd, tparams)
  head = nnx.merge(hgd, hparams) if cfg.uses_head else None
  if st.ahead is not None:
    (tree, scores), st = st.ahead, st.replace(ahead=None)
  elif only == 0 and not cfg.uses_head:  # an AR step of ngram's AR runs: no lookup
    tree, scores = drafters.empty_tree(st.root.shape[0]), None
  else:
    (tree, scores), st = _draft(head, target, st, cfg)
  live = ~st.done
  key, sub = jax.random.split(st.key)
  widths = cfg.widths if only is None else (only,)
  branches = [functools.partial(_verify, target, cfg, st, tree, live, sub, w, only is not None) for w in widths]
  if len(branches) == 1:
    idx = jnp.int32(cfg.widths.index(widths[0]))
    cache, res, pending, root_h = branches[0]()
  else:
    idx = _choose_width(cfg, st, tree, scores, live)
    cache, res, pending, root_h = jax.lax.switch(idx, branches)
  # emit: A accepted + bonus, cut at the first stop token and at max_new_tokens
  n_new = res.accepted + 1
  c = res.new_tokens.shape[1]
  j = jnp.arange(c)[None]
  stop_at = jnp.where(_is_stop(res.new_tokens, stops) & (j < n_new[:, None]), j, c)
  first_stop = jnp.min(stop_at, axis=1)
  n_emit = jnp.minimum(jnp.minimum(n_new, first_stop + 1), cfg.max_new_tokens - st.count)
  n_emit = jnp.where(live, n_emit, 0)
  out = write_rows(st.out[..., None], res.new_tokens[..., None], st.count)[..., 0]
  out = jnp.where(live[:, None], out, st.out)
  count = st.count + n_emit
  done = st.done | (live & ((first_stop < n_new) | (count >= cfg.max_new_tokens)))
  history = write_rows(st.history[..., None], res.new_tokens[..., None], st.cache.length + 1)[..., 0]
  history = jnp.where(live[:, None], history, st.history)
  n_pending = st.n_pending
  if cfg.uses_head:
    n_pending = jnp.where(live, n_new, 0)
  else:
    pending = st.pending
  r = st.rounds
  rec_a = st.rec_accepted.at[:, r].set(jnp.where(live, res.accepted, -1))
  rec_h = st.rec_entropy.at[:, r].set(jnp.where(live, root_h, 0.0))
  width = jnp.asarray(cfg.widths, jnp.int32)[idx]
  rec_w = st.rec_width.at[r].set(width)
  # --- per-round width records (calibration data, ngram's acceptance estimate) ---
  rec_pred, rec_obs, ng = st.rec_pred, st.rec_obs, st.ngram_stats
  if cfg.record_widths:
    pred, obs = budget_lib.calibration_record(scores, res.accepted, res.commit_rows, width, cfg.record_widths)
    rec_pred = rec_pred.at[:, r].set(pred)
    rec_obs = rec_obs.at[:, r].set(jnp.where(live[:, None], obs, -1))
  if cfg.method == "ngram" and only != 0:
    ng = budget_lib.ngram_update(ng, scores, jnp.sum(tree.valid, axis=1), width, res.accepted, live)
  # --- end of the width records ---
  return st.replace(cache=cache, root=jnp.where(live, res.bonus, st.root), history=history, pending=pending,
                    n_pending=n_pending, out=out, count=count, done=done, rounds=r + 1, rec_accepted=rec_a,
                    rec_entropy=rec_h, rec_width=rec_w, rec_pred=rec_pred, rec_obs=rec_obs, ngram_stats=ng,
                    key=key)


def _running(cfg: LoopConfig, st: DecodeState) -> jax.Array:
  return (st.rounds < cfg.max_new_tokens) & ~jnp.all(st.done)


# --- ngram with a cost table: runs of AR steps without a per-round switch ---------------------------
# A lax.switch in the loop body costs about one more AR step per round on XLA:CPU (measured: an ngram
# round forced to width 0 through the switch 0.58 ms, without it 0.25 ms, AR 0.23 ms; docs/rounds.md),
# so the rounds that verify nothing run in an inner while_loop of plain AR steps (plus the lookup that
# decides when to leave it), and the switch is paid once per run of AR steps or verify round.

def _ngram_choice(cfg: LoopConfig, st: DecodeState) -> jax.Array:
  """The width index the next round would choose (budget.ngram_width on this state's lookup)."""
  tree, match_n = drafters.ngram_lookup(st.history, st.cache.length + 1, cfg.num_nodes, cfg.max_ngram)
  return budget_lib.ngram_width(st.ngram_stats, match_n, jnp.sum(tree.valid, axis=1), ~st.done, cfg.widths,
                                cfg.cost)


def _ngram_body(tgd, tparams, hgd, hparams, stops, cfg: LoopConfig, st: DecodeState) -> DecodeState:
  step = functools.partial(_round, tgd, tparams, hgd, hparams, stops, cfg)

  def ar_run(s):
    # While no proposal could pay, every round is an AR step and the counts (which change only on
    # verify rounds) stay as they are, so that holds to the end: plain AR steps, no lookup and no
    # per-step test beyond AR's own (the test is made once, here).
    ar_to_end = functools.partial(jax.lax.while_loop, functools.partial(_running, cfg),
                                  functools.partial(step, only=0))
    look = functools.partial(jax.lax.while_loop, lambda x: _running(cfg, x) & (_ngram_choice(cfg, x) == 0),
                             functools.partial(step, only=0))
    return jax.lax.cond(budget_lib.ngram_can_pay(s.ngram_stats, ~s.done, cfg.num_nodes, cfg.widths, cfg.cost),
                        look, ar_to_end, s)

  branches = [ar_run] + [functools.partial(step, only=w) for w in cfg.widths[1:]]
  return jax.lax.switch(_ngram_choice(cfg, st), branches, st)


# --- glance-auto: runs of rounds at one width, the switch paid only when the width changes ---------
# Measured on the testbed (docs/rounds.md): a per-round lax.switch over the verify widths costs ~1.5
# AR steps per round. So each round drafts the *next* round's tree at its end (st.ahead), the width
# that tree asks for is known before the round starts, and an inner while_loop runs rounds at one
# static width for as long as the choice stays the same. An auto_set of one width is a plain loop
# at that width (decode_rounds).

def _draft_ahead(tgd, tparams, hgd, hparams, cfg: LoopConfig, st: DecodeState) -> DecodeState:
  drafted, st = _draft(nnx.merge(hgd, hparams), nnx.merge(tgd, tparams), st, cfg)
  return st.replace(ahead=drafted)


def _auto_choice(cfg: LoopConfig, st: DecodeState) -> jax.Array:
  return budget_lib.best_width(st.ahead[1], ~st.done, cfg.widths, cfg.cost, cfg.calib)


def _auto_loop(tgd, tparams, hgd, hparams, stops, cfg: LoopConfig, state: DecodeState,
               choose=None) -> DecodeState:
  """glance-auto's rounds; `choose(state) -> index into cfg.widths` (default: the policy,
  _auto_choice; decode_rounds' schedule passes recorded widths)."""
  choose = choose or functools.partial(_auto_choice, cfg)
  ahead = functools.partial(_draft_ahead, tgd, tparams, hgd, hparams, cfg)

  def step(w, st):
    spent = st.ahead
    st = _round(tgd, tparams, hgd, hparams, stops, cfg, st, only=w)
    # no draft after the last round (it would be wasted): the consumed draft stands in for it
    return jax.lax.cond(_running(cfg, st), ahead, lambda x: x.replace(ahead=spent), st)

  def run(i, st):
    return jax.lax.while_loop(lambda x: _running(cfg, x) & (choose(x) == i),
                              functools.partial(step, cfg.widths[i]), st)

  branches = [functools.partial(run, i) for i in range(len(cfg.widths))]
  return jax.lax.while_loop(functools.partial(_running, cfg),
                            lambda st: jax.lax.switch(choose(st), branches, st), ahead(state))


@functools.partial(jax.jit, static_argnames=("tgd", "hgd", "cfg"), donate_argnames=("state",))
def decode_rounds(tgd, tparams, hgd, hparams, state: DecodeState, stops: jax.Array,
                  schedule: jax.Array | None = None, *, cfg: LoopConfig) -> DecodeState:
  """Every round of the generation in one `lax.while_loop` (nothing returns to the host).

  schedule (glance-auto only): int32 [R], round r verifies cfg.widths[schedule[min(r, R - 1)]]
  instead of the width the policy would choose; the same compiled loop otherwise (draft ahead,
  runs at one static width). For replaying recorded widths (bench/replay.py) and for tests; the
  tokens are the target's whatever the widths. tgd / hgd: as for prefill_state."""
  tgd, hgd, tparams, hparams = unwrap(tgd), unwrap(hgd), as_tree(tparams), as_tree(hparams)
  TRACE_COUNTS[(cfg, state.out.shape, state.cache.max_length, stops.shape, hgd,
                None if schedule is None else schedule.shape)] += 1
  if schedule is not None and not (cfg.auto and len(cfg.widths) > 1):
    raise ValueError(f"a width schedule needs glance-auto with more than one width, got method "
                     f"{cfg.method!r} auto={cfg.auto} widths {cfg.widths}")
  if cfg.auto and len(cfg.widths) > 1:
    choose = None if schedule is None else (
        lambda st: schedule[jnp.minimum(st.rounds, schedule.shape[0] - 1)].astype(jnp.int32))
    return _auto_loop(tgd, tparams, hgd, hparams, stops, cfg, state, choose).replace(ahead=None)
  body = _ngram_body if cfg.method == "ngram" and cfg.cost else _round
  return jax.lax.while_loop(functools.partial(_running, cfg),
                            functools.partial(body, tgd, tparams, hgd, hparams, stops, cfg), state)


def draft_passes(cfg: LoopConfig) -> int:
  """Head forward passes per round: one however deep the draft (zero for ar / ngram)."""
  return 1 if cfg.uses_head else 0

