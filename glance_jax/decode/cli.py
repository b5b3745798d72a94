"""`python decode.py`: decode one prompt (with images) and print the text and a one-line summary."""

from __future__ import annotations

import argparse
import json
import time

import jax.numpy as jnp
import numpy as np

METHODS = ("ar",)
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


def parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(description=__doc__)
  p.add_argument("--model", help="HF checkpoint directory or hub repo id (default: embedded tiny model)")
  p.add_argument("--image", action="append", default=[], help="image path (repeatable)")
  p.add_argument("--prompt", default=None, help="user prompt text")
  p.add_argument("--method", choices=METHODS, default="ar")
  p.add_argument("--max-new-tokens", type=int, default=64)
  p.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
  p.add_argument("--json", dest="json_out", help="write the result as JSON here")
  return p


def main(argv=None) -> dict:
  args = parser().parse_args(argv)
  if args.max_new_tokens < 1:
    raise SystemExit(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
  from glance_jax import demo
  from glance_jax.qwen3_vl.inputs import Processor, prepare_inputs
  from glance_jax.qwen3_vl.target import load_target

  path = args.model or demo.default_checkpoint()
  images = list(args.image) if args.model or args.image else [demo.default_image()]
  prompt = args.prompt or demo.DEFAULT_PROMPT
  target = load_target(path, dtype=DTYPES[args.dtype])
  processor = Processor.from_pretrained(str(target.path))
  inputs = prepare_inputs(processor, prompt, images or None)
  target.generate_greedy(inputs, args.max_new_tokens)  # compile
  t0 = time.perf_counter()
  toks, n = target.generate_greedy(inputs, args.max_new_tokens)
  dt = time.perf_counter() - t0
  new = [int(t) for t in toks[0, : n[0]]]
  text = processor.tokenizer.decode(new, skip_special_tokens=True)
  result = dict(method=args.method, prompt=prompt, text=text, tokens=new, new_tokens=len(new),
                rounds=len(new), tau=1.0, ms_per_token=1e3 * dt / max(len(new), 1),
                tokens_per_s=len(new) / dt)
  print(text)
  print(f"[{args.method}] new_tokens={len(new)} rounds={len(new)} tau=1.00 "
        f"ms/token={result['ms_per_token']:.2f} tokens/s={result['tokens_per_s']:.1f}")
  if args.json_out:
    with open(args.json_out, "w") as f:
      json.dump(result, f, indent=2)
  return result
