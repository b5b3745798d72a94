"""Round cost per arm, GLANCE against its rivals, on one target at a memory-bound size:

    python benchmarks/rival_round_cost.py [--widen 8] [--max-new 48] [--repeats 5] [--json OUT]

The shipped testbed target's shapes (3.0M parameters) with random "lively" weights, widened `--widen`
times (qwen3_vl/widen.py, the testbed's memory regime: x8 = 101M decoder parameters, 403 MB in
fp32), a random 2-layer GLANCE head widened alike, a random one-midlayer EAGLE-3 head at the wide
target's widths (taps: EAGLE-3's default low / mid / high, its whole vocabulary as the draft
vocabulary), and for two-model a random draft of the target's shapes at half its depth, widened
alike. Per arm: generate() on one ~300-token prompt with an image, `--max-new` tokens, timed end to
end (the prefill included) and divided by its rounds. Random drafters accept little, so each round is close to
the arm's round at its own width: what a round costs, not what it earns; t_round / t_AR is the tau
an arm needs to break even with AR on this machine. Repeats interleaved in a fresh order each;
medians; ratios within one run only. Say what else ran beside it.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

if __package__ in (None, ""):  # run as `python benchmarks/rival_round_cost.py`
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from glance_jax.bench import timing  # noqa: E402

ARMS = ("ar", "glance-15", "glance-31", "glance-63", "eagle3", "eagle3-chain", "two-model")


def testbed_config():
  from glance_jax.config import Qwen3VLConfig
  from glance_jax.testbed import paths
  return Qwen3VLConfig.from_json_file(paths.TARGET / "config.json")


def eagle3_random(target, seed: int, draft_vocab: int | None = None):
  """A random one-midlayer EAGLE-3 head at the target's widths (EAGLE-3's default taps; SpecForge's
  (3, 17, 32) at 36 layers; first / middle / last below 4 layers, too shallow for the default), its
  draft vocabulary the first `draft_vocab` tokens."""
  from glance_jax.eagle3 import Eagle3Checkpoint, abstract_head, vocab_map_from_counts
  from glance_jax.testing.random_weights import lively
  from glance_jax.train.eagle3_train import head_config
  layers = target.config.text.num_hidden_layers
  cfg = head_config(target.config, draft_vocab=draft_vocab or target.config.text.vocab_size,
                    aux_layer_ids=(3, 17, 32) if layers == 36 else (0, layers // 2, layers - 1) if layers < 4 else ())
  gd, abstract = abstract_head(cfg, dtype=target.dtype)
  counts = np.zeros(cfg.vocab_size, np.int64)
  counts[: cfg.draft_vocab_size] = 1
  d2t, t2d = vocab_map_from_counts(counts, cfg.draft_vocab_size)
  return Eagle3Checkpoint(cfg, gd, lively(abstract, seed), jnp.asarray(d2t, jnp.int32), jnp.asarray(t2d))


def rival_arms(target, eagle3, draft) -> dict:
  """{arm label: (method, its drafter, budget)} for the rivals (eagle3 / eagle3-chain with the EAGLE-3
  head, two-model with the draft model; an arm whose drafter is None is left out)."""
  arms = {}
  if eagle3 is not None:
    arms.update({"eagle3": ("eagle3", eagle3, 63), "eagle3-chain": ("eagle3-chain", eagle3, 63)})
  if draft is not None:
    arms["two-model"] = ("two-model", draft, 63)
  return arms


def make_arms(cfg, widen: int, seed: int = 3):
  """(target, {arm label: (method, head or draft, budget)}) at `widen` x the config's widths."""
  from glance_jax.bench.random_models import make_head, make_target
  from glance_jax.decode.drafters.two_model import draft_config_for
  from glance_jax.head.widen import widen_head
  from glance_jax.qwen3_vl.widen import widen_target
  target = make_target(cfg, seed)
  head = make_head(target, seed + 1, 2)
  draft = make_target(draft_config_for(cfg), seed + 2)
  if widen > 1:
    target = widen_target(target, widen)
    head = widen_head(head, widen, target=target)
    draft = widen_target(draft, widen)
  arms = {"ar": ("ar", None, 1), **{f"glance-{n}": ("glance", head, n) for n in (15, 31, 63)}}
  return target, {**arms, **rival_arms(target, eagle3_random(target, seed + 4), draft)}


