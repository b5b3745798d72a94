"""Where two runs' greedy outputs first differ and how close the target's choice was there: the bench's
divergence check (a float tie or a fault) and the bf16 audit's analysis (benchmarks/decode_report.py
--sections audit: the teacher-forced top-1 / top-2 logit gap, and the audit's tables)."""

from __future__ import annotations

import numpy as np

from glance_jax.qwen3_vl.target import Target


def first_divergence(a: np.ndarray, b: np.ndarray) -> int | None:
  n = min(len(a), len(b))
  diff = np.nonzero(a[:n] != b[:n])[0]
  if diff.size:
    return int(diff[0])
  return None if len(a) == len(b) else n


# A divergence whose AR step had its top two logits this close, and whose other token was AR's
# runner-up, is a float tie: the one-row step and a many-row verify (other matmul shapes, other
# accumulation orders) round it apart. fp32's ulp at a logit of ~10 is ~1e-6; the testbed's one
# fp32 divergence (v5g lines, held-out 48) had a gap of 1.9e-6 in the step and -7.6e-6 in the pass.
TIE_GAP = 1e-4


def ar_step_choice(target: Target, inputs, ar_tokens: np.ndarray, at: int, max_new_tokens: int):
  """AR's own one-row steps (prefill, then ar_tokens[:at] one at a time, as generate(method="ar")
  runs them) -> (top-2 token ids [2], top-1 minus top-2 logit) of the logits that chose slot `at`
  for the first row of `inputs`."""
  ids = np.asarray(inputs.input_ids)
  cache = target.init_cache(ids.shape[0], ids.shape[1] + max_new_tokens + 1)   # generate_ar's length
  out = target.prefill(inputs, cache, logits_at="last")
  logits, cache = out.logits[:, -1], out.cache
  for t in range(at):
    out = target.decode(np.asarray(ar_tokens[t:t + 1], np.int32), cache, inputs.rope_delta)
    logits, cache = out.logits[:, -1], out.cache
  row = np.asarray(logits[0], np.float64)
  top = np.argsort(-row, kind="stable")[:2]
  return top, float(row[top[0]] - row[top[1]])


def divergences(target: Target, inputs_by_id: dict, ar_by_id: dict, tokens_by_id: dict, *,
                max_new_tokens: int, tie_gap: float = TIE_GAP, cache: dict | None = None) -> list[dict]:
  """Per prompt id whose tokens differ from AR's: where (`at`), AR's token and the other, AR's step
  gap there and `tie` (the other token is AR's runner-up and the gap <= tie_gap). `cache` (id, at) ->
  (top2, gap) is shared across methods, which often leave AR at the same slot."""
  cache = {} if cache is None else cache
  out = []
  for pid, toks in tokens_by_id.items():
    ar = np.asarray(ar_by_id[pid])
    toks = np.asarray(toks)
    at = first_divergence(ar, toks)
    if at is None:
      continue
    if (pid, at) not in cache:
      cache[(pid, at)] = ar_step_choice(target, inputs_by_id[pid], ar, at, max_new_tokens)
    top, gap = cache[(pid, at)]
    other = int(toks[at]) if at < len(toks) else -1          # -1: the other run stopped here
    mine = int(ar[at]) if at < len(ar) else -1
    out.append({"id": pid, "at": at, "ar_token": mine, "token": other, "gap": gap,
                "tie": bool(gap <= tie_gap and other == int(top[1]) and mine == int(top[0]))})
  return out


def teacher_forced_gaps(target: Target, b, outs: list[np.ndarray]):
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
