"""The training objective: batch layout, anchors, the packed block mask, block inputs / targets /
weights, and the packed multi-block head pass equal to running each block alone."""

import dataclasses
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from glance_jax.head.config import HeadConfig
from glance_jax.qwen3_vl.positions import get_rope_index
from glance_jax.train import batch as tb
from glance_jax.train import objective as obj
from glance_jax.train.step import make_feature_fn
from tests import train_fixtures as fx

CFG = fx.TARGET_CFG
BK = 4
FAST = {"xla_backend_optimization_level": 0}   # halves CPU compile time; fp32 all the same


def _jit(f, **kw):
  return jax.jit(f, compiler_options=FAST, **kw)


@pytest.fixture(scope="module")
def setup():
  target = fx.lively_target(CFG, 0)
  hc = HeadConfig.for_target(CFG, num_layers=2, block_size=BK)
  head = nnx.merge(*fx.lively_head(hc, 2))
  exs = fx.examples(CFG, 2, seed=0)
  batch = tb.shard_batch(tb.collate(exs, CFG, seq_len=fx.SEQ_LEN, max_patches=fx.MAX_PATCHES))
  feats = make_feature_fn(target.graphdef, hc.target_layer_ids, compiler_options=FAST)(
      target.params, batch)
  return types.SimpleNamespace(target=target, hc=hc, head=head, exs=exs, batch=batch, feats=feats)


# --- batches ----------------------------------------------------------------------------------------

def test_collate_layout(setup):
  exs, b = setup.exs, jax.tree.map(np.asarray, setup.batch)
  n = [len(e.input_ids) for e in exs]
  assert b.input_ids.shape == (2, fx.SEQ_LEN) and b.positions.shape == (3, 2, fx.SEQ_LEN)
  for r, e in enumerate(exs):
    np.testing.assert_array_equal(b.input_ids[r, :n[r]], e.input_ids)
    assert (b.input_ids[r, n[r]:] == 0).all() and b.attention_mask[r].sum() == n[r]
    np.testing.assert_array_equal(b.loss_mask[r, :n[r]], e.loss_mask)
    pos, _ = get_rope_index(e.input_ids[None], None, e.image_grid_thw, None,
                            image_token_id=CFG.image_token_id, video_token_id=CFG.video_token_id)
    np.testing.assert_array_equal(b.positions[:, r, :n[r]], pos[:, 0])
  n_real = exs[0].pixel_values.shape[0]                                   # row 1 has no image
  assert b.pixel_values.shape == (fx.MAX_PATCHES, CFG.vision.patch_dim)
  assert (b.pixel_values[n_real:] == 0).all() and (b.pos_weight[n_real:] == 0).all()
  assert (b.segment[n_real:] == b.segment[:n_real].max() + 1).all()


def test_collate_errors():
  exs = fx.examples(CFG, 2, seed=0)
  with pytest.raises(ValueError, match="seq_len 8"):
    tb.collate(exs, CFG, seq_len=8, max_patches=64)
  with pytest.raises(ValueError, match="drop image placeholders"):
    tb.collate(exs, CFG, seq_len=4, max_patches=64, truncate=True)
  with pytest.raises(ValueError, match="max_patches"):
    tb.collate(exs, CFG, seq_len=32)
  with pytest.raises(ValueError, match="multiple of"):
    tb.collate(exs, CFG, seq_len=32, max_patches=30)
  with pytest.raises(ValueError, match="24 image patches > max_patches 20"):
    tb.collate(exs, CFG, seq_len=32, max_patches=20)
  text = fx.examples(CFG, 2, seed=0, images=False)
  cut = tb.collate(text, CFG, seq_len=12, truncate=True)
  assert cut.input_ids.shape == (2, 12) and cut.pixel_values is None
  ex = dataclasses.replace(text[0], loss_mask=text[0].loss_mask.copy())
  ex.loss_mask[:] = True
  ids = ex.input_ids.copy()
  ids[0] = CFG.image_token_id                                             # a stray placeholder
  with pytest.raises(ValueError, match="image"):
    tb.collate([dataclasses.replace(ex, input_ids=ids)], CFG, seq_len=32)