def time_arms(target, arms: dict, prompt, *, max_new: int, repeats: int, seed: int = 0, log=print,
              deadline: float | None = None) -> list[dict]:
  """Per arm (the first must be "ar"): generate() end to end (the prefill included) over its rounds,
  interleaved repeats, medians; each arm's tokens checked against the first arm's. With `deadline`
  (a time.perf_counter() value), an arm whose compile and repeats would likely end past it (judged
  by the slowest arm compiled so far) is skipped: a row {arm, skipped: "deadline"} in its place."""
  from glance_jax.bench.engine import generate

  def run(label):
    method, head, budget = arms[label]
    t0 = time.perf_counter()
    res = generate(target, prompt, head=head, method=method, budget=budget, max_new_tokens=max_new, stop_tokens=())
    return time.perf_counter() - t0, res

  ref, meta, slowest, skipped = None, {}, 0.0, []
  for label in arms:                      # compile every arm, check its tokens against AR's
    if deadline is not None and ref is not None and time.perf_counter() + 1.5 * slowest > deadline:
      skipped.append(label)
      log(f"skipped {label}: the deadline is {deadline - time.perf_counter():.0f}s away, "
          f"the slowest arm so far took {slowest:.0f}s")
      continue
    t0 = time.perf_counter()
    _, res = run(label)
    slowest = max(slowest, (time.perf_counter() - t0) * (1 + repeats / 4))   # its compile, then its repeats
    toks = [int(t) for t in res.tokens[0]]
    ref = toks if ref is None else ref
    meta[label] = dict(lossless=toks == ref, rounds=int(res.rounds[0]), passes=int(res.draft_passes_per_round),
                       verified=int(res.num_nodes) + 1)
    log(f"compiled {label}: {meta[label]}")
  times = {label: [] for label in meta}
  for label in timing.interleaved(list(meta), repeats, seed):
    dt, res = run(label)
    times[label].append(1e3 * dt / max(int(res.rounds[0]), 1))
  t_ar = timing.median(times[next(iter(arms))])
  return [dict(arm=label, ms_per_round=timing.median(v), round_over_ar=timing.median(v) / t_ar, **meta[label])
          for label, v in times.items()] + [dict(arm=label, skipped="deadline") for label in skipped]


def measure(widen: int = 8, max_new: int = 48, repeats: int = 5, context: int = 300, seed: int = 3) -> dict:
  from glance_jax.bench.random_models import long_prompt
  cfg = testbed_config()
  target, arms = make_arms(cfg, widen, seed)
  prompt = long_prompt(cfg, context, seed, image=True)
  rows = time_arms(target, arms, prompt, max_new=max_new, repeats=repeats, seed=seed,
                   log=lambda m: print(m, flush=True))
  p = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(target.params))
  return dict(widen=widen, target_params=p, max_new=max_new, repeats=repeats, context=context,
              device=str(jax.devices()[0].device_kind), rows=rows)


def table(r: dict) -> str:
  lines = [f"target: the testbed's shapes x{r['widen']} ({r['target_params'] / 1e6:.1f}M parameters, random), "
           f"{r['max_new']} new tokens, {r['repeats']} repeats, {r['device']}", "",
           "| arm | draft passes | verified tokens | ms / round | t_round / t_AR | lossless |", "|---|---|---|---|---|---|"]
  for row in r["rows"]:
    lines.append(f"| {row['arm']} | {row['passes']} | {row['verified']} | {row['ms_per_round']:.1f} | "
                 f"{row['round_over_ar']:.2f} | {'yes' if row['lossless'] else 'NO'} |")
  return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--widen", type=int, default=8)
  ap.add_argument("--max-new", type=int, default=48)
  ap.add_argument("--repeats", type=int, default=5)
  ap.add_argument("--json", dest="json_out")
  args = ap.parse_args(argv)
  t0 = time.perf_counter()
  r = measure(widen=args.widen, max_new=args.max_new, repeats=args.repeats)
  print(table(r), end="")
  return timing.finish(r, t0, args.json_out)


if __name__ == "__main__":
  main()
