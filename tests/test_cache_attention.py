"""The TPU cache-attention kernel (qwen3_vl/cache_attention.py), run here in Pallas' interpret mode:
its cache part merged with the dense new-rows part is text.attend's softmax over both; the shapes it
takes; the dense path wherever the decode loop's context is not set."""

import jax
import jax.numpy as jnp
import numpy as np

from glance_jax.qwen3_vl import cache_attention as ca
from glance_jax.qwen3_vl.text import attend


def _case(seed, b=2, t=16, h=8, kvh=2, hd=128, s=1024, dtype=jnp.float32):
  rng = np.random.default_rng(seed)
  arr = lambda *shape: jnp.asarray(rng.standard_normal(shape), dtype)  # noqa: E731
  q, k, v, kn, vn = arr(b, t, h, hd), arr(b, s, kvh, hd), arr(b, s, kvh, hd), arr(b, t, kvh, hd), arr(b, t, kvh, hd)
  lengths = np.array([700, 0, 37, 1024][:b])                        # row 1: no visible cache slot
  mask = np.repeat((np.arange(s)[None, :] < lengths[:, None])[:, None, :], t, axis=1)
  if t > 3:
    mask[0, 3, 5] = False                                            # a hole: rows need not agree
  new_mask = np.repeat(np.tril(np.ones((t, t), bool))[None], b, axis=0)
  return q, k, v, jnp.asarray(mask), kn, vn, jnp.asarray(new_mask)


def _kernel_attention(q, k, v, mask, kn, vn, new_mask):
  return ca.attention(q, k, v, mask, kn, vn, new_mask, interpret=True)


def test_the_kernel_equals_the_dense_softmax():
  q, k, v, mask, kn, vn, new_mask = _case(0)
  want = attend(q, (k, kn), (v, vn), (mask, new_mask))
  got = _kernel_attention(q, k, v, mask, kn, vn, new_mask)
  assert got.shape == q.shape and got.dtype == q.dtype
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=2e-6, rtol=1e-5)


def test_one_block_gqa_groups_an_ar_step_and_bf16():
  # S = 160 (one block, the AOT test size), 4 q heads a kv head, one new row (an AR step: padded to 8)
  q, k, v, mask, kn, vn, new_mask = _case(1, b=1, t=1, h=8, kvh=2, s=160, dtype=jnp.bfloat16)
  want = attend(q, (k, kn), (v, vn), (mask, new_mask)).astype(jnp.float32)
  got = _kernel_attention(q, k, v, mask, kn, vn, new_mask)
  assert got.dtype == jnp.bfloat16
  np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want), atol=3e-2)
  q, k, v, mask, kn, vn, new_mask = _case(2, b=1, t=13, h=4, kvh=4, s=512)        # rows padded 13 -> 16
  want = attend(q, (k, kn), (v, vn), (mask, new_mask))
  np.testing.assert_allclose(np.asarray(_kernel_attention(q, k, v, mask, kn, vn, new_mask)), np.asarray(want),
                             atol=2e-6, rtol=1e-5)


def test_a_row_that_sees_nothing_is_zero():
  q, k, v, mask, kn, vn, new_mask = _case(3, b=2, t=8, s=512)
  blind = new_mask.at[1, 5].set(False)                       # row 1 of batch row 1: no cache slot, no new row
  got = np.asarray(_kernel_attention(q, k, v, mask, kn, vn, blind))
  assert np.all(got[1, 5] == 0) and np.all(np.isfinite(got))
  want = np.asarray(attend(q, (k, kn), (v, vn), (mask, blind)))
  keep = np.ones(got.shape[:2], bool)
  keep[1, 5] = False
  np.testing.assert_allclose(got[keep], want[keep], atol=2e-6, rtol=1e-5)


def test_the_shapes_it_takes():
  assert ca.supported((1, 64, 32, 128), (1, 2048, 8, 128))          # the 8B's verify
  assert ca.supported((8, 1, 32, 128), (8, 160, 8, 128))            # one block shorter than S_BLOCK
  assert not ca.supported((1, 64, 4, 32), (1, 2048, 2, 32))         # head dim below a lane width
  assert not ca.supported((1, 512, 32, 128), (1, 2048, 8, 128))     # a prompt's rows: dense path
  assert not ca.supported((1, 64, 32, 128), (1, 1000, 8, 128))      # slots not whole blocks


def test_dense_path_outside_the_loops_context_and_off_tpu():
  q, k, v, mask, kn, vn, new_mask = _case(3, b=1, t=4, s=512)
  calls = []

  def dense():
    calls.append(1)
    return attend(q, (k, kn), (v, vn), (mask, new_mask))

  assert not ca.active()
  out = jax.jit(lambda: ca.attend_cached(q, k, v, mask, kn, vn, new_mask, dense=dense)[0])()  # no context: dense
  assert len(calls) == 1
  with ca.sharded_over(None):
    assert ca.active()
    inside, k2, _ = jax.jit(lambda: ca.attend_cached(q, k, v, mask, kn, vn, new_mask, dense=dense))()
  assert not ca.active()
  # inside the context the CPU lowering still takes platform_dependent's default branch: the same numbers
  np.testing.assert_array_equal(np.asarray(inside), np.asarray(out))
