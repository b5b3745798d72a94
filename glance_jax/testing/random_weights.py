"""Re-randomised weights for tests: every matrix ~ N(0, 1/fan_in), norms ~ 1 + N(0, 0.2^2), biases ~
N(0, 0.2^2). Unlike a 0.02-std init, such random targets produce varied text (not one token repeated),
which is what losslessness and acceptance tests need; unlike HF's init, no norm is exactly 1 and no bias
exactly 0, so a weight the port forgot to apply shows up."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx


def lively(params: nnx.State, seed: int = 0) -> nnx.State:
  flat = nnx.to_flat_state(params)
  rng = np.random.default_rng(seed)
  out = []
  for path, var in flat:
    x = var.get_value()
    name = ".".join(str(p) for p in path)
    noise = rng.standard_normal(x.shape).astype(np.float32)
    if "norm" in name and name.endswith("weight"):
      new = 1.0 + 0.2 * noise
    elif x.ndim == 1:
      new = 0.2 * noise
    else:
      new = noise / np.sqrt(np.prod(x.shape[1:]))
    out.append((path, var.replace(value=jax.device_put(jnp.asarray(new, x.dtype), x.sharding))))
  return nnx.from_flat_state(out)
