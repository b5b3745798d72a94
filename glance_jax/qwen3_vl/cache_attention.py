"""Decode / verify attention as a Pallas TPU kernel: the scores stay on chip.

Why: at T new rows (a verify's 16-64, AR's 1) over S cache slots, the dense path (text.attend)
computes f32 scores [B,K,G,T,S] in one fusion and normalises them in another; v5p's compiler writes
them to HBM between the two and reads them back twice (0.86 GB a glance-63 iteration at batch 1 on
v5p:2x2x1, 8.6 GB at batch 8: docs/tpu.md). Here one kernel walks the cache in blocks of S_BLOCK
slots with an online softmax (running max m, sum l, unnormalised output acc in VMEM scratch), takes
the T new rows' keys as one more block at the last step, and writes the normalised output: HBM sees
q, the cache, the new keys, the masks and the result only.

Layout inside: q [B,T,H,hd] -> [B,K,G*T,hd] (the G query heads of a kv head stacked as rows, so K/V
are read once per kv head: GQA without repeating them); the cache read as it is, [B,S,K,hd] blocks
of S_BLOCK slots and all local kv heads (the layout the decode loop carries it in: a kernel that
asked for [B,K,S,hd] or [B,S,K*hd] made the compiler convert every layer's cache to it and back,
0.15-0.4 GB a glance-63 iteration on v5p); masks as int8. Rows and new keys are padded to
multiples of ROW_ALIGN (Mosaic rejected an AR step's G*T = 4 bf16 rows); padded rows see nothing
and are dropped. The grid is (B, S / S_BLOCK); each step does every local kv head. m and l are kept
replicated over 128 lanes (the TPU's vector width), as jax's own flash-attention kernel keeps them.

Sharded programs: inside `sharded_over(mesh)` (the decode loop traces its rounds there) the kernel
runs under shard_map on each device's own batch rows and kv heads, nothing gathered. Outside it the
dense path stays: the engine's single steps (Target.decode, generate_greedy) do not know the mesh,
and an opaque custom call left to the partitioner would have the cache gathered onto every device.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import Mesh, PartitionSpec as P

from glance_jax import sharding as shd

S_BLOCK = 512          # cache slots a grid step: scores [G*T, 512] f32 = 512 KB at G*T = 256
LANES = 128
ROW_ALIGN = 8
MAX_ROWS = 256         # new rows a call: decode and verify (N <= 255); prompts take the dense path
NEG = float(jnp.finfo(jnp.float32).min)


def supported(q_shape, k_shape) -> bool:
  """Shapes the kernel takes: decode / verify rows, whole S blocks, a lane-wide head dim, kv heads
  dividing the q heads. Its VMEM: per local kv head G*T rows x (hd + 2 x 128) f32 of scratch."""
  _, t, h, hd = q_shape
  s, kvh = k_shape[1], k_shape[2]
  return (t <= MAX_ROWS and hd % LANES == 0 and s % 8 == 0 and s % min(S_BLOCK, s) == 0
          and h % kvh == 0)


def _kernel(q_ref, k_ref, v_ref, mask_ref, kn_ref, vn_ref, new_mask_ref, o_ref, acc_sc, m_sc, l_sc, *,
            kv_heads: int, groups: int, scale: float):
  step = pl.program_id(1)

  @pl.when(step == 0)
  def _init():
    m_sc[...] = jnp.full(m_sc.shape, NEG, jnp.float32)
    l_sc[...] = jnp.zeros(l_sc.shape, jnp.float32)
    acc_sc[...] = jnp.zeros(acc_sc.shape, jnp.float32)

  def update(h, k, v, visible):
    """The online softmax of kv head h over one key block: k/v [R,hd], visible [G*T,R]."""
    s = jax.lax.dot_general(q_ref[0, h], k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32) * scale
    s = jnp.where(visible, s, NEG)                                         # [G*T, R]
    m_prev = m_sc[h]                                                       # [G*T, LANES], lanes equal
    m_new = jnp.maximum(m_prev, jnp.max(s, axis=-1, keepdims=True))
    p = jnp.where(visible, jnp.exp(s - m_new[:, :1]), 0.0)                 # masked keys add nothing
    alpha = jnp.exp(m_prev - m_new)
    l_sc[h] = alpha * l_sc[h] + jnp.sum(p, axis=-1, keepdims=True)
    pv = jax.lax.dot_general(p.astype(v.dtype), v, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32)
    acc_sc[h] = acc_sc[h] * alpha[:, :1] + pv                              # [G*T, hd]
    m_sc[h] = m_new

  def rows(mask_block):                                                    # [T, R] -> [G*T, R], rows (g, t)
    visible = mask_block.astype(jnp.int32) != 0
    return jnp.concatenate([visible] * groups, axis=0)

  cache_visible = rows(mask_ref[0])
  for h in range(kv_heads):                                                # static: the local kv heads
    update(h, k_ref[0, :, h, :], v_ref[0, :, h, :], cache_visible)

  @pl.when(step == pl.num_programs(1) - 1)
  def _new_rows_and_emit():
    new_visible = rows(new_mask_ref[0])
    for h in range(kv_heads):
      update(h, kn_ref[0, :, h, :], vn_ref[0, :, h, :], new_visible)
      l = l_sc[h][:, :1]
      o_ref[0, h] = (acc_sc[h] / jnp.where(l > 0, l, 1.0)).astype(o_ref.dtype)   # a row seeing nothing: 0


def _pad_to(x, axis: int, size: int):
  pad = [(0, 0)] * x.ndim
  pad[axis] = (0, size - x.shape[axis])
  return jnp.pad(x, pad) if size > x.shape[axis] else x


def _call(q, k, v, mask, k_new, v_new, new_mask, interpret=False):
  """The kernel on (local) arrays: q [B,T,H,hd], cache k/v [B,S,K,hd], mask bool [B,T,S], new rows'
  k/v [B,T,K,hd], new_mask bool [B,T,T] -> [B,T,H,hd] in q's dtype."""
  b, t_in, h, hd = q.shape
  s, kvh = k.shape[1], k.shape[2]
  g, sb = h // kvh, min(S_BLOCK, s)
  t = -(-t_in // ROW_ALIGN) * ROW_ALIGN                    # query rows and new keys, whole sublane tiles
  q, mask = _pad_to(q, 1, t), _pad_to(mask, 1, t)
  k_new, v_new, new_mask = _pad_to(k_new, 1, t), _pad_to(v_new, 1, t), _pad_to(_pad_to(new_mask, 1, t), 2, t)
  rows = g * t
  qk = q.reshape(b, t, kvh, g, hd).transpose(0, 2, 3, 1, 4).reshape(b, kvh, rows, hd)
  kernel = functools.partial(_kernel, kv_heads=kvh, groups=g, scale=hd ** -0.5)
  whole = lambda *shape: pl.BlockSpec((1,) + shape, lambda i, j: (i,) + (0,) * len(shape))  # noqa: E731
  o = pl.pallas_call(
      kernel,
      grid=(b, s // sb),
      in_specs=[whole(kvh, rows, hd),
                pl.BlockSpec((1, sb, kvh, hd), lambda i, j: (i, j, 0, 0)),
                pl.BlockSpec((1, sb, kvh, hd), lambda i, j: (i, j, 0, 0)),
                pl.BlockSpec((1, t, sb), lambda i, j: (i, 0, j)),
                whole(t, kvh, hd), whole(t, kvh, hd), whole(t, t)],
      out_specs=whole(kvh, rows, hd),
      out_shape=jax.ShapeDtypeStruct((b, kvh, rows, hd), q.dtype),
      scratch_shapes=[pltpu.VMEM((kvh, rows, hd), jnp.float32), pltpu.VMEM((kvh, rows, LANES), jnp.float32),
                      pltpu.VMEM((kvh, rows, LANES), jnp.float32)],
      compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
      interpret=interpret,
      name="cache_attention",
  )(qk, k, v, mask.astype(jnp.int8), k_new, v_new, new_mask.astype(jnp.int8))
  return o.reshape(b, kvh, g, t, hd).transpose(0, 3, 1, 2, 4).reshape(b, t, h, hd)[:, :t_in]


_UNSET = object()
_MESH = contextvars.ContextVar("cache_attention_mesh", default=_UNSET)


@contextlib.contextmanager
def sharded_over(mesh: Mesh | None):
  """Within: decode / verify attention traced for TPU takes the kernel, split over `mesh` by the
  cache's layout (None: one device). The decode loop traces its rounds inside it (its LoopConfig
  holds the mesh); outside it the dense path stays."""
  token = _MESH.set(mesh)
  try:
    yield
  finally:
    _MESH.reset(token)


def active() -> bool:
  return _MESH.get() is not _UNSET


def attention(q, k, v, mask, k_new, v_new, new_mask, *, interpret: bool = False):
  """One softmax over the cache's slots and the new rows (text.attend's, with k, v and mask the
  parts (cache, new)): q [B,T,H,hd], k/v [B,S,K,hd], mask bool [B,T,S], k_new/v_new [B,T,K,hd],
  new_mask bool [B,T,T] -> [B,T,H,hd]. Each device runs the kernel on its own batch rows and kv
  heads (the cache's layout: sharding.BATCH, KV_HEADS). `interpret`: on CPU (tests)."""
  mesh = _MESH.get()
  call = functools.partial(_call, interpret=interpret)
  if mesh is _UNSET or mesh is None:
    return call(q, k, v, mask, k_new, v_new, new_mask)
  kv = shd.logical_to_spec((shd.BATCH, None, shd.KV_HEADS, None), k.shape, mesh)
  rows, heads = kv[0], kv[2]
  qs, ms = P(rows, None, heads, None), P(rows, None, None)
  return jax.shard_map(call, mesh=mesh, in_specs=(qs, kv, kv, ms, kv, kv, ms), out_specs=qs,
                       check_vma=False)(q, k, v, mask, k_new, v_new, new_mask)


def attend_cached(q, k_cache, v_cache, cache_mask, k_new, v_new, new_mask, dense):
  """text.Attention's decode / verify attention: the kernel when traced for TPU inside the decode
  loop's context and the shapes fit, else `dense()` (text.attend on the parts).
  -> (o [B,T,H,hd], k_cache, v_cache): write the new rows into the caches returned.

  On TPU the caches come back through an optimization barrier with the output: the kernel reads
  the new rows too, and without it the scheduler put the in-place write of those rows before the
  kernel and kept a copy of every layer's old cache for it (0.08 GB written a v5p AR iteration)."""
  if not (active() and supported(q.shape, k_cache.shape)):
    return dense(), k_cache, v_cache

  def on_tpu():
    o = attention(q, k_cache, v_cache, cache_mask, k_new, v_new, new_mask).astype(v_cache.dtype)
    return jax.lax.optimization_barrier((o, k_cache, v_cache))

  return jax.lax.platform_dependent(tpu=on_tpu, default=lambda: (dense(), k_cache, v_cache))
