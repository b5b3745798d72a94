"""Prefill attention in query blocks (qwen3_vl/text.py: attend with q_block; the vision tower uses it too) and attention over the
cache and the new rows as separate parts (the decode path) are the dense attention: equal on random
inputs with padded and causal masks, and a target prefilling in blocks of 8 rows still equals
transformers' Qwen3-VL at every position (the unblocked path is tests/test_target_parity.py's)."""

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from glance_jax.qwen3_vl import text


@pytest.mark.parametrize("t,q_block", [(37, 8), (32, 8), (37, 36), (5, 8)])
def test_blocked_attention_equals_dense(t, q_block):
  rng = np.random.default_rng(t + q_block)
  b, s, h, kvh, hd = 2, 48, 6, 2, 16
  q = jnp.asarray(rng.normal(size=(b, t, h, hd)), jnp.float32)
  k, v = (jnp.asarray(rng.normal(size=(b, s, kvh, hd)), jnp.float32) for _ in range(2))
  # causal over the last t of s slots, row 1 left-padded by 3 slots
  rows, cols = np.arange(t)[:, None] + (s - t), np.arange(s)[None]
  mask = np.broadcast_to(cols <= rows, (b, t, s)).copy()
  mask[1, :, :3] = False
  dense = text.attend(q, k, v, jnp.asarray(mask))
  blocked = text.attend(q, k, v, jnp.asarray(mask), q_block=q_block)
  assert blocked.shape == dense.shape
  np.testing.assert_allclose(np.asarray(blocked), np.asarray(dense), rtol=1e-6, atol=1e-6)


def test_attention_over_parts_equals_dense():
  rng = np.random.default_rng(0)
  b, t, s, h, kvh, hd = 2, 5, 40, 4, 2, 8
  q = jnp.asarray(rng.normal(size=(b, t, h, hd)), jnp.float32)
  k, v = (jnp.asarray(rng.normal(size=(b, s, kvh, hd)), jnp.float32) for _ in range(2))
  mask = jnp.asarray(rng.random((b, t, s)) < 0.6).at[:, :, 0].set(True)
  dense = text.attend(q, k, v, mask)
  cut = 33                           # the cache [0, 33) and the 7 rows after it as two parts
  parts = text.attend(q, (k[:, :cut], k[:, cut:]), (v[:, :cut], v[:, cut:]), (mask[..., :cut], mask[..., cut:]))
  np.testing.assert_allclose(np.asarray(parts), np.asarray(dense), rtol=1e-6, atol=1e-6)


def test_prefill_in_blocks_matches_hf(monkeypatch):
  torch = pytest.importorskip("torch")
  pytest.importorskip("transformers")
  from glance_jax.qwen3_vl import weights
  from glance_jax.qwen3_vl.positions import get_rope_index
  from glance_jax.qwen3_vl.target import Target
  from tests import oracle
  cfg = oracle.CONFIG_A
  hf = oracle.hf_model(cfg, seed=3)
  graphdef, params = weights.from_state_dict(cfg, oracle.state_dict_np(hf))
  prompt = oracle.two_image_prompt(cfg, seed=3)
  assert prompt.ids.shape[1] > 8 * 3          # several blocks and a partial one
  pos, delta = get_rope_index(prompt.ids, None, prompt.grid_thw, None, image_token_id=cfg.image_token_id,
                              video_token_id=cfg.video_token_id)
  inputs = types.SimpleNamespace(input_ids=prompt.ids, attention_mask=np.ones_like(prompt.ids, bool),
                                 positions=pos, rope_delta=delta, pixel_values=prompt.pixel_values,
                                 image_grid_thw=prompt.grid_thw)
  monkeypatch.setattr(text, "Q_BLOCK", 8)
  jax.clear_caches()       # Q_BLOCK is read when prefill is traced
  target = Target(cfg, graphdef, params)
  got = np.asarray(target.prefill(inputs, target.init_cache(1, 128)).logits[0])
  jax.clear_caches()
  ids = torch.from_numpy(prompt.ids)
  with torch.no_grad():
    ref = hf(input_ids=ids, attention_mask=torch.ones_like(ids), mm_token_type_ids=(ids == cfg.image_token_id).long(),
             pixel_values=torch.from_numpy(prompt.pixel_values),
             image_grid_thw=torch.from_numpy(prompt.grid_thw)).logits.numpy()[0]
  assert np.abs(got - ref).max() <= 1e-4, np.abs(got - ref).max()
