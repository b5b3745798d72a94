"""Where a decoding round's time goes: each part of a round timed alone, and the whole round through
the real loop (benchmarks/decode_report.py --sections split, round_cost.py, gpu_8b.py).

Per-round time of each phase, each phase its own jitted function, on the state after a prompt,
batch 1. Each phase runs R times inside one jitted fori_loop (caches carried and updated in place,
as in the decode loop; the phase's inputs pass through an optimization_barrier tied to the loop
counter so XLA cannot hoist them out of the loop), and the figure is (T(R) - T(0)) / R (R is a
traced count: one program, dispatch cancels out). The phases re-state the loop's steps (draft,
tree, verify, walk+commit) from the decode package's public pieces; the whole round is measured
through the loop itself (loop.decode_rounds) with the oracle drafter, so every round accepts 15.
"""

from __future__ import annotations

import functools
import time
import types

import jax
import jax.numpy as jnp
import numpy as np

from glance_jax.bench.random_models import long_prompt, make_head, make_target, size_config
from glance_jax.bench.timing import PhaseTimer, barrier, interleaved, interleaved_ms, median
from glance_jax.bench import engine
from glance_jax.decode import loop
from glance_jax.decode.drafters import block
from glance_jax.decode.drafters.block import BlockState, text_positions
from glance_jax.decode.loop import LoopConfig
from glance_jax.decode.sampling import SamplingConfig, choose, entropy
from glance_jax.decode.verify import commit_kv, empty_tree, walk
from glance_jax.head import Head
from glance_jax.qwen3_vl.cache import KVCache, write_rows
from glance_jax.qwen3_vl.target import Target
from glance_jax.static_args import merge


def _print(msg: str):
  print(msg, flush=True)


class _View:
  """What a drafter's marginals read of the loop state: the root, its slot and rope delta."""
  def __init__(self, root, cache_len, rope_delta):
    self.root, self.rope_delta, self.cache = root, rope_delta, types.SimpleNamespace(length=cache_len)


@functools.partial(jax.jit, static_argnames=("tgd", "drafter"), donate_argnames=("carry",))
def _draft_phase(tgd, tparams, drafter, hparams, inp, carry, *, reps: int):
  target = merge(tgd, tparams)

  def body(i, c):
    head_k, head_v, _ = c
    x = barrier(i, inp)
    state = BlockState(k=head_k, v=head_v, ctx_len=x["ctx_len"], pending=x["pending"], n_pending=x["n_pending"])
    log_q, state = drafter.marginals(hparams, target, state, _View(x["root"], x["cache_len"], x["rope_delta"]))
    return state.k, state.v, log_q                                        # log_q [B, L, V]

  return jax.lax.fori_loop(0, reps, body, carry)


@functools.partial(jax.jit, static_argnames=("drafter",), donate_argnames=("carry",))
def _tree_phase(log_q, carry, *, drafter, reps: int):
  def body(i, _):
    return drafter.tree(barrier(i, log_q)).tree
  return jax.lax.fori_loop(0, reps, body, carry)


@functools.partial(jax.jit, static_argnames=("tgd", "taps"), donate_argnames=("carry",))
def _verify_phase(tgd, tparams, inp, carry, *, taps: tuple, reps: int):
  target = merge(tgd, tparams)

  def body(i, c):
    ks, vs, _, feats = c
    x = barrier(i, inp)
    cache = KVCache(k=ks, v=vs, length=x["cache_len"])
    h, cache, tapped = target(x["ids"], x["pos"], cache, x["mask"], tap_layers=taps)
    logits = target.logits(h)                                              # [B, R, V] fp32
    if taps:
      feats = jnp.concatenate([tapped[i] for i in taps], axis=-1)
    return cache.k, cache.v, logits, feats

  return jax.lax.fori_loop(0, reps, body, carry)


@functools.partial(jax.jit, static_argnames=("max_depth",), donate_argnames=("carry",))
def _walk_phase(inp, carry, *, max_depth: int, reps: int):
  def body(i, c):
    ks, vs, _, out, history, _ = c
    x = barrier(i, inp)
    choice = choose(x["logits"], x["key"], SamplingConfig())
    res = walk(x["tree"], choice, max_depth)
    cache = commit_kv(KVCache(k=ks, v=vs, length=x["cache_len"]), res.commit_rows, res.accepted + 1)
    pending = jnp.take_along_axis(x["feats"], res.commit_rows[:, :, None], axis=1)
    out = write_rows(out[..., None], res.new_tokens[..., None], x["count"])[..., 0]
    history = write_rows(history[..., None], res.new_tokens[..., None], x["cache_len"] + 1)[..., 0]
    return cache.k, cache.v, pending, out, history, entropy(x["logits"][:, 0])

  return jax.lax.fori_loop(0, reps, body, carry)


