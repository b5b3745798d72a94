"""`python decode.py` with no arguments: the shipped testbed target + head on a few held-out prompts
of every task, decoded with AR and with GLANCE; prints each answer, tau, ms/token and the speedup.

Timing: every (task, method) is compiled first; then each prompt is decoded `repeats` times per
method in alternating order and the fastest run of each is kept (a demo on a shared machine; the
paper-style numbers with confidence intervals come from `decode.py bench`).
"""

from __future__ import annotations

import time

import jax.numpy as jnp
import numpy as np

DEMO_BUDGET = 15          # the GLANCE budget N the demo runs: the fastest fixed width in the memory-bound
                          # regime (testbed/results/bench_memory.md; the bench picks the best per task)
PROMPTS_PER_TASK = 2


def _timed(fn, repeats: int):
  best, out = float("inf"), None
  for _ in range(repeats):
    t0 = time.perf_counter()
    out = fn()
    best = min(best, time.perf_counter() - t0)
  return best, out


def run_demo(*, budget: int = DEMO_BUDGET, prompts_per_task: int = PROMPTS_PER_TASK,
             max_new_tokens: int | None = None, repeats: int = 2, regime: str | None = None,
             print_fn=print) -> list[dict]:
  from glance_jax.data.records import read_task_file
  from glance_jax.decode.generate import generate
  from glance_jax.qwen3_vl.inputs import prepare_inputs
  from glance_jax.testbed import paths, regimes

  regime = regime or regimes.DEFAULT
  target, head, processor = regimes.load(regime, dtype=jnp.float32)
  if head.correction is not None:   # the shipped head's parent correction: its trees expand each node's
    head = head.with_parent_correction()   # own children (the fastest arm of the memory-bound bench)
  scores = "parent-conditioned tree" if head.parent is not None else "product of marginals"
  decode = lambda t: processor.tokenizer.decode([int(x) for x in t], skip_special_tokens=True)
  rows = []
  print_fn(f"testbed target {paths.TARGET} + GLANCE head {paths.HEAD}; glance N={budget} "
           f"({scores}), fp32, batch 1")
  print_fn(f"regime: {regimes.LABEL[regime]}")
  suite = paths.suite()
  max_new_tokens = max_new_tokens or suite.ANSWER_TOKENS   # every answer of the suite runs to its end
  for task, path in zip(suite.TASKS, paths.task_files()):
    kind = "grounded" if task in suite.GROUNDED else "open"
    for rec in read_task_file(path, on_error="raise")[:prompts_per_task]:
      inputs = prepare_inputs(processor, rec.prompt, list(rec.images))
      run = {m: (lambda m=m: generate(target, inputs, head=head if m == "glance" else None, method=m,
                                      budget=budget, max_new_tokens=max_new_tokens)) for m in ("ar", "glance")}
      for fn in run.values():
        fn()  # compile (once per method and prompt shape)
      t_ar, ar = _timed(run["ar"], repeats)
      t_gl, gl = _timed(run["glance"], repeats)
      n = len(ar.tokens[0])
      row = dict(task=task, kind=kind, regime=regime, scores=scores, id=rec.id, prompt=rec.prompt,
                 answer=decode(gl.tokens[0]),
                 reference=rec.answers[0] if rec.answers else None,
                 same_as_ar=bool(np.array_equal(ar.tokens[0], gl.tokens[0])), tau=gl.tau,
                 ar_ms_per_token=1e3 * t_ar / n, glance_ms_per_token=1e3 * t_gl / len(gl.tokens[0]),
                 speedup=t_ar / t_gl)
      rows.append(row)
      print_fn(f"\n[{task}, {kind}] {rec.prompt}\n{row['answer']}")
      print_fn(f"  tau={row['tau']:.2f}  AR {row['ar_ms_per_token']:.2f} ms/token  GLANCE "
               f"{row['glance_ms_per_token']:.2f} ms/token  speedup {row['speedup']:.2f}x  "
               f"identical to AR: {row['same_as_ar']}  ({regime} regime)")
  return rows
