"""Tree builder alone: the level-synchronous build_tree vs the previous best-first one (kept as
tree.build_tree_best_first), jitted and vmapped over a batch of 1, on [15, V] random log-marginals.
Prints the median ms of 7 calls (after a warm-up) and the compiled HLO's instruction count.

    python benchmarks/tree_build.py
"""

import pathlib
import sys
import time

if __package__ in (None, ""):
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from glance_jax.decode import tree as T  # noqa: E402


def hlo_count(f, x) -> int:
  txt = jax.jit(f).lower(x).compile().as_text()
  return sum(1 for line in txt.splitlines() if " = " in line and not line.strip().startswith("//"))


def main():
  for vocab in (512, 32000):
    for n in (15, 31, 63):
      x = jax.nn.log_softmax(jax.random.normal(jax.random.key(0), (1, 15, vocab)) * 3, -1)
      res = {}
      for name, fn in (("best-first (old)", T.build_tree_best_first), ("level-sync (new)", T.build_tree)):
        f = jax.vmap(lambda lq, fn=fn: fn(lq, num_nodes=n))
        jf = jax.jit(f)
        jax.block_until_ready(jf(x))
        ts = []
        for _ in range(7):
          t0 = time.perf_counter()
          jax.block_until_ready(jf(x))
          ts.append(time.perf_counter() - t0)
        res[name] = f"{np.median(ts) * 1e3:.3f} ms, {hlo_count(f, x)} HLO instructions"
      print(f"V={vocab} N={n}: " + " | ".join(f"{k}: {v}" for k, v in res.items()), flush=True)


if __name__ == "__main__":
  main()