def _plan(target: Target, head: Head, method: str, budget: int, oracle=None, max_new: int = 8):
  """The Plan generate() runs for (method, budget), with the oracle drafter when `oracle` [B, M] is
  given; and the loop's static knobs."""
  p = engine.plan(target, method, head=head if method != "ar" else None, budget=budget, oracle_tokens=oracle,
                  batch=1 if oracle is None else np.shape(oracle)[0], max_new_tokens=max_new)
  return p, LoopConfig(max_new_tokens=max_new)


def _draft_timed(target: Target, head: Head, st, reps: int, seed: int) -> PhaseTimer:
  """The draft phase on `st`. It does not depend on the method or the budget (one head pass over the
  block whatever tree is built from it), so one program serves chain and every glance budget."""
  drafter = block.bind(head, target, 1)
  b, c = st.root.shape[0], drafter.depth + 1
  f = len(drafter.tap_layers) * target.config.text.hidden_size
  pending = jax.random.normal(jax.random.key(seed), (b, c, f), jnp.float32).astype(target.dtype)
  inp = dict(pending=pending, ctx_len=st.drafter.ctx_len, n_pending=jnp.full((b,), c, jnp.int32), root=st.root,
             cache_len=st.cache.length, rope_delta=st.rope_delta)
  carry = (tuple(jnp.copy(x) for x in st.drafter.k), tuple(jnp.copy(x) for x in st.drafter.v),
           jnp.zeros((b, drafter.depth, target.config.text.vocab_size), jnp.float32))
  return PhaseTimer(functools.partial(_draft_phase, target.jit_graphdef, target.flat_params, drafter,
                                      head.flat_params, inp), (), carry, reps)


def _phase_set(target: Target, head: Head, st, method: str, budget: int, reps: int, log_q_real, seed: int):
  """The timed tree / verify / walk+commit phases of one method on the state `st` (from
  loop.prefill); `log_q_real` is a head output on that state (the tree phase sorts it)."""
  tgd, tp = target.jit_graphdef, target.flat_params
  drafter = _plan(target, head, method, budget)[0].drafter
  b = st.root.shape[0]
  phases = {}
  key = jax.random.key(seed)
  if drafter.passes:
    tree = drafter.tree(log_q_real).tree
    phases["tree"] = PhaseTimer(functools.partial(_tree_phase, log_q_real, drafter=drafter), (),
                                jax.tree.map(jnp.copy, tree), reps)
  else:
    tree = empty_tree(b)
  n = drafter.num_nodes
  ids = jnp.concatenate([st.root[:, None], tree.tokens], axis=1)
  depth = jnp.concatenate([jnp.zeros((b, 1), jnp.int32), tree.depths], axis=1)
  vin = dict(ids=ids, pos=text_positions(st.cache.length + st.rope_delta, depth), mask=tree.ancestor_mask,
             cache_len=st.cache.length)
  v = target.config.text.vocab_size
  taps = drafter.tap_layers
  fdim = len(taps) * target.config.text.hidden_size if taps else 1
  vcarry = (tuple(jnp.copy(x) for x in st.cache.k), tuple(jnp.copy(x) for x in st.cache.v),
            jnp.zeros((b, n + 1, v), jnp.float32), jnp.zeros((b, n + 1, fdim), target.dtype))
  phases["verify"] = PhaseTimer(functools.partial(_verify_phase, tgd, tp, vin, taps=taps), (), vcarry, reps)
  phases["verify"]._run(1)                                                # real logits and features
  _, _, logits, feats = phases["verify"].carry
  logits, feats = jnp.copy(logits), jnp.copy(feats)       # the verify carry is donated on every call
  win = dict(logits=logits, key=key, tree=tree, feats=feats, cache_len=st.cache.length, count=jnp.ones((b,), jnp.int32))
  c = drafter.max_depth + 1                                               # commit rows C
  out = jnp.zeros((b, 256 + c), jnp.int32)
  wcarry = (tuple(jnp.copy(x) for x in st.cache.k), tuple(jnp.copy(x) for x in st.cache.v),
            jnp.zeros((b, c, feats.shape[-1]), feats.dtype), out, jnp.copy(st.history), jnp.zeros((b,), jnp.float32))
  phases["walk+commit"] = PhaseTimer(functools.partial(_walk_phase, win, max_depth=drafter.max_depth), (), wcarry,
                                     reps)
  return phases


