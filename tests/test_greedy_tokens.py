"""engine.greedy_tokens is jnp.argmax (first maximum, NaN counts as the maximum), just faster on CPU."""

import jax
import jax.numpy as jnp
import numpy as np

from glance_jax.qwen3_vl.engine import greedy_tokens


def test_equals_jnp_argmax_with_ties_nans_and_infs():
  rng = np.random.default_rng(0)
  x = rng.integers(-3, 4, (6, 5, 37)).astype(np.float32)   # many ties
  x[0, 0] = -np.inf
  x[0, 1, 5] = np.inf
  x[0, 1, 9] = np.inf
  x[1, 2, 7] = np.nan
  x[1, 3, [3, 30]] = np.nan
  x[2, 0] = np.nan
  x[3, 0, -1] = 100.0
  for a in (x, x[0, 0], rng.standard_normal((2, 151936)).astype(np.float32)):
    want = np.asarray(jnp.argmax(jnp.asarray(a), axis=-1))
    got = np.asarray(jax.jit(greedy_tokens)(jnp.asarray(a)))
    assert got.dtype == np.int32 and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
