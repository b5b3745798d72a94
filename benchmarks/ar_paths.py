"""Why there are two greedy AR paths: the target's minimal loop vs the decode loop's `ar` method.

    python benchmarks/ar_paths.py [--sizes tiny,small] [--new-tokens 64] [--repeats 5]

Same random "lively" target, same one-image prompt, batch 1, fp32: `Target.generate_greedy`
(engine.greedy_decode: one target step per iteration and nothing else) against
`generate(method="ar")` (the speculative loop with N = 0: the same step plus the round's walk,
commit and records). ms/token = (time for n new tokens - time for 1) / (n - 1), medians of
interleaved repeats; both must emit the same tokens.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shlex
import sys
import time

if __package__ in (None, ""):  # run as `python benchmarks/ar_paths.py`
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from glance_jax.bench.random_models import long_prompt, make_target, size_config  # noqa: E402
from glance_jax.bench.timing import command_line, finish, interleaved_ms  # noqa: E402
from glance_jax.decode.generate import generate  # noqa: E402


def measure(size: str, new_tokens: int, repeats: int, context: int = 300) -> dict:
  cfg = size_config(size)
  target = make_target(cfg, seed=3)
  prompt = long_prompt(cfg, context, seed=3)
  fns = {}
  for n in (1, new_tokens):
    fns[("greedy", n)] = lambda p, n=n: target.generate_greedy(p, n, stop_tokens=())[0]
    fns[("loop-ar", n)] = lambda p, n=n: np.asarray(
        generate(target, p, method="ar", max_new_tokens=n, stop_tokens=()).tokens[0])
  same = bool(np.array_equal(fns[("greedy", new_tokens)](prompt)[0], fns[("loop-ar", new_tokens)](prompt)))
  ms = interleaved_ms(fns, prompt, repeats)
  per = {k: (ms[(k, new_tokens)] - ms[(k, 1)]) / (new_tokens - 1) for k in ("greedy", "loop-ar")}
  return dict(size=size, greedy_ms_per_token=per["greedy"], loop_ar_ms_per_token=per["loop-ar"],
              loop_over_greedy=per["loop-ar"] / per["greedy"], same_tokens=same)


def main(argv=None) -> dict:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--sizes", default="tiny,small")
  ap.add_argument("--new-tokens", type=int, default=64)
  ap.add_argument("--repeats", type=int, default=5)
  ap.add_argument("--json", default=None)
  args = ap.parse_args(argv)
  command = command_line(argv, "benchmarks/ar_paths.py")
  print("$ " + shlex.join(command))
  print(f"jax {jax.__version__} on {jax.devices()[0].platform} ({os.cpu_count()} CPU cores)")
  t0 = time.perf_counter()
  rows = [measure(s.strip(), args.new_tokens, args.repeats) for s in args.sizes.split(",") if s.strip()]
  print("\n| size | generate_greedy ms/token | generate(method='ar') ms/token | loop / greedy | same tokens |")
  print("|---|---|---|---|---|")
  for r in rows:
    print(f"| {r['size']} | {r['greedy_ms_per_token']:.3f} | {r['loop_ar_ms_per_token']:.3f} "
          f"| {r['loop_over_greedy']:.2f} | {'yes' if r['same_tokens'] else 'NO'} |")
  return finish(dict(command=command, rows=rows), t0, args.json)


if __name__ == "__main__":
  main()
