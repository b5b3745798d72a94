"""Tree builder alone: build_tree (enumerated where its static candidate set is small, else the
level-synchronous scan), the scan itself (tree.build_tree_beam) and the first best-first builder
(tree.build_tree_best_first), vmapped over a batch of 1, on [15, V] random log-marginals. Prints
per builder: the median ms of 7 jitted calls (after a warm-up; includes dispatch), the us per
build inside a jitted loop of 200 builds (as in the decode loop), and the compiled HLO's
instruction count.

    python benchmarks/tree_build.py
"""

import pathlib
import sys
import time

if __package__ in (None, ""):
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from glance_jax.decode import tree as T  # noqa: E402


def hlo_count(f, x) -> int:
  txt = jax.jit(f).lower(x).compile().as_text()
  return sum(1 for line in txt.splitlines() if " = " in line and not line.strip().startswith("//"))


LOOP = 200


def _in_loop(f):
  """LOOP builds inside one jitted fori_loop, as the decode loop runs them."""
  @jax.jit
  def run(x):
    def body(i, acc):  # a slightly different input each build: nothing is hoisted out of the loop
      return acc + jnp.sum(f(x + i.astype(x.dtype) * 1e-7).tokens)
    return jax.lax.fori_loop(0, LOOP, body, jnp.int32(0))
  return run


def _median_s(jf, x, calls: int = 7) -> float:
  jax.block_until_ready(jf(x))
  ts = []
  for _ in range(calls):
    t0 = time.perf_counter()
    jax.block_until_ready(jf(x))
    ts.append(time.perf_counter() - t0)
  return float(np.median(ts))


def main():
  for vocab in (512, 32000):
    for n in (15, 31, 63):
      x = jax.nn.log_softmax(jax.random.normal(jax.random.key(0), (1, 15, vocab)) * 3, -1)
      res = {}
      for name, fn in (("best-first", T.build_tree_best_first), ("scan", T.build_tree_beam),
                       ("build_tree", T.build_tree)):
        f = jax.vmap(lambda lq, fn=fn: fn(lq, num_nodes=n))
        res[name] = (f"{_median_s(jax.jit(f), x) * 1e3:.3f} ms, {_median_s(_in_loop(f), x) / LOOP * 1e6:.1f} us "
                     f"in a loop, {hlo_count(f, x)} HLO instructions")
      print(f"V={vocab} N={n}: " + " | ".join(f"{k}: {v}" for k, v in res.items()), flush=True)


if __name__ == "__main__":
  main()