def _prefill(target: Target, plan, cfg: LoopConfig, prompt, max_length: int):
  """loop.prefill on `prompt` for `plan` (as generate() calls it)."""
  return loop.prefill(target.jit_graphdef, target.flat_params, plan.drafter, plan.params, plan.policy,
                      target.prompt(prompt), jnp.asarray(prompt.rope_delta, jnp.int32), jnp.asarray([-1], jnp.int32),
                      jax.random.key(0), cfg=cfg, max_length=max_length)


def _whole_run(target: Target, plan, cfg: LoopConfig, st0):
  """The real decode loop (loop.decode_rounds, the call generate() makes) from a copy of the
  prefilled state `st0`, timed alone -> (seconds, rounds, tokens of row 0, tau of row 0)."""
  st = jax.block_until_ready(jax.tree.map(jnp.copy, st0))               # decode_rounds donates it
  t0 = time.perf_counter()
  st = loop.decode_rounds(target.jit_graphdef, target.flat_params, plan.drafter, plan.params, plan.policy, st,
                          jnp.asarray([-1], jnp.int32), cfg=cfg)
  jax.block_until_ready(st)
  dt = time.perf_counter() - t0
  acc = np.asarray(st.accepted[0])
  acc = acc[acc >= 0]
  return dt, int(st.rounds), np.asarray(st.out[0, : int(st.count[0])]), float(np.mean(acc + 1))


def _tree_topk_diag(log_q, budgets, repeats: int = 5) -> dict:
  """head_tree as written vs the same with lax.top_k's outputs behind an optimization_barrier.

  On XLA CPU, build_tree's `lax.top_k` is compiled as a full sort of every [V] row (the `TopK`
  custom call is lost, apparently because a static slice of its output, `top_lq[0, 0]`, is taken);
  a barrier keeps the TopK call. The patch is scoped to this function's own tracing (the library is
  not changed)."""
  orig = jax.lax.top_k
  compiled = {}
  for n in budgets:
    compiled[("as written", n)] = jax.jit(lambda x, n=n: block.head_tree(x, n).tree).lower(log_q).compile()
    jax.lax.top_k = lambda a, k: jax.lax.optimization_barrier(orig(a, k))
    try:
      compiled[("top_k kept", n)] = jax.jit(lambda x, n=n: block.head_tree(x, n).tree).lower(log_q).compile()
    finally:
      jax.lax.top_k = orig
  ms = interleaved_ms(compiled, log_q, repeats)
  out = {}
  for (variant, n), c in compiled.items():
    txt = c.as_text()
    out[f"{variant} {n}"] = dict(ms=ms[(variant, n)],
                                 lowered_as="TopK custom call" if 'custom_call_target="TopK"' in txt else
                                 ("sort" if " sort(" in txt else "other"))
  return out


def _argmax_diag(vocab: int, rows: int = 64, repeats: int = 5) -> dict:
  x = jax.random.normal(jax.random.key(0), (1, rows, vocab), jnp.float32)
  fns = {"argmax": jax.jit(lambda x: jnp.argmax(x, -1)), "max": jax.jit(lambda x: jnp.max(x, -1))}
  return interleaved_ms(fns, x, repeats) | {"shape": [1, rows, vocab]}


def split(*, sizes=("tiny", "small"), budgets=(15, 31, 63), context: int = 300, head_layers=None,
          target_ms: float = 25.0, repeats: int = 5, new_tokens: int = 129, chain: bool = True,
          image: bool = True, seed: int = 3, configs: dict | None = None, widen: int = 1,
          log=_print) -> dict:
  """Per-round phase times (ms) and whole-round times through the real loop, per size.

  target_ms: each timed phase call runs enough iterations to take about this long.
  configs: size name -> Qwen3VLConfig, overriding the names `_size_config` knows (round_cost.py
  passes target_speed's tiny / small / medium). widen: each random pair widened that many times
  (qwen3_vl/widen.py: the target's residual and inner units, the head's residual only), as the
  testbed's memory-bound regime is made."""
  head_layers = head_layers or {}
  out = []
  for size in sizes:
    t_start = time.perf_counter()
    cfg = (configs or {}).get(size) or size_config(size)
    target = make_target(cfg, seed)
    head = make_head(target, seed + 1, head_layers.get(size, 2))
    if widen > 1:
      from glance_jax.head.widen import widen_head
      from glance_jax.qwen3_vl.widen import widen_target
      target = widen_target(target, widen)
      head = widen_head(head, widen, target=target)
    prompt = long_prompt(cfg, context, seed, image)
    label = size if widen == 1 else f"{size} x{widen}"
    out.append(split_size(target, head, prompt, size=label, budgets=budgets, target_ms=target_ms,
                          repeats=repeats, new_tokens=new_tokens, chain=chain, seed=seed, t_start=t_start,
                          log=log))
  return dict(repeats=repeats, results=out)


