"""Ours against transformers on the same checkpoint and prompts: ms/token side by side.

    python benchmarks/vs_transformers.py [--model DIR] [--head HEAD_DIR] \
        [--tasks a.jsonl b.jsonl] [--limit 8] [--max-new-tokens 64] [--budget 15] [--repeats 3] [--json OUT]

Methods, batch 1, greedy, the checkpoint's own stop tokens on both sides:
  hf-greedy         transformers' Qwen3VLForConditionalGeneration.generate(do_sample=False), fp32
  hf-prompt-lookup  the same with prompt_lookup_num_tokens=K (transformers' n-gram drafting); its
                    candidates may not contain vision special tokens (`no_vision_candidates`)
  ar, ngram         ours: glance_jax generate(method="ar" / "ngram", depth 15), fp32
  glance-N          ours with the head (--head; without it a random 2-layer head, which accepts
                    little: that row then shows the cost of rounds, not a trained head's speed)

Defaults: --model is glance_jax.demo.default_checkpoint() (a tiny random Qwen3-VL written in the
real HF layout) and --tasks the synthetic val task (glance_jax.data.synthetic) written to a temp
dir. Both sides get the very same arrays: input_ids, pixel_values and image_grid_thw from our
prepare_inputs, which tests/test_inputs.py pins bit-equal to transformers' Qwen3VLProcessor.

Timing: everything is warmed up first (every method on every prompt: our compiles, torch's first
calls); then, per prompt and repeat, each method runs once, in an order rotated by one each time,
and the wall time of the whole call (prefill included, host tokens out) is taken. ms/token = the
sum over prompts of each prompt's median time / the sum of its new tokens. Ratios are within this
one run. "== HF greedy" counts prompts whose tokens equal transformers' greedy tokens exactly.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shlex
import statistics
import sys
import tempfile
import time

if __package__ in (None, ""):  # run as `python benchmarks/vs_transformers.py`
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402


def default_tasks(root) -> list[str]:
  """The synthetic val task written as a task file under `root`."""
  from glance_jax.data.records import write_task_file
  from glance_jax.data.synthetic import read_synthetic
  path = pathlib.Path(root) / "synthetic_val.jsonl"
  write_task_file(read_synthetic(root, "val"), path)
  return [str(path)]


def hf_inputs(inputs, image_token_id: int) -> dict:
  import torch
  ids = torch.from_numpy(np.asarray(inputs.input_ids, np.int64))
  out = dict(input_ids=ids, attention_mask=torch.from_numpy(np.asarray(inputs.attention_mask, np.int64)),
             mm_token_type_ids=(ids == image_token_id).long())
  if inputs.pixel_values is not None:
    out["pixel_values"] = torch.from_numpy(np.asarray(inputs.pixel_values, np.float32))
    out["image_grid_thw"] = torch.from_numpy(np.asarray(inputs.image_grid_thw, np.int64))
  return out


def no_vision_candidates(token_ids):
  """A LogitsProcessorList that keeps transformers' prompt lookup from proposing vision tokens.

  Why: the first assisted step runs the prompt and the candidates in one forward with the pixels,
  and prompt lookup copies candidates out of the prompt, image placeholders included, so Qwen3-VL
  fails with "Image features and image tokens do not match". PromptLookupCandidateGenerator crops
  its candidates at the first token a logits processor forbids, testing each on fake all-ones
  logits; this processor forbids the vision tokens only on such all-ones logits, so the target's
  own greedy choice is untouched (it may still emit them, as plain greedy does)."""
  import torch
  from transformers import LogitsProcessor, LogitsProcessorList
  ids = torch.tensor(list(token_ids))

  class NoVisionCandidates(LogitsProcessor):
    def __call__(self, input_ids, scores):
      if bool(torch.all(scores == 1.0)):                                  # the candidate check's fake logits
        scores = scores.clone()
        scores[:, ids] = -float("inf")
      return scores

  return LogitsProcessorList([NoVisionCandidates()])


def main(argv=None) -> dict:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--model", default=None, help="HF Qwen3-VL checkpoint directory (default: the embedded tiny one)")
  ap.add_argument("--head", default=None, help="DFlash-format head directory (default: a random 2-layer head)")
  ap.add_argument("--tasks", nargs="+", default=None, help="task files (JSONL); default: the synthetic val task")
  ap.add_argument("--limit", type=int, default=None, help="at most this many prompts in all")
  ap.add_argument("--max-new-tokens", type=int, default=64)
  ap.add_argument("--budget", type=int, default=15, help="glance tree nodes N")
  ap.add_argument("--prompt-lookup", type=int, default=10, help="transformers' prompt_lookup_num_tokens K")
  ap.add_argument("--repeats", type=int, default=3)
  ap.add_argument("--json", default=None, help="write the results here")
  args = ap.parse_args(argv)
  if args.max_new_tokens < 1 or args.budget < 1 or args.repeats < 1 or args.prompt_lookup < 1:
    ap.error("--max-new-tokens, --budget, --repeats and --prompt-lookup must be >= 1")

  import jax.numpy as jnp
  import torch
  from transformers import Qwen3VLForConditionalGeneration

  from glance_jax import demo
  from glance_jax.data.records import read_task_file
  from glance_jax.decode.generate import generate
  from glance_jax.head import Head
  from glance_jax.qwen3_vl.inputs import Processor, prepare_inputs
  from glance_jax.qwen3_vl.target import load_target

  tmp = tempfile.mkdtemp(prefix="vs_transformers_")
  model_dir = pathlib.Path(args.model) if args.model else demo.default_checkpoint(tmp)
  if not (model_dir / "config.json").is_file():
    ap.error(f"--model {model_dir}: no config.json there (a local HF checkpoint directory is needed)")
  task_files = args.tasks or default_tasks(tmp)
  records = [r for path in task_files for r in read_task_file(path, on_error="raise")][: args.limit]
  if not records:
    ap.error("no prompts in the task files")
  torch.set_num_threads(os.cpu_count() or 1)
  command = ["python", "benchmarks/vs_transformers.py"] + list(argv) if argv is not None else [sys.executable] + sys.argv
  print("$ " + shlex.join(command))
  print(f"model {model_dir}; {len(records)} prompts from {', '.join(task_files)}; {os.cpu_count()} CPU cores, "
        f"torch threads {torch.get_num_threads()}")

  target = load_target(model_dir, dtype=jnp.float32)
  processor = Processor.from_pretrained(str(model_dir))
  head = Head.load(args.head, target=target) if args.head else Head.random(target, seed=0, num_layers=2)
  hf = Qwen3VLForConditionalGeneration.from_pretrained(str(model_dir), dtype=torch.float32).eval()
  stops = list(target.config.eos_token_ids)
  m = args.max_new_tokens
  prompts = [prepare_inputs(processor, r.prompt, list(r.images) or None) for r in records]
  hf_in = [hf_inputs(p, target.config.image_token_id) for p in prompts]

  cfg = target.config
  no_vision = no_vision_candidates([cfg.image_token_id, cfg.video_token_id, cfg.vision_start_token_id,
                                    cfg.vision_end_token_id])

  def run_hf(i, lookup):
    kw = dict(prompt_lookup_num_tokens=args.prompt_lookup, logits_processor=no_vision) if lookup else {}
    with torch.inference_mode():
      out = hf.generate(**hf_in[i], max_new_tokens=m, do_sample=False, eos_token_id=stops,
                        pad_token_id=processor.pad_token_id, **kw)
    return out[0, hf_in[i]["input_ids"].shape[1]:].numpy(), None

  def run_ours(i, method, budget):
    res = generate(target, prompts[i], head=head, method=method, budget=budget, max_new_tokens=m)
    return np.asarray(res.tokens[0]), res.tau

  methods = {"hf-greedy": lambda i: run_hf(i, False), "hf-prompt-lookup": lambda i: run_hf(i, True),
             "ar": lambda i: run_ours(i, "ar", 1), "ngram": lambda i: run_ours(i, "ngram", 15),
             f"glance-{args.budget}": lambda i: run_ours(i, "glance", args.budget)}
  names = list(methods)
  t0 = time.perf_counter()
  for i in range(len(prompts)):  # warm-up: compiles and first calls
    for fn in methods.values():
      fn(i)
  print(f"warmed up {len(names)} methods on {len(prompts)} prompts in {time.perf_counter() - t0:.0f}s", flush=True)
  times = {k: [[] for _ in prompts] for k in names}
  toks, taus = {k: [None] * len(prompts) for k in names}, {k: [None] * len(prompts) for k in names}
  turn = 0
  for i in range(len(prompts)):
    for _ in range(args.repeats):
      order = names[turn % len(names):] + names[:turn % len(names)]
      turn += 1
      for k in order:
        t1 = time.perf_counter()
        out, tau = methods[k](i)
        times[k][i].append(time.perf_counter() - t1)
        toks[k][i], taus[k][i] = out, tau
  ref = toks["hf-greedy"]
  rows = {}
  for k in names:
    n_tok = sum(len(t) for t in toks[k])
    sec = sum(statistics.median(v) for v in times[k])
    rows[k] = dict(ms_per_token=1e3 * sec / n_tok, tokens=n_tok, seconds=sec,
                   agree_with_hf_greedy=sum(bool(np.array_equal(a, b)) for a, b in zip(toks[k], ref)),
                   tau=None if taus[k][0] is None else float(np.mean(taus[k])))
  base = rows["hf-greedy"]["ms_per_token"]
  for r in rows.values():
    r["ratio_to_hf_greedy"] = r["ms_per_token"] / base
  per_prompt = [dict(id=r.id, prompt_tokens=int(p.input_ids.shape[1]),
                     new_tokens={k: int(len(toks[k][i])) for k in names},
                     tokens={k: [int(t) for t in toks[k][i]] for k in names},
                     ms={k: 1e3 * statistics.median(times[k][i]) for k in names})
                for i, (r, p) in enumerate(zip(records, prompts))]
  print(f"\n## Ours vs transformers ({len(prompts)} prompts, <= {m} new tokens, fp32, batch 1, "
        f"{args.repeats} interleaved repeats, medians)\n")
  print(table(rows, len(prompts)))
  print(f"\nhead: {args.head or 'random 2-layer (untrained: glance shows the round cost, not a trained speed)'}; "
        f"prompt lookup K = {args.prompt_lookup}; ngram depth 15")
  report = dict(command=command, model=str(model_dir), head=args.head, tasks=task_files, prompts=len(prompts),
                max_new_tokens=m, budget=args.budget, prompt_lookup_num_tokens=args.prompt_lookup,
                repeats=args.repeats, cpu_cores=os.cpu_count(), torch_threads=torch.get_num_threads(),
                methods=rows, per_prompt=per_prompt, seconds=time.perf_counter() - t0)
  if args.json:
    with open(args.json, "w") as f:
      json.dump(report, f, indent=2)
  return report


def table(rows: dict, prompts: int) -> str:
  lines = ["| method | ms/token | tokens/s | time / HF greedy | tau | tokens == HF greedy |",
           "|---|---|---|---|---|---|"]
  for k, r in rows.items():
    tau = "-" if r["tau"] is None else f"{r['tau']:.2f}"
    lines.append(f"| {k} | {r['ms_per_token']:.3f} | {1e3 / r['ms_per_token']:.0f} | {r['ratio_to_hf_greedy']:.3f} "
                 f"| {tau} | {r['agree_with_hf_greedy']}/{prompts} |")
  return "\n".join(lines)


if __name__ == "__main__":
  main()
