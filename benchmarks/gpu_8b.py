"""The cost of a round at the real Qwen3-VL-8B size on one accelerator (bf16, random weights).

    python benchmarks/gpu_8b.py --json gpu_8b.json [--taus bench.json | --taus 15:3.1,31:3.4,63:3.6]

How to run it on a GPU (one device; the 8B target in bf16 is 17.5 GB and the 5-layer head ~2 GB,
so any 40 GB+ card fits. On an H200 (docs/gpu.md): target and head initialised in 11 s, the 8
programs of AR + glance-63 compiled in 88 s; the default, 4 budgets and 3 rivals, is sized for one
10-minute call):

    python3 -m venv .venv && . .venv/bin/activate
    pip install -r requirements.txt "jax[cuda12]"          # or jax[tpu] on a TPU VM
    python benchmarks/gpu_8b.py --json gpu_8b.json --cache-dir /tmp/jax_cache
    # rerunning with the same --cache-dir skips most compiles (XLA's persistent cache)
    # short of time: --budgets 15,63 --repeats 2 (fewer programs, fewer repeats)

On the lent H100 / H200 (its image's python3: jax 0.11.2 + CUDA 13, flax, pillow, tokenizers, safetensors
already there; no carried wheels: docs/benchmarking.md "jax 0.11.2"), the one command:

    PYTHONUNBUFFERED=1 python3 benchmarks/gpu_8b.py --json $OUT/gpu_8b.json --cache-dir /tmp/jax_cache

Smoke test on CPU (what tests/test_round_cost.py runs, well under a minute):

    python benchmarks/gpu_8b.py --size tiny --context 64 --image 64 --new-tokens 33 --budgets 1,3 --repeats 1

What it does: the target (glance_jax.config.QWEN3_VL_8B) is made by Target.random, leaf by leaf
on the device (qwen3_vl/leafwise_init.py: one 8B init program took over 9.5 minutes to compile on
the H200), so the weights are born there (no host copy of 8B parameters); the head is
Head.random(target, num_layers=5), also initialised on the device. The
prompt is ~1k tokens (--context 1024): random text around one 448x448 image (196 merged image
tokens). Then glance_jax.bench.round_split.split_size: each part of a round timed alone (draft, tree,
verify, walk+commit: each a jitted fori_loop, (T(R) - T(0)) / R) and the whole round through the
real jitted decode loop with the oracle drafter (every round accepts 15 unless bf16 breaks an
argmax near-tie differently in the N + 1-row verify than in AR's one-row step: the tokens are then
not AR's and later rounds accept less, which leaves the cost per round unchanged; reported as
"same tokens as AR" and the oracle tau), for N in 1, 15, 31, 63, plus AR's ms/token. Then the rivals
(`--rivals`, default eagle3,eagle3-chain,two-model; "" skips them): a random one-midlayer EAGLE-3
head at the 8B's widths (taps 3, 17, 32, a 32000-token draft vocabulary) at its presets 8/8/32 and
3/1/4, and two-model with a random Qwen3-VL-4B (born on the device; 8.9 GB in bf16) drafting chains
of 4, each timed end to end through generate() per round beside AR and glance-31 / glance-63
(benchmarks/rival_round_cost.time_arms; random drafters accept little: a round's cost). Printed: a
markdown table (t_round / t_AR = the tau a budget needs to break even with AR; with --taus, the
predicted speedup tau(N) * t_AR / t_round(N) and the best N) and JSON with the device kind.
Beside AR's ms/token, its physical floor (glance_jax.bench.physical_floor: the 15.3 GB a bf16 8B
step reads at a 1k context, over the device's datasheet bandwidth where the table has the device,
3.18 ms on an H200 and 4.56 on an H100 SXM, and over a read probe's measured bandwidth), and every
arm with a paper tau (glance-63, EAGLE-3 8/8/32 and 3/1/4, two-model) at its own paper taus per
task: tau / (t_round / t_AR), the speedup its measured round cost predicts there.

A lease's command stops at 600 s, so the run guards itself: the glance table is written to --json
as soon as it is measured, and a rival arm whose compile and repeats would likely end past
--deadline-s (540 s from the start; judged by the slowest arm so far) is skipped and reported so.

The lent machine is an H100 (80 GB) or an H200 (141 GB); the default run needs ~35 GB (the 8B, its
head, the 4B draft of two-model, the EAGLE-3 head), so either fits.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shlex
import sys
import time

if __package__ in (None, ""):  # run as `python benchmarks/gpu_8b.py`
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from benchmarks import rival_round_cost as rrc  # noqa: E402
from benchmarks import round_cost as rc  # noqa: E402
from glance_jax.analysis.bootstrap import geometric_mean  # noqa: E402
from glance_jax.aot.bounds import PAPER_ARM_TAUS, PAPER_TASKS  # noqa: E402
from glance_jax.bench import physical_floor, round_split, timing  # noqa: E402
from glance_jax.bench.random_models import long_prompt, size_config  # noqa: E402
from glance_jax.config import QWEN3_VL_8B  # noqa: E402
from glance_jax.head import Head  # noqa: E402
from glance_jax.qwen3_vl.target import Target  # noqa: E402

DTYPES = {"bfloat16": jnp.bfloat16, "float32": jnp.float32}


def config(size: str):
  return QWEN3_VL_8B if size == "8b" else size_config(size)


def main(argv=None) -> dict:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--size", default="8b", help="8b (the real architecture), or tiny / small / micro for a smoke test")
  ap.add_argument("--dtype", choices=sorted(DTYPES), default="bfloat16")
  ap.add_argument("--budgets", default="1,15,31,63")
  ap.add_argument("--head-layers", type=int, default=5)
  ap.add_argument("--context", type=int, default=1024, help="prompt tokens, the image's included")
  ap.add_argument("--image", type=int, default=448, help="side of the square image in pixels (448 -> 196 tokens)")
  ap.add_argument("--new-tokens", type=int, default=129, help="tokens per whole-loop run")
  ap.add_argument("--repeats", type=int, default=3)
  ap.add_argument("--target-ms", type=float, default=25.0, help="each timed phase call lasts about this long")
  ap.add_argument("--taus", default=None, help="bench JSON from `decode.py bench`, or N:tau,... (15:3.1,31:3.4)")
  ap.add_argument("--cache-dir", default=None, help="XLA persistent compilation cache (reruns skip compiles)")
  ap.add_argument("--rivals", default="eagle3,eagle3-chain,two-model",
                  help="rival arms timed beside AR and glance ('' = none): eagle3, eagle3-chain, two-model")
  ap.add_argument("--probe-mb", type=int, default=None,
                  help="MB of the bandwidth probe (default 2048 on an accelerator, 64 on a CPU; 0 skips it)")
  ap.add_argument("--deadline-s", type=float, default=540.0,
                  help="seconds from the start by which the rivals must end: an arm that would likely end "
                       "later is skipped (the lent GPU stops a command at 600 s; 0 = no deadline)")
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--json", default=None, help="write the results here")
  args = ap.parse_args(argv)
  try:
    cfg = config(args.size)
    taus = rc.parse_taus(args.taus) if args.taus else None
  except ValueError as e:
    ap.error(str(e))
  budgets = rc.int_list(args.budgets)
  if not budgets or min(budgets) < 1:
    ap.error(f"--budgets must be integers >= 1, got {args.budgets!r}")
  if args.cache_dir:
    jax.config.update("jax_compilation_cache_dir", args.cache_dir)
  command = ["python", "benchmarks/gpu_8b.py"] + list(argv) if argv is not None else [sys.executable] + sys.argv
  dev = jax.devices()[0]
  print("$ " + shlex.join(command))
  print(f"jax {jax.__version__}; device: {dev.device_kind} ({dev.platform}, {jax.device_count()} device(s)); "
        f"{os.cpu_count()} CPU cores")
  t0 = time.perf_counter()
  dtype = DTYPES[args.dtype]
  target = Target.random(cfg, seed=args.seed, dtype=dtype)         # initialised under jit: born on the device
  head = Head.random(target, seed=args.seed + 1, num_layers=args.head_layers)
  jax.block_until_ready((target.params, head.params))
  t_init = time.perf_counter() - t0
  prompt = long_prompt(cfg, args.context, args.seed, image=True, image_size=(args.image, args.image))
  print(f"[{args.size}] target and head initialised on {dev.device_kind} in {t_init:.0f}s; prompt "
        f"{prompt.input_ids.shape[1]} tokens ({int((prompt.input_ids == cfg.image_token_id).sum())} image tokens)",
        flush=True)
  res = round_split.split_size(target, head, prompt, size=args.size, budgets=budgets, target_ms=args.target_ms,
                                repeats=args.repeats, new_tokens=args.new_tokens, chain=False, seed=args.seed,
                                lossless=False)
  rows = rc.cost_rows(res, taus)
  t_ar = rows[0]["round_ms"]
  probe_mb = args.probe_mb if args.probe_mb is not None else (64 if dev.platform == "cpu" else 2048)
  probed = physical_floor.probe_gb_s(probe_mb << 20) if probe_mb > 0 else None
  floor = physical_floor.floor(cfg, res["context"], jnp.dtype(dtype).itemsize, dev.device_kind, probed)
  print(f"\n## Cost of a round, {args.size} target in {args.dtype} on {dev.device_kind} (random weights, "
        f"oracle drafter), {args.repeats} interleaved repeats, medians\n")
  print(rc.table(res, rows))
  print(f"\nAR: {t_ar:.3f} ms/token ({1e3 / t_ar:.1f} tokens/s). Same tokens as AR (oracle loops): " +
        ", ".join(f"N={r['budget']} {'yes' if r.get('same_tokens_as_ar') else 'no'} (tau {r['oracle_tau']:.2f})"
                  for r in rows if r["method"] == "glance"))
  print(physical_floor.describe(floor, t_ar))
  print(rc.NOTES)
  paper = paper_predictions({f"glance-{r['budget']}": r["ratio_to_ar"] for r in rows if r["method"] == "glance"})
  report = dict(command=command, device_kind=dev.device_kind, platform=dev.platform, size=args.size,
                dtype=args.dtype, params_m=res["params_m"], head_layers=res["head_layers"],
                head_params_m=res["head_params_m"], context=res["context"], image=args.image,
                ar_ms_per_token=t_ar, floor=floor, rows=rows, best=rc.best_budget(rows), taus=taus,
                paper_predictions=paper, init_seconds=t_init, split=res, rivals=None)
  if args.json:  # the glance table lands before the rivals run: a lease cut short still returns it
    timing.finish(dict(report), t0, args.json, f" to {args.json}; the rivals next", label="glance rows written at")
  deadline = t0 + args.deadline_s if args.deadline_s > 0 else None
  report["rivals"] = _rivals(args, cfg, target, head, prompt, dtype, deadline)
  if report["rivals"]:  # every arm timed end to end in one table: its ratios replace the split's glance-63
    report["paper_predictions"] = paper_predictions({r["arm"]: r["round_over_ar"] for r in report["rivals"]
                                                     if "skipped" not in r})
  if report["paper_predictions"]:
    print(paper_table(report["paper_predictions"]))
  return timing.finish(report, t0, args.json, f" (init {t_init:.0f}s)")


# The arms with a tau in the paper, by their names here (the aot runs' keys of bounds.PAPER_ARM_TAUS).
PAPER_ARMS = {"glance-63": "glance63", "eagle3": "eagle3", "eagle3-chain": "eagle3chain", "two-model": "twomodel"}


def paper_predictions(round_over_ar: dict[str, float]) -> list[dict]:
  """Each arm with a paper tau (its own, per task: docs/baselines.md section 1) at its measured
  t_round / t_AR: predicted speedup tau / (t_round / t_AR) per task, and their geometric mean."""
  out = []
  for arm, key in PAPER_ARMS.items():
    if arm not in round_over_ar:
      continue
    ratio = round_over_ar[arm]
    speed = {task: PAPER_ARM_TAUS[key][task] / ratio for task in PAPER_TASKS}
    out.append(dict(arm=arm, round_over_ar=ratio, taus=dict(PAPER_ARM_TAUS[key]), speedup=speed,
                    geomean=geometric_mean(list(speed.values()))))
  return out


def paper_table(preds: list[dict]) -> str:
  head = "| arm | t_round / t_AR | " + " | ".join(PAPER_TASKS) + " | geomean |"
  lines = ["\n## Predicted speedup over AR at each arm's own paper taus (tau -> tau / (t_round / t_AR))\n", head,
           "|" + "---|" * (len(PAPER_TASKS) + 3)]
  for p in preds:
    cells = " | ".join(f"{p['taus'][t]:.2f} -> {p['speedup'][t]:.2f}x" for t in PAPER_TASKS)
    lines.append(f"| {p['arm']} | {p['round_over_ar']:.2f} | {cells} | {p['geomean']:.2f}x |")
  return "\n".join(lines)


def _rivals(args, cfg, target, head, prompt, dtype, deadline: float | None) -> list[dict]:
  """The rival arms of --rivals beside AR and glance-31 / 63, one table (rival_round_cost.time_arms)."""
  wanted = [x for x in args.rivals.split(",") if x]
  unknown = set(wanted) - {"eagle3", "eagle3-chain", "two-model"}
  if unknown:
    raise SystemExit(f"--rivals: unknown arm(s) {sorted(unknown)}; choose from eagle3, eagle3-chain, two-model")
  if not wanted:
    return []
  if deadline is not None and time.perf_counter() > deadline:   # not even AR's reference fits
    print(f"\nThe rivals skipped: --deadline-s {args.deadline_s:.0f} has passed")
    return [dict(arm=a, skipped="deadline") for a in ["ar", "glance-31", "glance-63"] + wanted]
  from glance_jax.decode.drafters.two_model import draft_config_for
  e3 = rrc.eagle3_random(target, args.seed + 4, 32000 if cfg == QWEN3_VL_8B else None) if any(
      w.startswith("eagle3") for w in wanted) else None
  draft = Target.random(draft_config_for(cfg), seed=args.seed + 5, dtype=dtype) if "two-model" in wanted else None
  arms = {"ar": ("ar", None, 1), "glance-31": ("glance", head, 31), "glance-63": ("glance", head, 63)}
  arms.update({k: v for k, v in rrc.rival_arms(target, e3, draft).items() if k in wanted})
  rows = rrc.time_arms(target, arms, prompt, max_new=args.new_tokens, repeats=args.repeats, seed=args.seed,
                       log=lambda m: print(m, flush=True), deadline=deadline)
  print("\n## The rivals, end to end per round (random drafters: a round's cost, not its acceptance)\n")
  print("| arm | draft passes | verified tokens | ms / round | t_round / t_AR | same tokens as AR |\n|---|---|---|---|---|---|")
  for r in rows:
    if "skipped" in r:
      print(f"| {r['arm']} | skipped: {r['skipped']} (--deadline-s {args.deadline_s:.0f}) | | | | |")
      continue
    print(f"| {r['arm']} | {r['passes']} | {r['verified']} | {r['ms_per_round']:.2f} | {r['round_over_ar']:.2f} | "
          f"{'yes' if r['lossless'] else 'no'} |")
  return rows


if __name__ == "__main__":
  main()
