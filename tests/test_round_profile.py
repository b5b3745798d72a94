"""benchmarks/round_profile.py: kernels named from the compiled HLO, and a short profile of the real loop."""

import jax
import jax.numpy as jnp

from benchmarks import round_profile as rp


def test_kernel_names_reads_op_names_through_fusions():
  def f(x, w):
    return jnp.tanh(x @ w).sum(axis=-1)

  x, w = jnp.ones((4, 8)), jnp.ones((8, 16))
  names = rp.kernel_names(jax.jit(f).lower(x, w).compile().as_text())
  labels = {label for label, _ in names.values()}
  assert any("dot_general" in label for label in labels)
  assert any(shape == "f32[4]" for _, shape in names.values())   # the output of the reduce


def test_profile_of_the_testbed_loop(capsys):
  rp.main(["--method", "chain", "--task", "table", "--calls", "2", "--max-new-tokens", "8", "--top", "5"])
  out = capsys.readouterr().out
  first = out.splitlines()[0]
  assert first.startswith("chain on table[0]: 8 tokens in 1 rounds per call")
  rows = [line for line in out.splitlines() if line.startswith("| ") and not line.startswith("| ms")]
  assert len(rows) == 5 and any("dot_general" in r for r in rows)
  assert float(rows[0].split("|")[1]) > 0
