"""Decoding report on CPU: bf16 output audit, per-round time split, batch scaling.

    cd /work/main && /work/venv/bin/python benchmarks/decode_report.py [--quick] [--json OUT] \
        [--sections audit,split,batch]

Everything runs on random "lively" weights (glance_jax.testing.random_weights.lively: every matrix
N(0, 1/fan_in), norms around 1), so the targets write varied text and the random heads accept little.
Ratios are only ever taken between figures measured in the same run; repeats are interleaved across
the things compared and the median is reported (the machine is shared and noisy).

1. audit (bf16, the paper's audit). The tiny lively target and a lively 2-layer head of
   tests/decode_fixtures, made directly in bf16 (`lively` redraws each leaf from its shape in the
   leaf's dtype, so it is applied to the abstract bf16 state: the fixture's weights, rounded). Prompts from
   tests/decode_fixtures.batch: half text-only, half with one image. Per prompt, at temperature 0
   and with no stop token (every output has exactly max_new tokens):
     AR-b4   generate(method="ar") on the prompt inside a batch of 4, padded to 28 slots;
     AR-b1   generate(method="ar") on the prompt alone, padded to 32 slots (another batch size,
             another padding, another cache length: the "second AR run");
     G-15/63 generate(method="glance", budget=15 / 63) in the same batches of 4 as AR-b4.
   Reported: the fraction of prompts whose whole output is identical for each pair, the first
   divergence position when not, and the top-1/top-2 logit gap of a teacher-forced bf16 forward
   over AR-b4's output (how close the argmax is to a tie where runs diverge). The same audit in fp32
   is the control.
2. split. Per-round time of each phase, each phase its own jitted function, on the state after a
   ~300-token prompt, batch 1. Each phase runs R times inside one jitted fori_loop (caches carried
   and updated in place, as in the decode loop; the phase's inputs pass through an
   optimization_barrier tied to the loop counter so XLA cannot hoist them out of the loop), and the
   figure is (T(R) - T(0)) / R (R is a traced count: one program, dispatch cancels out):
     draft        head.project_context + head.context_kv of the C pending feature rows, written
                  into the head's context cache; target.embed of [root, MASK x L]; the head pass
                  (head.__call__ with glance_jax.head.model.block_mask); target.logits + log_softmax over V;
     tree         drafters.head_tree (build_tree vmapped over the batch; argmax chain for `chain`);
     verify       the target's __call__ over [root, N nodes] with the ancestor mask against the
                  cache + target.logits for the N + 1 rows + the tapped features;
     walk+commit  sampling.choose (argmax), verify.walk, verify.commit_kv, the accepted rows'
                  features gathered for the next draft, the root entropy, out/history writes.
   The whole round is measured through the real loop: loop.decode_rounds (the jitted while_loop
   generate() runs) from the prefilled state, with the oracle drafter (oracle_tokens = AR's own
   continuation, so every round accepts L = 15); ms/round = its time / its rounds, with the same
   cache size as the phases. t_round / t_AR is the break-even tau: the tokens per round a method
   needs to match AR. Two diagnostics follow each table: the tree builder alone as written and with
   lax.top_k kept as XLA's TopK call, and jnp.argmax vs jnp.max over [N + 1, V] logits.
3. batch. tokens/s of ar and glance (budget 15, 63) for the same 8 prompts (with images) run in
   chunks of batch 1, 2, 4, 8 (fp32 tiny target, end-to-end generate() time, compile excluded);
   every row must equal its batch-1 AR output. glance with the oracle drafter shows the scaling
   at full acceptance.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import pathlib
import shlex
import statistics
import sys
import time
import types

if __package__ in (None, ""):  # run as `python benchmarks/decode_report.py`
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from glance_jax.config import Qwen3VLConfig, tiny_config  # noqa: E402
from glance_jax.decode import drafters, loop  # noqa: E402
from glance_jax.decode.generate import Head, generate  # noqa: E402
from glance_jax.decode.sampling import choose, entropy  # noqa: E402
from glance_jax.decode.verify import commit_kv, walk  # noqa: E402
from glance_jax.head.config import HeadConfig  # noqa: E402
from glance_jax.head.model import abstract_head, block_mask  # noqa: E402
from glance_jax.qwen3_vl.cache import KVCache, write_rows  # noqa: E402
from glance_jax.qwen3_vl.positions import get_rope_index  # noqa: E402
from glance_jax.qwen3_vl.processor import ImageProcessor  # noqa: E402
from glance_jax.qwen3_vl.target import Target  # noqa: E402
from glance_jax.qwen3_vl.weights import abstract_model  # noqa: E402
from glance_jax.testing.random_weights import lively  # noqa: E402
from tests import decode_fixtures as fx  # noqa: E402
from tests import oracle  # noqa: E402

SECTIONS = ("audit", "split", "batch")


def _size_config(name: str) -> Qwen3VLConfig:
  if name == "tiny":        # the decode tests' target (tests/oracle.CONFIG_A)
    return tiny_config()
  if name == "small":       # text 256 / 4 layers / 4 heads / 2 kv / hd 64 / 768 / vocab 32000; vision 2 / 64
    return tiny_config(vocab_size=32000, hidden=256, layers=4, heads=4, kv_heads=2, head_dim=64,
                       intermediate=768, vision_depth=2, vision_hidden=64, vision_heads=4,
                       vision_intermediate=256, num_position_embeddings=256, deepstack=(0, 1))
  if name == "micro":       # for the smoke test only: one layer compiles fastest
    return tiny_config(layers=1, vision_depth=1, deepstack=(0,))
  raise ValueError(f"unknown size {name!r}")


def make_target(cfg: Qwen3VLConfig, seed: int, dtype=jnp.float32) -> Target:
  """= tests/decode_fixtures.lively_target (Target.random, then `lively`) in `dtype`. `lively` redraws
  every leaf from its shape and dtype alone, so it is applied to the abstract state: the same
  weights without compiling the random initialiser (~15 s on this CPU)."""
  graphdef, abstract = abstract_model(cfg, dtype)
  return Target(cfg, graphdef, lively(abstract, seed), dtype)


def make_head(target: Target, seed: int, num_layers: int = 2, dtype=jnp.float32) -> Head:
  """= tests/decode_fixtures.lively_head (init_head, then `lively` with seed + 100) in `dtype`."""
  hc = HeadConfig.for_target(target.config, num_layers=num_layers)
  graphdef, abstract = abstract_head(hc, dtype)
  return Head(hc, graphdef, lively(abstract, seed + 100))


def _median(xs):
  return float(statistics.median(xs)) if xs else float("nan")


def _log(msg: str):
  print(msg, flush=True)


# --- prompts ---------------------------------------------------------------------------------------

def take_rows(b, rows, pad_to: int | None = None):
  """Rows of a right-padded fixture batch (one image per row or none), optionally re-padded."""
  rows = list(rows)
  ids, mask = np.asarray(b.input_ids)[rows], np.asarray(b.attention_mask)[rows]
  pv = grid = None
  if b.pixel_values is not None:
    g = np.asarray(b.image_grid_thw)
    starts = np.concatenate([[0], np.cumsum(g.prod(-1))])
    pv = np.concatenate([np.asarray(b.pixel_values)[starts[r]:starts[r + 1]] for r in rows])
    grid = g[rows]
  if pad_to is not None:
    width = max(pad_to, int(mask.sum(-1).max()))
    ids = np.pad(ids[:, : width], ((0, 0), (0, max(0, width - ids.shape[1]))))
    mask = np.pad(mask[:, : width], ((0, 0), (0, max(0, width - mask.shape[1]))))
  cfg_ids = b.cfg_ids
  pos, delta = get_rope_index(ids, mask, grid, None, image_token_id=cfg_ids[0], video_token_id=cfg_ids[1])
  return types.SimpleNamespace(input_ids=ids, attention_mask=mask, positions=pos, rope_delta=delta,
                               pixel_values=pv, image_grid_thw=grid, cfg_ids=cfg_ids)


def fixture_batch(cfg, seed, rows, with_images, max_len=28):
  b = fx.batch(cfg, seed=seed, rows=rows, with_images=with_images, max_len=max_len)
  b.cfg_ids = (cfg.image_token_id, cfg.video_token_id)
  return b


def long_prompt(cfg: Qwen3VLConfig, length: int, seed: int = 0, image: bool = True,
                image_size: tuple[int, int] = (64, 96)):
  """One row of `length` tokens: random text around one image (height, width; 64x96 = 6 merged
  tokens, 448x448 = 196), or text only."""
  rng = np.random.default_rng(seed)
  pv = grid = None
  n_img = 0
  if image:
    pv, grid = ImageProcessor(min_pixels=32 * 32)(oracle.random_images(seed, [tuple(image_size)]))
    n_img = int(np.prod(grid[0])) // cfg.vision.spatial_merge_size**2
  if image and length < n_img + 3:
    raise ValueError(f"a {length}-token prompt cannot hold a {n_img}-token image and some text")
  text = rng.integers(0, cfg.text.vocab_size - 16, length - (n_img + 2 if image else 0)).tolist()
  cut = len(text) // 4
  img = [cfg.vision_start_token_id] + [cfg.image_token_id] * n_img + [cfg.vision_end_token_id] if image else []
  ids = np.asarray([text[:cut] + img + text[cut:]], np.int64)
  mask = np.ones_like(ids, bool)
  pos, delta = get_rope_index(ids, mask, grid, None, image_token_id=cfg.image_token_id,
                              video_token_id=cfg.video_token_id)
  return types.SimpleNamespace(input_ids=ids, attention_mask=mask, positions=pos, rope_delta=delta,
                               pixel_values=pv, image_grid_thw=grid,
                               cfg_ids=(cfg.image_token_id, cfg.video_token_id))


def _first_divergence(a: np.ndarray, b: np.ndarray) -> int | None:
  n = min(len(a), len(b))
  diff = np.nonzero(a[:n] != b[:n])[0]
  if diff.size:
    return int(diff[0])
  return None if len(a) == len(b) else n


# --- 1. bf16 audit ---------------------------------------------------------------------------------

def _teacher_forced_gaps(target: Target, b, outs: list[np.ndarray]):
  """The prompt (prefill), then AR's output[:-1] in ONE causal block forward (forward_block, as a
  chain verify would) -> (top-1 minus top-2 logit at each emitted position [rows, M], whether this
  forward's argmax equals the emitted token [rows, M])."""
  outs = np.stack(outs).astype(np.int32)                                 # [B, M]
  rows, m = outs.shape
  width = np.asarray(b.input_ids).shape[1]
  cache = target.init_cache(rows, width + m + 1)
  pre = target.prefill(b, cache, logits_at="last")
  start = np.asarray(pre.cache.length) + np.asarray(b.rope_delta)
  pos = (start[:, None] + np.arange(m - 1)[None]).astype(np.int32)
  mask = np.broadcast_to(np.tril(np.ones((m - 1, m - 1), bool)), (rows, m - 1, m - 1))
  blk = target.forward_block(outs[:, :-1], pos, mask, pre.cache)
  logits = np.concatenate([np.asarray(pre.logits), np.asarray(blk.logits)], axis=1)  # [B, M, V]
  top2 = np.sort(logits, axis=-1)[..., -2:]
  return top2[..., 1] - top2[..., 0], logits.argmax(-1) == outs


def audit(*, size: str = "tiny", dtypes=("bfloat16", "float32"), num_prompts: int = 40, max_new: int = 128,
          budgets=(15, 63), head_layers: int = 2, seed: int = 11, gaps: bool = True, log=_log) -> dict:
  cfg = _size_config(size)
  n_batches = max(1, -(-num_prompts // 4))
  results = {}
  for dname in dtypes:
    dtype = jnp.dtype(dname)
    t0 = time.perf_counter()
    target = make_target(cfg, seed, dtype)
    head = make_head(target, seed + 1, head_layers, dtype)
    runs = {k: [] for k in ["ar_b4", "ar_b1"] + [f"glance{n}" for n in budgets]}
    tau = {f"glance{n}": [] for n in budgets}
    gap_all, gap_div, agree_all = [], [], []
    for s in range(n_batches):
      b = fixture_batch(cfg, seed=100 + s, rows=4, with_images=s % 2 == 1)
      ref = generate(target, b, method="ar", max_new_tokens=max_new, stop_tokens=())
      runs["ar_b4"] += [np.asarray(t) for t in ref.tokens]
      for r in range(4):
        one = take_rows(b, [r], pad_to=32)
        runs["ar_b1"].append(np.asarray(generate(target, one, method="ar", max_new_tokens=max_new,
                                                 stop_tokens=()).tokens[0]))
      for n in budgets:
        res = generate(target, b, head=head, method="glance", budget=n, max_new_tokens=max_new, stop_tokens=())
        runs[f"glance{n}"] += [np.asarray(t) for t in res.tokens]
        tau[f"glance{n}"].append(res.tau)
      if gaps:
        g, a = _teacher_forced_gaps(target, b, [np.asarray(t) for t in ref.tokens])
        gap_all.append(g.reshape(-1))
        agree_all.append(a.reshape(-1))
        for r in range(4):  # gap where some other run first departs from AR-b4 on this row
          i = 4 * s + r
          for k in runs:
            if k != "ar_b4":
              d = _first_divergence(runs[k][i], runs["ar_b4"][i])
              if d is not None and d < g.shape[1]:
                gap_div.append(float(g[r, d]))
    pairs = {}
    names = [(f"glance{n}", "ar_b4") for n in budgets] + [("ar_b1", "ar_b4")] + \
            [(f"glance{n}", "ar_b1") for n in budgets] + \
            [(f"glance{a}", f"glance{b}") for a, b in zip(budgets[:-1], budgets[1:])]
    for a, bname in names:
      divs = [_first_divergence(x, y) for x, y in zip(runs[a][:num_prompts], runs[bname][:num_prompts])]
      diff = [d for d in divs if d is not None]
      pairs[f"{a} vs {bname}"] = dict(identical=len(divs) - len(diff), prompts=len(divs),
                                      identical_frac=(len(divs) - len(diff)) / len(divs),
                                      mean_first_divergence=float(np.mean(diff)) if diff else None,
                                      first_divergences=diff)
    entry = dict(dtype=dname, prompts=min(num_prompts, 4 * n_batches), max_new_tokens=max_new,
                 pairs=pairs, tau={k: float(np.mean(v)) for k, v in tau.items()},
                 seconds=time.perf_counter() - t0)
    if gaps:
      ga = np.concatenate(gap_all)
      entry["gap"] = dict(median_all=float(np.median(ga)), p5_all=float(np.percentile(ga, 5)),
                          frac_below_0_05=float(np.mean(ga < 0.05)),
                          at_divergence=gap_div,
                          teacher_forced_agrees_with_ar=float(np.mean(np.concatenate(agree_all))))
    results[dname] = entry
    log(f"[audit {dname}] {entry['prompts']} prompts x {max_new} tokens in {entry['seconds']:.0f}s: " +
        ", ".join(f"{k}: {v['identical']}/{v['prompts']}" for k, v in pairs.items()))
  return dict(size=size, head_layers=head_layers, budgets=list(budgets), results=results)


def audit_table(a: dict) -> str:
  lines = ["| dtype | pair | identical outputs | fraction | mean first divergence (when differing) |",
           "|---|---|---|---|---|"]
  for dname, e in a["results"].items():
    for k, p in e["pairs"].items():
      md = "-" if p["mean_first_divergence"] is None else \
          f"{p['mean_first_divergence']:.1f} (n={len(p['first_divergences'])})"
      lines.append(f"| {dname} | {k} | {p['identical']}/{p['prompts']} | {p['identical_frac']:.3f} | {md} |")
  extra = []
  for dname, e in a["results"].items():
    s = f"{dname}: tau " + ", ".join(f"{k} {v:.2f}" for k, v in e["tau"].items())
    if "gap" in e:
      g = e["gap"]
      div = g["at_divergence"]
      s += (f"; teacher-forced top1-top2 logit gap: median {g['median_all']:.3f}, 5th pct {g['p5_all']:.3f}, "
            f"{100 * g['frac_below_0_05']:.1f}% of steps < 0.05"
            + (f"; at divergences: median {np.median(div):.4f} (n={len(div)})" if div else "")
            + "; one-pass teacher-forced argmax == AR token at "
            + f"{100 * g['teacher_forced_agrees_with_ar']:.2f}% of steps")
    extra.append(s)
  return "\n".join(lines) + "\n\n" + "\n".join(extra)


AUDIT_NOTES = """\
Why bf16 can break exact equality while fp32 does not (in our tests): GLANCE is lossless in exact
arithmetic, i.e. it commits exactly the argmax of the target's logits for the committed prefix. But
those logits are computed by a different program than AR's: the tree verify runs N + 1 query rows in
one pass (ancestor mask, K/V written N + 1 rows at a time), AR runs one row per step; every matmul
and attention reduction has another shape, so XLA picks other kernels / accumulation orders (a
one-row matrix-vector product is not blocked like a many-row matmul), and in bf16 every op's output
is rounded to 8 mantissa bits, so a last-bit difference in an accumulation becomes a whole bf16 ulp
(2^-8 relative) whenever it crosses a rounding boundary. Another batch size or padding changes AR's
own shapes the same way (AR-b1 vs AR-b4). The hidden states then differ in their last bits, and
wherever the target's top-2 logits are within that noise (an argmax near-tie; see the gap
at the divergences above, against the median gap) the greedy token flips, and from there on the
two outputs are different texts (each one the target's greedy output under its own rounding). fp32
has the same mechanism with ~2^16 times smaller noise, so flips need far closer ties and did not
occur here. The paper's audit therefore reads GLANCE-vs-AR against AR-vs-AR."""


def audit_summary(a: dict) -> str:
  lines = []
  b = a["budgets"]
  for dname, e in a["results"].items():
    p = e["pairs"]
    g = ", ".join(f"GLANCE-{n} == AR-b4 on {p[f'glance{n} vs ar_b4']['identical']}/{e['prompts']}" for n in b)
    lines.append(f"{dname}: {g}; AR-b1 == AR-b4 on {p['ar_b1 vs ar_b4']['identical']}/{e['prompts']}.")
  return "\n".join(lines)


# --- 2. per-round time split -------------------------------------------------------------------------

def _barrier(i, tree):
  """Ties `tree` to the loop counter: XLA cannot hoist work on it out of the fori_loop."""
  _, tree = jax.lax.optimization_barrier((i, tree))
  return tree


@functools.partial(jax.jit, static_argnames=("tgd", "hgd", "cfg"), donate_argnames=("carry",))
def _draft_phase(tgd, tparams, hgd, hparams, inp, carry, *, cfg: loop.LoopConfig, reps: int):
  target, head = nnx.merge(tgd, tparams), nnx.merge(hgd, hparams)

  def body(i, c):
    head_k, head_v, _ = c
    x = _barrier(i, inp)
    ctx = head.project_context(x["pending"])                               # [B, C, H]
    k, v = head.context_kv(ctx, loop._text_positions(x["ctx_len"] + x["rope_delta"], jnp.arange(cfg.depth + 1)))
    head_k = tuple(write_rows(buf, y, x["ctx_len"]) for buf, y in zip(head_k, k))
    head_v = tuple(write_rows(buf, y, x["ctx_len"]) for buf, y in zip(head_v, v))
    ctx_len = x["ctx_len"] + x["n_pending"]
    b = x["root"].shape[0]
    blk = jnp.concatenate([x["root"][:, None], jnp.full((b, cfg.depth), cfg.mask_token_id, jnp.int32)], 1)
    pos = loop._text_positions(x["cache_len"] + x["rope_delta"], jnp.arange(cfg.block_size))
    hidden = head(target.embed(blk), pos, head_k, head_v, block_mask(ctx_len, head_k[0].shape[1], cfg.block_size))
    log_q = jax.nn.log_softmax(target.logits(hidden[:, 1:]), axis=-1)    # [B, L, V]
    return head_k, head_v, log_q

  return jax.lax.fori_loop(0, reps, body, carry)


@functools.partial(jax.jit, static_argnames=("cfg",), donate_argnames=("carry",))
def _tree_phase(log_q, carry, *, cfg: loop.LoopConfig, reps: int):
  def body(i, _):
    return drafters.head_tree(_barrier(i, log_q), cfg.method, cfg.budget)
  return jax.lax.fori_loop(0, reps, body, carry)


@functools.partial(jax.jit, static_argnames=("tgd", "cfg"), donate_argnames=("carry",))
def _verify_phase(tgd, tparams, inp, carry, *, cfg: loop.LoopConfig, reps: int):
  target = nnx.merge(tgd, tparams)
  taps = cfg.tap_layers if cfg.uses_head else ()

  def body(i, c):
    ks, vs, _, feats = c
    x = _barrier(i, inp)
    cache = KVCache(k=ks, v=vs, length=x["cache_len"])
    h, cache, tapped = target(x["ids"], x["pos"], cache, x["mask"], tap_layers=taps)
    logits = target.logits(h)                                              # [B, R, V] fp32
    if taps:
      feats = loop._feats(tapped, taps)
    return cache.k, cache.v, logits, feats

  return jax.lax.fori_loop(0, reps, body, carry)


@functools.partial(jax.jit, static_argnames=("cfg",), donate_argnames=("carry",))
def _walk_phase(inp, carry, *, cfg: loop.LoopConfig, reps: int):
  def body(i, c):
    ks, vs, _, out, history, _ = c
    x = _barrier(i, inp)
    choice = choose(x["logits"], x["key"], cfg.sampling)
    res = walk(x["tree"], choice, cfg.depth if cfg.num_nodes else 0)
    cache = commit_kv(KVCache(k=ks, v=vs, length=x["cache_len"]), res.commit_rows, res.accepted + 1)
    pending = jnp.take_along_axis(x["feats"], res.commit_rows[:, :, None], axis=1)
    out = write_rows(out[..., None], res.new_tokens[..., None], x["count"])[..., 0]
    history = write_rows(history[..., None], res.new_tokens[..., None], x["cache_len"] + 1)[..., 0]
    return cache.k, cache.v, pending, out, history, entropy(x["logits"][:, 0])

  return jax.lax.fori_loop(0, reps, body, carry)


class _Timed:
  """A phase: a jitted fori_loop over `reps` (a traced count, so one compile serves 0 and R).

  call() -> seconds per iteration = (T(R iterations) - T(0 iterations)) / R: the call's dispatch
  and argument handling cancel out.
  """

  def __init__(self, fn, args, carry, reps):
    # committed like the outputs it will be replaced by, so that the second call does not recompile
    self.fn, self.args, self.carry, self.reps = fn, args, jax.device_put(carry, jax.devices()[0]), reps

  def _run(self, reps: int) -> float:
    r = jnp.int32(reps)
    t0 = time.perf_counter()
    self.carry = self.fn(*self.args, self.carry, reps=r)
    jax.block_until_ready(self.carry)
    return time.perf_counter() - t0

  def call(self) -> float:
    t_zero = self._run(0)
    t_full = self._run(self.reps)
    t_zero = min(t_zero, self._run(0))           # noise only ever adds time
    return max(t_full - t_zero, 0.0) / self.reps


def _loop_cfg(target: Target, head: Head, method: str, budget: int, max_new: int, oracle_on=False):
  if method in ("chain", "glance"):
    hc = head.config
    return loop.LoopConfig(method=method, budget=budget if method == "glance" else min(budget, hc.block_size - 1),
                           max_new_tokens=max_new, block_size=hc.block_size,
                           tap_layers=tuple(hc.target_layer_ids), mask_token_id=hc.mask_token_id,
                           oracle=oracle_on)
  return loop.LoopConfig(method="ar", budget=1, max_new_tokens=max_new, block_size=head.config.block_size)


def _draft_timed(target: Target, head: Head, st, reps: int, seed: int) -> _Timed:
  """The draft phase on `st`. It does not depend on the method or the budget (one head pass over the
  block whatever tree is built from it), so one program serves chain and every glance budget."""
  hc = head.config
  cfg = loop.LoopConfig(method="glance", budget=1, max_new_tokens=8, block_size=hc.block_size,
                        tap_layers=tuple(hc.target_layer_ids), mask_token_id=hc.mask_token_id)
  b, c = st.root.shape[0], cfg.depth + 1
  f = len(cfg.tap_layers) * target.config.text.hidden_size
  pending = jax.random.normal(jax.random.key(seed), (b, c, f), jnp.float32).astype(target.dtype)
  inp = dict(pending=pending, ctx_len=st.ctx_len, n_pending=jnp.full((b,), c, jnp.int32), root=st.root,
             cache_len=st.cache.length, rope_delta=st.rope_delta)
  carry = (tuple(jnp.copy(x) for x in st.head_k), tuple(jnp.copy(x) for x in st.head_v),
           jnp.zeros((b, cfg.depth, target.config.text.vocab_size), jnp.float32))
  return _Timed(functools.partial(_draft_phase, target.graphdef, target.params, head.graphdef, head.params, inp,
                                  cfg=cfg), (), carry, reps)


def _phase_set(target: Target, head: Head, st, method: str, budget: int, reps: int, log_q_real, seed: int):
  """The timed tree / verify / walk+commit phases of one method on the state `st` (from
  loop.prefill_state); `log_q_real` is a head output on that state (the tree phase sorts it)."""
  tgd, tp = target.graphdef, target.params
  cfg = _loop_cfg(target, head, method, budget, 8)
  b = st.root.shape[0]
  phases = {}
  key = jax.random.key(seed)
  if cfg.uses_head:
    tree = drafters.head_tree(log_q_real, cfg.method, cfg.budget)
    phases["tree"] = _Timed(functools.partial(_tree_phase, log_q_real, cfg=cfg), (), jax.tree.map(jnp.copy, tree), reps)
  else:
    tree = drafters.empty_tree(b)
  n = cfg.num_nodes
  ids = jnp.concatenate([st.root[:, None], tree.tokens], axis=1)
  depth = jnp.concatenate([jnp.zeros((b, 1), jnp.int32), tree.depths], axis=1)
  vin = dict(ids=ids, pos=loop._text_positions(st.cache.length + st.rope_delta, depth), mask=tree.ancestor_mask,
             cache_len=st.cache.length)
  v = target.config.text.vocab_size
  fdim = len(cfg.tap_layers) * target.config.text.hidden_size if cfg.uses_head else 1
  vcarry = (tuple(jnp.copy(x) for x in st.cache.k), tuple(jnp.copy(x) for x in st.cache.v),
            jnp.zeros((b, n + 1, v), jnp.float32), jnp.zeros((b, n + 1, fdim), target.dtype))
  phases["verify"] = _Timed(functools.partial(_verify_phase, tgd, tp, vin, cfg=cfg), (), vcarry, reps)
  phases["verify"]._run(1)                                                # real logits and features
  _, _, logits, feats = phases["verify"].carry
  if not cfg.uses_head:  # ar: a one-row "tree"
    feats = jnp.zeros((b, n + 1, 1), target.dtype)
  logits, feats = jnp.copy(logits), jnp.copy(feats)       # the verify carry is donated on every call
  win = dict(logits=logits, key=key, tree=tree, feats=feats, cache_len=st.cache.length, count=jnp.ones((b,), jnp.int32))
  c = (cfg.depth if n else 0) + 1                                         # commit rows C
  out = jnp.zeros((b, 256 + cfg.depth + 1), jnp.int32)
  wcarry = (tuple(jnp.copy(x) for x in st.cache.k), tuple(jnp.copy(x) for x in st.cache.v),
            jnp.zeros((b, c, feats.shape[-1]), feats.dtype), out, jnp.copy(st.history), jnp.zeros((b,), jnp.float32))
  phases["walk+commit"] = _Timed(functools.partial(_walk_phase, win, cfg=cfg), (), wcarry, reps)
  return phases


def _prefill(target: Target, head: Head | None, prompt, cfg: loop.LoopConfig, max_length: int, oracle_toks=None):
  """loop.prefill_state on `prompt` (as generate() calls it), with an optional oracle continuation."""
  pv = jnp.asarray(prompt.pixel_values, jnp.float32) if prompt.pixel_values is not None else None
  meta = target.vision_arrays(np.asarray(prompt.image_grid_thw)) if pv is not None else None
  b = prompt.input_ids.shape[0]
  if oracle_toks is None:
    orc = jnp.zeros((b, 0), jnp.int32)
  else:
    o = np.asarray(oracle_toks, np.int32)
    orc = jnp.asarray(np.pad(o, ((0, 0), (0, max(0, cfg.max_new_tokens + cfg.block_size - o.shape[1])))))
  hgd, hp = (head.graphdef, head.params) if cfg.uses_head else (None, None)
  return loop.prefill_state(target.graphdef, target.params, hgd, hp,
                            jnp.asarray(prompt.input_ids, jnp.int32), jnp.asarray(prompt.attention_mask, bool),
                            jnp.asarray(prompt.positions, jnp.int32), jnp.asarray(prompt.rope_delta, jnp.int32),
                            pv, meta, jnp.asarray([-1], jnp.int32), jax.random.key(0), orc,
                            cfg=cfg, max_length=max_length)


def _whole_run(target: Target, head: Head, st0, cfg: loop.LoopConfig):
  """The real decode loop (loop.decode_rounds, the call generate() makes) from a copy of the
  prefilled state `st0`, timed alone -> (seconds, rounds, tokens of row 0, tau of row 0)."""
  st = jax.block_until_ready(jax.tree.map(jnp.copy, st0))               # decode_rounds donates it
  hgd, hp = (head.graphdef, head.params) if cfg.uses_head else (None, None)
  t0 = time.perf_counter()
  st = loop.decode_rounds(target.graphdef, target.params, hgd, hp, st, jnp.asarray([-1], jnp.int32), cfg=cfg)
  jax.block_until_ready(st)
  dt = time.perf_counter() - t0
  acc = np.asarray(st.rec_accepted[0])
  acc = acc[acc >= 0]
  return dt, int(st.rounds), np.asarray(st.out[0, : int(st.count[0])]), float(np.mean(acc + 1))


def _interleaved_ms(fns: dict, x, repeats: int) -> dict:
  """Median ms of each fn(x) (one warm-up call each first), the fns interleaved in every repeat."""
  for f in fns.values():
    jax.block_until_ready(f(x))
  times = {k: [] for k in fns}
  for _ in range(repeats):
    for k, f in fns.items():
      t0 = time.perf_counter()
      jax.block_until_ready(f(x))
      times[k].append(time.perf_counter() - t0)
  return {k: 1e3 * _median(v) for k, v in times.items()}


def _tree_topk_diag(log_q, budgets, repeats: int = 5) -> dict:
  """head_tree as written vs the same with lax.top_k's outputs behind an optimization_barrier.

  On XLA CPU, build_tree's `lax.top_k` is compiled as a full sort of every [V] row (the `TopK`
  custom call is lost, apparently because a static slice of its output, `top_lq[0, 0]`, is taken);
  a barrier keeps the TopK call. The patch is scoped to this function's own tracing (the library is
  not changed)."""
  orig = jax.lax.top_k
  compiled = {}
  for n in budgets:
    compiled[("as written", n)] = jax.jit(lambda x, n=n: drafters.head_tree(x, "glance", n)).lower(log_q).compile()
    jax.lax.top_k = lambda a, k: jax.lax.optimization_barrier(orig(a, k))
    try:
      compiled[("top_k kept", n)] = jax.jit(lambda x, n=n: drafters.head_tree(x, "glance", n)).lower(log_q).compile()
    finally:
      jax.lax.top_k = orig
  ms = _interleaved_ms(compiled, log_q, repeats)
  out = {}
  for (variant, n), c in compiled.items():
    txt = c.as_text()
    out[f"{variant} {n}"] = dict(ms=ms[(variant, n)],
                                 lowered_as="TopK custom call" if 'custom_call_target="TopK"' in txt else
                                 ("sort" if " sort(" in txt else "other"))
  return out


def split(*, sizes=("tiny", "small"), budgets=(15, 31, 63), context: int = 300, head_layers=None,
          target_ms: float = 25.0, repeats: int = 5, new_tokens: int = 129, chain: bool = True,
          image: bool = True, seed: int = 3, configs: dict | None = None,
          log=_log) -> dict:
  """Per-round phase times (ms) and whole-round times through the real loop, per size.

  target_ms: each timed phase call runs enough iterations to take about this long.
  configs: size name -> Qwen3VLConfig, overriding the names `_size_config` knows (round_cost.py
  passes target_speed's tiny / small / medium)."""
  head_layers = head_layers or {}
  out = []
  for size in sizes:
    t_start = time.perf_counter()
    cfg = (configs or {}).get(size) or _size_config(size)
    target = make_target(cfg, seed)
    head = make_head(target, seed + 1, head_layers.get(size, 2))
    prompt = long_prompt(cfg, context, seed, image)
    out.append(split_size(target, head, prompt, size=size, budgets=budgets, target_ms=target_ms,
                          repeats=repeats, new_tokens=new_tokens, chain=chain, seed=seed, t_start=t_start,
                          log=log))
  return dict(repeats=repeats, results=out)


def split_size(target: Target, head: Head, prompt, *, size: str, budgets=(15, 31, 63), target_ms: float = 25.0,
               repeats: int = 5, new_tokens: int = 129, chain: bool = True, seed: int = 3,
               lossless: bool = True, t_start: float | None = None, log=_log) -> dict:
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
  # state per kind serves every loop: the head methods' states have the same shapes whatever the
  # method and budget (same block size, taps and max_new_tokens); the phases start from it too.
  ar_cfg = _loop_cfg(target, head, "ar", 1, new_tokens)
  st_ar = _prefill(target, head, prompt, ar_cfg, max_length)
  _, _, ref, _ = _whole_run(target, head, st_ar, ar_cfg)
  gcfg = _loop_cfg(target, head, "glance", max_n, new_tokens, oracle_on=True)
  st_head = _prefill(target, head, prompt, gcfg, max_length, ref[None])
  draft = _draft_timed(target, head, st_head, 5, seed)
  draft._run(1)
  log_q = jnp.copy(draft.carry[2])                                      # a real head output on this state
  phases = {(m, n): _phase_set(target, head, st_head, m, n, 5, log_q, seed) for m, n in methods}
  phases[("head", 0)] = {"draft": draft}                                # shared by chain and glance
  same = {}
  loops = {(m, n): _loop_cfg(target, head, m, n, new_tokens, oracle_on=m != "ar") for m, n in methods}

  def whole(m, n):
    dt, rounds, toks, tau = _whole_run(target, head, st_ar if m == "ar" else st_head, loops[(m, n)])
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
  rng = np.random.default_rng(seed)
  for _ in range(repeats):
    for idx in rng.permutation(len(jobs)):
      kind, m, n, ph = jobs[idx]
      if kind == "phase":
        times[jobs[idx]].append(phases[(m, n)][ph].call())
      else:
        dt, rounds, tau = whole(m, n)
        times[jobs[idx]].append(dt / rounds)
        meta[(m, n)] = (rounds, tau)
  rows = []
  for m, n in methods:
    part = {ph: 1e3 * _median(times[("phase", m, n, ph)]) for ph in ("tree", "verify", "walk+commit")
            if ("phase", m, n, ph) in times}
    if m != "ar":
      part["draft"] = 1e3 * _median(times[("phase", "head", 0, "draft")])
    row = dict(method=m, budget=n, draft_ms=part.get("draft", 0.0), tree_ms=part.get("tree", 0.0),
               verify_ms=part["verify"], walk_commit_ms=part["walk+commit"],
               round_ms=1e3 * _median(times[("round", m, n, None)]), rounds=meta[(m, n)][0], tau=meta[(m, n)][1],
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
budget); tree = drafters.head_tree; verify = target forward over N + 1 rows + fp32 logits + taps;
walk+commit = argmax choice, walk, commit_kv, feature gather, root entropy, output writes. Whole
round = loop.decode_rounds (the jitted while_loop generate() runs) from the prefilled state / its
rounds, with the oracle drafter (every round accepts 15; the oracle adds a one_hot and a second
log_softmax over [15, V] to the draft, not counted in the parts). The rest of the whole round is the
loop's bookkeeping (stop checks, masked copies of the output and history buffers, per-round records).
t_round / t_AR-step is the tau a method needs to break even with AR on this machine.
tree build alone: head_tree jitted on its own as written, and with lax.top_k's outputs behind an
optimization_barrier (scoped to this benchmark): which lowering XLA CPU chose is in brackets.
argmax: sampling.choose's jnp.argmax over the verify logits vs a plain max over the same array."""


def _argmax_diag(vocab: int, rows: int = 64, repeats: int = 5) -> dict:
  x = jax.random.normal(jax.random.key(0), (1, rows, vocab), jnp.float32)
  fns = {"argmax": jax.jit(lambda x: jnp.argmax(x, -1)), "max": jax.jit(lambda x: jnp.max(x, -1))}
  return _interleaved_ms(fns, x, repeats) | {"shape": [1, rows, vocab]}


# --- 3. batch scaling -------------------------------------------------------------------------------

def batch_scaling(*, size: str = "tiny", batches=(1, 2, 4, 8), budgets=(15, 63), max_new: int = 64,
                  repeats: int = 3, head_layers: int = 2, with_oracle: bool = True, with_images: bool = True,
                  seed: int = 21,
                  log=_log) -> dict:
  t_start = time.perf_counter()
  cfg = _size_config(size)
  target = make_target(cfg, seed)
  head = make_head(target, seed + 1, head_layers)
  rows_total = max(batches)
  prompts = fixture_batch(cfg, seed=seed, rows=rows_total, with_images=with_images)
  singles = [take_rows(prompts, [r]) for r in range(rows_total)]
  ref = [np.asarray(generate(target, p, method="ar", max_new_tokens=max_new, stop_tokens=()).tokens[0])
         for p in singles]
  oracle_all = np.stack(ref)
  methods = [("ar", 1, False)] + [("glance", n, False) for n in budgets]
  if with_oracle:
    methods.append(("glance", max(budgets), True))
  chunks = {bs: [list(range(i, min(i + bs, rows_total))) for i in range(0, rows_total, bs)] for bs in batches}
  inputs = {bs: [take_rows(prompts, c) for c in chunks[bs]] for bs in batches}

  def run(m, n, use_oracle, bs):
    t0 = time.perf_counter()
    toks, taus, rounds = [], [], 0
    for c, inp in zip(chunks[bs], inputs[bs]):
      kw = dict(head=head, budget=n, oracle_tokens=oracle_all[c] if use_oracle else None) if m != "ar" else {}
      res = generate(target, inp, method=m, max_new_tokens=max_new, stop_tokens=(), **kw)
      toks += [np.asarray(t) for t in res.tokens]
      taus.append(res.tau)
      rounds += int(res.rounds.max())                                     # the loop runs until its last row is done
    dt = time.perf_counter() - t0
    lossless = all(np.array_equal(a, b) for a, b in zip(toks, ref))
    return dt, sum(len(t) for t in toks), lossless, float(np.mean(taus)), rounds

  jobs = [(m, n, o, bs) for m, n, o in methods for bs in batches]
  for j in jobs:
    run(*j)
  log(f"[batch] compiled {len(jobs)} configurations in {time.perf_counter() - t_start:.0f}s")
  times = {j: [] for j in jobs}
  info = {}
  rng = np.random.default_rng(seed)
  for _ in range(repeats):
    for idx in rng.permutation(len(jobs)):
      dt, ntok, ok, tau, rounds = run(*jobs[idx])
      times[jobs[idx]].append(dt)
      info[jobs[idx]] = (ntok, ok, tau, rounds)
  rows = []
  for m, n, o in methods:
    base = None
    for bs in batches:
      ntok, ok, tau, rounds = info[(m, n, o, bs)]
      sec = _median(times[(m, n, o, bs)])
      tps = ntok / sec
      base = base or tps
      rows.append(dict(method=m, budget=n, oracle=o, batch=bs, tokens=ntok, tokens_per_s=tps,
                       relative_to_batch1=tps / base, lossless=ok, tau=tau, loop_rounds=rounds,
                       ms_per_loop_round=1e3 * sec / rounds))
  ar_tps = {r["batch"]: r["tokens_per_s"] for r in rows if r["method"] == "ar"}
  for r in rows:
    r["relative_to_ar_same_batch"] = r["tokens_per_s"] / ar_tps[r["batch"]]
  log(f"[batch] done in {time.perf_counter() - t_start:.0f}s")
  return dict(size=size, prompts=rows_total, with_images=with_images, max_new_tokens=max_new, repeats=repeats,
              rows=rows,
              seconds=time.perf_counter() - t_start)


def batch_table(bt: dict) -> str:
  lines = ["| method | batch | tokens | tokens/s | vs batch 1 | vs AR at this batch | tau | loop rounds (all calls) "
           "| ms / loop round (incl. prefill) | every row == its batch-1 AR |",
           "|---|---|---|---|---|---|---|---|---|---|"]
  for r in bt["rows"]:
    name = "ar" if r["method"] == "ar" else f"glance {r['budget']}" + (" (oracle)" if r["oracle"] else "")
    lines.append(f"| {name} | {r['batch']} | {r['tokens']} | {r['tokens_per_s']:.0f} | {r['relative_to_batch1']:.2f}x "
                 f"| {r['relative_to_ar_same_batch']:.2f}x | {r['tau']:.2f} | {r['loop_rounds']} "
                 f"| {r['ms_per_loop_round']:.3f} | {'yes' if r['lossless'] else 'NO'} |")
  return "\n".join(lines)


BATCH_NOTES = """
The same prompts are run in chunks of the batch size (tokens/s = all tokens / all calls' wall time,
prefill included, compile excluded). A batched call loops until its slowest row is done, so with the
random head (tau ~ 1) a batch runs about max-over-rows rounds. glance (oracle): the head is handed
each row's AR continuation, so every round accepts 15 tokens: the scaling at full acceptance."""


# --- CLI ---------------------------------------------------------------------------------------------

QUICK = dict(
    audit=dict(num_prompts=8, max_new=32),
    split=dict(sizes=("tiny",), repeats=3, new_tokens=65, target_ms=10.0),
    batch=dict(batches=(1, 2, 4), max_new=32, repeats=2),
)


def _command_line(argv) -> list[str]:
  """The command as run (interpreter, script or -m module, arguments); when main() is called from
  Python with `argv`, the equivalent command line."""
  if argv is not None:
    return ["python", "benchmarks/decode_report.py"] + list(argv)
  spec = getattr(sys.modules.get("__main__"), "__spec__", None)
  head = ["-m", spec.name] if spec is not None else [sys.argv[0]]
  return [sys.executable] + head + sys.argv[1:]


def main(argv=None, overrides: dict | None = None) -> dict:
  """Runs the chosen sections and prints their tables. `overrides` (tests): per-section kwargs."""
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--quick", action="store_true", help="smaller settings (a couple of minutes)")
  ap.add_argument("--json", default=None, help="write all results here")
  ap.add_argument("--sections", default=",".join(SECTIONS), help="comma-separated: " + ",".join(SECTIONS))
  args = ap.parse_args(argv)
  sections = [s.strip() for s in args.sections.split(",") if s.strip()]
  for s in sections:
    if s not in SECTIONS:
      ap.error(f"unknown section {s!r}; choose from {', '.join(SECTIONS)}")
  command = _command_line(argv)
  print("$ " + shlex.join(command))
  print(f"jax {jax.__version__} on {jax.devices()[0].platform} ({os.cpu_count()} CPU cores); "
        f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}")
  kw = {s: dict(QUICK[s]) if args.quick else {} for s in SECTIONS}
  for s, o in (overrides or {}).items():
    kw[s].update(o)
  report = dict(command=command, quick=args.quick)
  t0 = time.perf_counter()
  if "audit" in sections:
    a = audit(**kw["audit"])
    report["audit"] = a
    print(f"\n## 1. bf16 audit ({a['size']} target, {next(iter(a['results'].values()))['prompts']} prompts, "
          f"{next(iter(a['results'].values()))['max_new_tokens']} new tokens, greedy, no stop token)\n")
    print("AR-b4: each prompt inside a batch of 4 (padded to 28); AR-b1: the same prompt alone, padded to 32 "
          "(another batch size, padding and cache length); glanceN: GLANCE budget N in the same batches of 4 "
          "as AR-b4.\n")
    print(audit_table(a))
    print()
    print(audit_summary(a))
    print()
    print(AUDIT_NOTES)
  if "split" in sections:
    s = split(**kw["split"])
    report["split"] = s
    print("\n## 2. Per-round time split (CPU, batch 1, ms, medians of interleaved repeats)\n")
    print(split_table(s))
    print(SPLIT_NOTES)
  if "batch" in sections:
    bt = batch_scaling(**kw["batch"])
    report["batch"] = bt
    print(f"\n## 3. Batch scaling ({bt['size']} target fp32, {bt['prompts']} prompts"
          f"{' with an image each' if bt['with_images'] else ' (text only)'}, "
          f"{bt['max_new_tokens']} new tokens each, end-to-end generate() time)\n")
    print(batch_table(bt))
    print(BATCH_NOTES)
  return finish(report, t0, args.json)


def finish(report: dict, t0: float, json_path: str | None, note: str = "") -> dict:
  """Stamps the wall time, prints the total and writes the report as JSON (every benchmark's end)."""
  report["seconds"] = time.perf_counter() - t0
  print(f"\ntotal {report['seconds']:.0f}s{note}")
  if json_path:
    with open(json_path, "w") as f:
      json.dump(report, f, indent=2, default=float)
  return report


if __name__ == "__main__":
  main()
