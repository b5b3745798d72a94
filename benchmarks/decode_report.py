"""Decoding report on CPU: bf16 output audit, per-round time split, batch scaling.

    python benchmarks/decode_report.py [--quick] [--json OUT] \
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
import os
import pathlib
import shlex
import sys
import time

if __package__ in (None, ""):  # run as `python benchmarks/decode_report.py`
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from glance_jax.bench.audit import (AUDIT_NOTES, audit_summary, audit_table,  # noqa: E402
                                    first_divergence, teacher_forced_gaps)
from glance_jax.bench.random_models import make_head, make_target, size_config, take_rows  # noqa: E402
from glance_jax.bench.round_split import SPLIT_NOTES, split, split_table  # noqa: E402
from glance_jax.bench.timing import command_line, finish, interleaved, median  # noqa: E402
from glance_jax.bench.engine import generate  # noqa: E402
from tests import decode_fixtures as fx  # noqa: E402

SECTIONS = ("audit", "split", "batch")


def _log(msg: str):
  print(msg, flush=True)


# --- prompts ---------------------------------------------------------------------------------------


def fixture_batch(cfg, seed, rows, with_images, max_len=28):
  b = fx.batch(cfg, seed=seed, rows=rows, with_images=with_images, max_len=max_len)
  b.cfg_ids = (cfg.image_token_id, cfg.video_token_id)
  return b


# --- 1. bf16 audit ---------------------------------------------------------------------------------


def audit(*, size: str = "tiny", dtypes=("bfloat16", "float32"), num_prompts: int = 40, max_new: int = 128,
          budgets=(15, 63), head_layers: int = 2, seed: int = 11, gaps: bool = True, log=_log) -> dict:
  cfg = size_config(size)
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
        g, a = teacher_forced_gaps(target, b, [np.asarray(t) for t in ref.tokens])
        gap_all.append(g.reshape(-1))
        agree_all.append(a.reshape(-1))
        for r in range(4):  # gap where some other run first departs from AR-b4 on this row
          i = 4 * s + r
          for k in runs:
            if k != "ar_b4":
              d = first_divergence(runs[k][i], runs["ar_b4"][i])
              if d is not None and d < g.shape[1]:
                gap_div.append(float(g[r, d]))
    pairs = {}
    names = [(f"glance{n}", "ar_b4") for n in budgets] + [("ar_b1", "ar_b4")] + \
            [(f"glance{n}", "ar_b1") for n in budgets] + \
            [(f"glance{a}", f"glance{b}") for a, b in zip(budgets[:-1], budgets[1:])]
    for a, bname in names:
      divs = [first_divergence(x, y) for x, y in zip(runs[a][:num_prompts], runs[bname][:num_prompts])]
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


# --- 2. per-round time split -------------------------------------------------------------------------


# --- 3. batch scaling -------------------------------------------------------------------------------

def batch_scaling(*, size: str = "tiny", batches=(1, 2, 4, 8), budgets=(15, 63), max_new: int = 64,
                  repeats: int = 3, head_layers: int = 2, with_oracle: bool = True, with_images: bool = True,
                  seed: int = 21,
                  log=_log) -> dict:
  t_start = time.perf_counter()
  cfg = size_config(size)
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
  for job in interleaved(jobs, repeats, seed):
    dt, ntok, ok, tau, rounds = run(*job)
    times[job].append(dt)
    info[job] = (ntok, ok, tau, rounds)
  rows = []
  for m, n, o in methods:
    base = None
    for bs in batches:
      ntok, ok, tau, rounds = info[(m, n, o, bs)]
      sec = median(times[(m, n, o, bs)])
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
  command = command_line(argv, "benchmarks/decode_report.py")
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


if __name__ == "__main__":
  main()
