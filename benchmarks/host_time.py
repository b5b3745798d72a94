"""Host time per jitted call: the graphdef as a static argument (static_args.Hashed) against a program
bound to it (jax.jit of a closure over the graphdef, as flax's Sampler does), with the parameters as
an nnx.State or flattened once (static_args.FlatState).

    python benchmarks/host_time.py [--calls 300] [--repeats 7]

The jitted function reads one weight (keep_unused: every parameter is still an argument), so a call
costs what the dispatch costs: hashing the static arguments and flattening the arguments. Runs on
the shipped testbed target (97 parameter arrays), interleaved, median over repeats.
"""

from __future__ import annotations

import argparse
import functools
import json
import pathlib
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from glance_jax.static_args import FlatState, Hashed, merge  # noqa: E402


def _fn(graphdef, params, x):
  return x + merge(graphdef, params).embed_weight[0, 0]


def cases(target) -> dict:
  static = jax.jit(_fn, static_argnums=0, keep_unused=True)
  bound = jax.jit(functools.partial(_fn, target.graphdef), keep_unused=True)
  flat, held, x = FlatState.of(target.params), Hashed(target.graphdef), jnp.float32(1)
  return {"static Hashed graphdef + FlatState": lambda: static(held, flat, x),
          "bound program + FlatState": lambda: bound(flat, x),
          "static bare graphdef + nnx.State": lambda: static(target.graphdef, target.params, x),
          "bound program + nnx.State": lambda: bound(target.params, x)}


def measure(target, calls: int = 300, repeats: int = 7) -> dict[str, float]:
  """-> median microseconds per call, per case."""
  fns = cases(target)
  for f in fns.values():
    jax.block_until_ready(f())
  out = {k: [] for k in fns}
  for _ in range(repeats):
    for k, f in fns.items():
      t0 = time.perf_counter()
      for _ in range(calls):
        y = f()
      jax.block_until_ready(y)
      out[k].append(1e6 * (time.perf_counter() - t0) / calls)
  return {k: statistics.median(v) for k, v in out.items()}


def main(argv=None) -> dict:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--calls", type=int, default=300)
  ap.add_argument("--repeats", type=int, default=7)
  args = ap.parse_args(argv)
  from glance_jax.qwen3_vl.target import load_target
  from glance_jax.testbed import paths
  target = load_target(str(paths.TARGET), dtype=jnp.float32)
  res = measure(target, args.calls, args.repeats)
  for k, us in res.items():
    print(f"{k:40s} {us:8.1f} us/call")
  print(json.dumps(res))
  return res


if __name__ == "__main__":
  main()