def split_size(target: Target, head: Head, prompt, *, size: str, budgets=(15, 31, 63), target_ms: float = 25.0,
               repeats: int = 5, new_tokens: int = 129, chain: bool = True, seed: int = 3,
               lossless: bool = True, t_start: float | None = None, log=_print) -> dict:
  """`split` for one given target, head and one-row prompt (benchmarks/gpu_8b.py builds its own on
  the device). lossless=False records whether each loop's tokens equal AR's (`same_tokens_as_ar`)
  instead of raising: in bf16 a verify pass of N + 1 rows may break an argmax near-tie differently."""
  t_start = time.perf_counter() if t_start is None else t_start
  methods = [("ar", 1)] + ([("chain", 15)] if chain else []) + [("glance", n) for n in budgets]
  max_n = max(n for _, n in methods)
  context = int(prompt.input_ids.shape[1])
  image = prompt.pixel_values is not None
  max_length = context + new_tokens + max(max_n, head.config.block_size - 1) + 2
  # AR's own continuation: the oracle drafter's tokens, and the lossless reference. One prefilled
  # state per state shape serves every loop: the head methods' states have the same shapes whatever
  # the method and budget (same block size, taps, max_new_tokens and recorded widths); the phases
  # start from it too.
  ar_plan, lcfg = _plan(target, head, "ar", 1, max_new=new_tokens)
  st_ar = _prefill(target, ar_plan, lcfg, prompt, max_length)
  _, _, ref, _ = _whole_run(target, ar_plan, lcfg, st_ar)
  loops = {(m, n): _plan(target, head, m, n, None if m == "ar" else ref[None], new_tokens)[0] for m, n in methods}
  states = {}

  def start(m, n):  # per state shape: the policy's records are sized by the budget's recorded widths
    p = loops[(m, n)]
    if m == "ar":
      return st_ar
    key = (p.drafter.max_depth, len(p.policy.record_widths))
    if key not in states:
      states[key] = _prefill(target, p, lcfg, prompt, max_length)
    return states[key]

  st_head = start("glance", max_n)
  draft = _draft_timed(target, head, st_head, 5, seed)
  draft._run(1)
  log_q = jnp.copy(draft.carry[2])                                      # a real head output on this state
  phases = {(m, n): _phase_set(target, head, st_head, m, n, 5, log_q, seed) for m, n in methods}
  phases[("head", 0)] = {"draft": draft}                                # shared by chain and glance
  same = {}

  def whole(m, n):
    dt, rounds, toks, tau = _whole_run(target, loops[(m, n)], lcfg, start(m, n))
    same[(m, n)] = bool(np.array_equal(toks, ref))
    if lossless and not same[(m, n)]:
      raise AssertionError(f"{m}-{n} ({size}) is not lossless vs AR")
    return dt, rounds, tau

  jobs = [("phase", m, n, ph) for (m, n), d in phases.items() for ph in d] + [("round", m, n, None)
                                                                             for m, n in methods]
  for kind, m, n, ph in jobs:  # compile everything; size each phase's iteration count
    if kind == "phase":
      p = phases[(m, n)][ph]
      p.call()
      per = p.call()
      p.reps = int(np.clip(np.ceil(1e-3 * target_ms / max(per, 1e-6)), 5, 2000))
    else:
      whole(m, n)
  log(f"[split {size}] compiled {len(jobs)} programs in {time.perf_counter() - t_start:.0f}s")
  times = {j: [] for j in jobs}
  meta = {}
  for job in interleaved(jobs, repeats, seed):
    kind, m, n, ph = job
    if kind == "phase":
      times[job].append(phases[(m, n)][ph].call())
    else:
      dt, rounds, tau = whole(m, n)
      times[job].append(dt / rounds)
      meta[(m, n)] = (rounds, tau)
  rows = []
  for m, n in methods:
    part = {ph: 1e3 * median(times[("phase", m, n, ph)]) for ph in ("tree", "verify", "walk+commit")
            if ("phase", m, n, ph) in times}
    if m != "ar":
      part["draft"] = 1e3 * median(times[("phase", "head", 0, "draft")])
    row = dict(method=m, budget=n, draft_ms=part.get("draft", 0.0), tree_ms=part.get("tree", 0.0),
               verify_ms=part["verify"], walk_commit_ms=part["walk+commit"],
               round_ms=1e3 * median(times[("round", m, n, None)]), rounds=meta[(m, n)][0], tau=meta[(m, n)][1],
               same_tokens_as_ar=same[(m, n)],
               reps={ph: p.reps for ph, p in (phases[(m, n)] | (phases[("head", 0)] if m != "ar" else {})).items()})
    row["sum_ms"] = row["draft_ms"] + row["tree_ms"] + row["verify_ms"] + row["walk_commit_ms"]
    rows.append(row)
  t_ar = rows[0]["round_ms"]
  for row in rows:
    row["ratio_to_ar"] = row["round_ms"] / t_ar
  res = dict(size=size, context=context, image=image, new_tokens=new_tokens, max_length=max_length,
             head_layers=head.config.num_hidden_layers, taps=list(head.config.target_layer_ids),
             params_m=_count(target.params) / 1e6, head_params_m=_count(head.params) / 1e6, rows=rows,
             tree_topk=_tree_topk_diag(log_q, [n for m, n in methods if m == "glance"], repeats),
             argmax=_argmax_diag(target.config.text.vocab_size, max_n + 1, repeats),
             seconds=time.perf_counter() - t_start)
  log(f"[split {size}] done in {res['seconds']:.0f}s")
  return res