def test_padded_patches_match_unpadded_tower(setup):
  """Padding the patches (own segment, zero weights) leaves every real merged row unchanged."""
  t = setup.target
  model = nnx.merge(t.graphdef, t.params)
  ex = setup.exs[0]
  tower = _jit(model.encode_images)
  ref, ref_ds = tower(jnp.asarray(ex.pixel_values), t.vision_arrays(ex.image_grid_thw))
  b = setup.batch
  got, got_ds = tower(b.pixel_values, b.vision_meta)
  m = ref.shape[0]
  np.testing.assert_allclose(got[:m], ref, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(got_ds[:, :m], ref_ds, rtol=1e-5, atol=1e-5)


def test_features_are_the_decoding_prefill_taps(setup):
  """Training features = what decoding's prefill taps (images unpadded, engine path)."""
  t, exs = setup.target, setup.exs
  b = jax.tree.map(np.asarray, setup.batch)
  inputs = types.SimpleNamespace(
      input_ids=b.input_ids, attention_mask=b.attention_mask, positions=b.positions,
      pixel_values=exs[0].pixel_values, image_grid_thw=exs[0].image_grid_thw)
  out = t.prefill(inputs, t.init_cache(2, fx.SEQ_LEN), tap_layers=setup.hc.target_layer_ids)
  ref = np.concatenate([np.asarray(out.taps[i]) for i in setup.hc.target_layer_ids], -1)
  valid = b.attention_mask
  np.testing.assert_allclose(np.asarray(setup.feats)[valid], ref[valid], rtol=1e-5, atol=1e-5)


# --- anchors, masks, targets -----------------------------------------------------------------------

def _loss_mask():
  lm = np.zeros((3, 24), bool)
  lm[0, 5:21] = True
  lm[0, 12] = False                 # a hole: 11 and 12 are not anchors
  lm[1, [3, 4, 9, 10, 11]] = True   # 3 candidates (3, 9, 10) < num_anchors
  return lm                          # row 2: no response at all


def test_sample_anchors_valid_sorted_distinct():
  lm = _loss_mask()
  cand = [set(np.flatnonzero(r[:-1] & r[1:]).tolist()) for r in lm]
  for seed in range(20):
    a, v = jax.device_get(obj.sample_anchors(jax.random.key(seed), jnp.asarray(lm), 6))
    assert a.shape == v.shape == (3, 6) and a.dtype == np.int32
    for r in range(3):
      got = a[r][v[r]]
      assert set(got.tolist()) <= cand[r]
      assert len(set(got.tolist())) == len(got) == min(6, len(cand[r]))
      assert (np.diff(got) > 0).all()
      assert v[r][: len(got)].all() and (a[r][~v[r]] == 0).all()
  assert cand[1] == {3, 9, 10} and cand[2] == set()
  a1, _ = obj.sample_anchors(jax.random.key(1), jnp.asarray(lm), 6)
  a2, _ = obj.sample_anchors(jax.random.key(2), jnp.asarray(lm), 6)
  assert not np.array_equal(a1[0], a2[0])                                # fresh each step
  a, v = obj.sample_anchors(jax.random.key(0), jnp.asarray(lm), 40)      # more than S - 1
  assert a.shape == (3, 40) and int(v[0].sum()) == len(cand[0])


def test_anchor_draw_is_uniform():
  lm = _loss_mask()[:1]
  n_cand = int((lm[0, :-1] & lm[0, 1:]).sum())                            # 14
  keys = jax.random.split(jax.random.key(0), 4000)
  a, v = jax.vmap(lambda k: obj.sample_anchors(k, jnp.asarray(lm), 4))(keys)
  counts = np.bincount(np.asarray(a)[np.asarray(v)], minlength=24)
  freq = counts[counts > 0] / 4000
  assert len(freq) == n_cand
  np.testing.assert_allclose(freq, 4 / n_cand, atol=0.04)


def test_packed_block_mask_semantics():
  anchors = jnp.array([[2, 5, 0]])
  valid = jnp.array([[True, True, False]])
  m = np.asarray(obj.packed_block_mask(anchors, valid, 8, 2))            # [1, 6, 8 + 6]
  assert m.shape == (1, 6, 14)
  ctx, blk = m[0, :, :8], m[0, :, 8:]
  np.testing.assert_array_equal(ctx[0], ctx[1])                           # same block, same view
  np.testing.assert_array_equal(ctx[0], np.arange(8) < 2)                 # strictly before anchor 2
  np.testing.assert_array_equal(ctx[2], np.arange(8) < 5)
  assert not ctx[4:].any()                                                # invalid: no context
  np.testing.assert_array_equal(blk, np.kron(np.eye(3, dtype=bool), np.ones((2, 2), bool)))


def test_block_inputs_targets_and_weights():
  s, mask_id = 12, 99
  ids = jnp.arange(100, 100 + s)[None]
  lm = jnp.asarray((np.arange(s) >= 4) & (np.arange(s) < 10))[None]       # response 4..9
  pos = jnp.broadcast_to(jnp.arange(s)[None, None] + 7, (3, 1, s)).at[:, :, 10:].set(0)  # padding
  anchors = jnp.array([[4, 8, 0]])
  valid = jnp.array([[True, True, False]])
  noise, npos = obj.block_inputs(ids, pos, anchors, valid, block_size=BK, mask_token_id=mask_id)
  np.testing.assert_array_equal(noise[0], [104, 99, 99, 99, 108, 99, 99, 99, 99, 99, 99, 99])
  # anchor + k on all axes: equals the target's positions on response tokens, and keeps counting
  # past the response where the padding holds 0
  np.testing.assert_array_equal(npos[:, 0, :4], pos[:, 0, 4:8])
  np.testing.assert_array_equal(npos[0, 0, 4:8], [15, 16, 17, 18])
  labels, sup = obj.block_targets(ids, lm, anchors, valid, block_size=BK)
  np.testing.assert_array_equal(labels[0, 0], [104, 105, 106, 107])
  np.testing.assert_array_equal(labels[0, 1], [108, 109, 110, 111])
  np.testing.assert_array_equal(sup[0], [[0, 1, 1, 1], [0, 1, 0, 0], [0, 0, 0, 0]])
  w = obj.decay_weights(16, 7.0)
  assert w[0] == 0 and w[1] == 1 and np.isclose(w[8], np.exp(-1)) and (np.diff(w[1:]) < 0).all()
  assert obj.default_gamma(16) == 7.0
  with pytest.raises(ValueError, match="pass gamma"):
    obj.default_gamma(5)


# --- the packed pass and the loss ------------------------------------------------------------------

def test_packed_pass_equals_each_block_alone(setup):
  head, t, b, hc = setup.head, setup.target, setup.batch, setup.hc
  model = nnx.merge(t.graphdef, t.params)
  emb, lmw = model.embed_weight, model.lm_head_weight
  anchors, valid = obj.sample_anchors(jax.random.key(3), b.loss_mask, 6)
  kw = dict(block_size=BK, mask_token_id=hc.mask_token_id)
  got = np.asarray(_jit(lambda f: obj.packed_logits(head, emb, lmw, f, b, anchors, valid, **kw))(
      setup.feats))                                                       # [B, A, Bk, V]
  rows = np.repeat(np.arange(2), 6)[np.asarray(valid).reshape(-1)]
  anc = np.asarray(anchors).reshape(-1)[np.asarray(valid).reshape(-1)]
  assert len(anc) == 12
  alone = _jit(jax.vmap(lambda r, a: obj.head_logits_single_block(
      head, emb, lmw, setup.feats[r], b.positions[:, r], b.input_ids[r], a, **kw)))
  ref = np.asarray(alone(jnp.asarray(rows), jnp.asarray(anc)))            # [12, Bk, V]
  np.testing.assert_allclose(got[np.asarray(valid)], ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
  # and literally alone: the head given only the rows before the anchor
  r, a = int(rows[-1]), int(anc[-1])
  sliced = _jit(lambda f: obj.head_logits_single_block(
      head, emb, lmw, f, b.positions[:, r], b.input_ids[r], a, sliced=True, **kw))(setup.feats[r])
  np.testing.assert_allclose(got[r, -1], sliced, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


def test_loss_is_the_decayed_weighted_ce(setup):
  head, t, b, hc = setup.head, setup.target, setup.batch, setup.hc
  model = nnx.merge(t.graphdef, t.params)
  emb, lmw = model.embed_weight, model.lm_head_weight
  anchors, valid = obj.sample_anchors(jax.random.key(4), b.loss_mask, 5)

  @_jit
  def losses(f):
    kw = dict(block_size=BK, gamma=3.0, mask_token_id=hc.mask_token_id)
    out = [obj.head_loss(head, emb, lmw, f, b, anchors, valid, chunk=c, head_group=g, **kw)
           for c, g in ((1, None), (2, None), (5, None), (2, 2))]            # CE chunks, head groups
    logits = obj.packed_logits(head, emb, lmw, f, b, anchors, valid, block_size=BK,
                               mask_token_id=hc.mask_token_id)
    # rows without any response: no valid block, a finite zero loss (invalid blocks see themselves)
    none = b.replace(loss_mask=jnp.zeros_like(b.loss_mask))
    a0, v0 = obj.sample_anchors(jax.random.key(0), none.loss_mask, 5)
    return out, logits, obj.head_loss(head, emb, lmw, f, none, a0, v0, chunk=2, **kw)

  out, logits, (loss0, m0) = losses(setup.feats)
  assert float(loss0) == 0.0 and float(m0["accept_len"]) == 0.0 and int(m0["num_blocks"]) == 0
  labels, sup = obj.block_targets(b.input_ids, b.loss_mask, anchors, valid, block_size=BK)
  ce = -np.take_along_axis(np.asarray(jax.nn.log_softmax(logits)), np.asarray(labels)[..., None],
                           -1)[..., 0]
  w = np.asarray(sup) * obj.decay_weights(BK, 3.0)
  ref = (ce * w).sum() / w.sum()
  for loss, m in out:
    np.testing.assert_allclose(loss, ref, rtol=1e-5)
  m = out[0][1]
  hit = (np.argmax(np.asarray(logits), -1) == np.asarray(labels)) & np.asarray(sup)
  acc = hit[..., 1:].sum((0, 1)) / np.maximum(np.asarray(sup)[..., 1:].sum((0, 1)), 1)
  np.testing.assert_allclose(m["acc_per_offset"], acc, rtol=1e-6)
  np.testing.assert_allclose(m["tau_implied"], 1 + np.cumprod(acc).sum(), rtol=1e-6)
  assert int(m["num_blocks"]) == int(np.asarray(valid).sum())
  assert 1.0 <= float(m["accept_len"]) <= BK


def test_grouped_head_pass_has_the_same_gradient(setup):
  """head_group runs the blocks in checkpointed groups; value and gradient are unchanged."""
  t, b, hc = setup.target, setup.batch, setup.hc
  model = nnx.merge(t.graphdef, t.params)
  gd, params = nnx.split(setup.head)
  anchors, valid = obj.sample_anchors(jax.random.key(5), b.loss_mask, 5)

  @_jit
  def grads(p, f):
    def loss(p, group):
      return obj.head_loss(nnx.merge(gd, p), model.embed_weight, model.lm_head_weight, f, b, anchors,
                           valid, block_size=BK, gamma=3.0, mask_token_id=hc.mask_token_id, chunk=2,
                           head_group=group)[0]
    return [jax.value_and_grad(loss)(p, g) for g in (None, 2)]

  (l1, g1), (l2, g2) = grads(params, setup.feats)
  np.testing.assert_allclose(l2, l1, rtol=1e-6)
  jax.tree.map(lambda x, y: np.testing.assert_allclose(y, x, rtol=1e-4, atol=1e-6), g1, g2)


def test_block_size_or_features_that_disagree_with_the_head(setup):
  head, t, b, hc = setup.head, setup.target, setup.batch, setup.hc
  model = nnx.merge(t.graphdef, t.params)
  anchors, valid = obj.sample_anchors(jax.random.key(0), b.loss_mask, 4)
  kw = dict(gamma=3.0, mask_token_id=hc.mask_token_id)
  with pytest.raises(ValueError, match="block_size 8 disagrees with the head's configured block_size 4"):
    obj.head_loss(head, model.embed_weight, model.lm_head_weight, setup.feats, b, anchors, valid,
                  block_size=8, **kw)
  with pytest.raises(ValueError, match="fc takes 2 taps"):
    obj.head_loss(head, model.embed_weight, model.lm_head_weight, setup.feats[..., :64], b, anchors,
                  valid, block_size=BK, **kw)


# --- feature cache ----------------------------------------------------------------------------------

def test_feature_cache_roundtrip(tmp_path, setup):
  b = jax.tree.map(np.asarray, setup.batch)
  ids = [e.example_id for e in setup.exs]
  cache = tb.FeatureCache(tmp_path / "feats", tap_layers=setup.hc.target_layer_ids)
  cache.put_batch(ids, np.asarray(setup.feats), b.attention_mask.sum(1))
  assert ids[0] in cache and "nope" not in cache
  got = cache.collate(ids, fx.SEQ_LEN)
  valid = b.attention_mask
  np.testing.assert_array_equal(got[valid], np.asarray(setup.feats)[valid])
  assert (got[~valid] == 0).all()
  again = tb.FeatureCache(tmp_path / "feats", tap_layers=setup.hc.target_layer_ids)
  assert again.feature_dim == got.shape[-1]
  with pytest.raises(ValueError, match="tap layers"):
    tb.FeatureCache(tmp_path / "feats", tap_layers=(0, 2))
  with pytest.raises(KeyError, match="nope"):
    cache.get("nope")
  with pytest.raises(ValueError, match="width"):
    cache.put("other", np.zeros((3, 5), np.float32))
  half = tb.FeatureCache(tmp_path / "f16", tap_layers=(1, 3), dtype="float16")
  half.put("a/b c", np.ones((2, 4)))                                      # unsafe name -> hashed
  assert half.get("a/b c").dtype == np.float16 and half.path("a/b c").parent == tmp_path / "f16"