def _count(state) -> int:
  return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(state))


def split_table(s: dict) -> str:
  parts = []
  for res in s["results"]:
    parts.append(f"**{res['size']}** target ({res['params_m']:.2f}M params), head {res['head_layers']} layers "
                 f"({res['head_params_m']:.2f}M, taps {res['taps']}), batch 1, context {res['context']} tokens "
                 f"(+{res['new_tokens']} generated in the whole-round runs), cache slots {res['max_length']}")
    lines = ["| method / budget | draft ms | tree ms | verify ms | walk+commit ms | sum of parts ms "
             "| whole round ms (real loop, oracle) | sum / whole | t_round / t_AR-step |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
      name = "ar" if r["method"] == "ar" else f"{r['method']} {r['budget']}"
      lines.append(f"| {name} | {r['draft_ms']:.3f} | {r['tree_ms']:.3f} | {r['verify_ms']:.3f} "
                   f"| {r['walk_commit_ms']:.3f} | {r['sum_ms']:.3f} | {r['round_ms']:.3f} "
                   f"| {r['sum_ms'] / r['round_ms']:.2f} | {r['ratio_to_ar']:.2f} |")
    parts.append("\n".join(lines))
    parts.append("tree build alone (one jitted head_tree call, incl. dispatch): " + "; ".join(
        f"{k}: {v['ms']:.2f} ms ({v['lowered_as']})" for k, v in res["tree_topk"].items()))
    am = res["argmax"]
    parts.append(f"argmax over logits {am['shape']} (fp32): jnp.argmax {am['argmax']:.2f} ms, "
                 f"jnp.max {am['max']:.2f} ms")
  return "\n\n".join(parts)


SPLIT_NOTES = """
Phases: each its own jitted program (a fori_loop of R iterations on the state after the prompt, ms =
(T(R) - T(0)) / R, R sized to ~25 ms a call). draft = context projection of 16 pending rows + head
pass + lm_head logits and log_softmax for the 15 offsets (the same program for chain and every
budget); tree = the drafter's tree (block.head_tree); verify = target forward over N + 1 rows + fp32 logits + taps;
walk+commit = argmax choice, walk, commit_kv, feature gather, root entropy, output writes. Whole
round = loop.decode_rounds (the jitted while_loop generate() runs) from the prefilled state / its
rounds, with the oracle drafter (every round accepts 15; the oracle adds a one_hot and a second
log_softmax over [15, V] to the draft, not counted in the parts). The rest of the whole round is the
loop's bookkeeping (stop checks, masked copies of the output and history buffers, per-round records).
t_round / t_AR-step is the tau a method needs to break even with AR on this machine.
tree build alone: head_tree jitted on its own as written, and with lax.top_k's outputs behind an
optimization_barrier (scoped to this benchmark): which lowering XLA CPU chose is in brackets.
argmax: sampling.choose's jnp.argmax over the verify logits vs a plain max over the same array."""
