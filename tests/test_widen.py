"""The function-preserving widening (qwen3_vl/widen.py, head/widen.py): a widened target gives the small
one's logits on image prompts (tied and untied embeddings, deepstack included) and its greedy tokens;
a head widened with it drafts what it drafted, so GLANCE accepts the same blocks; a head's own width
grows `width` times, the target's width^2 times; bad factors and unknown keys are named."""

import jax.numpy as jnp
import numpy as np
import pytest

from glance_jax.head.model import param_count
from glance_jax.head.widen import widen_head, widen_head_state_dict
from glance_jax.qwen3_vl import widen
from tests import decode_fixtures as fx
from tests import oracle


def _logits(target, b):
  ids = np.asarray(b.input_ids)
  return np.asarray(target.prefill(b, target.init_cache(*ids.shape)).logits)


@pytest.mark.parametrize("cfg", [oracle.CONFIG_A, oracle.CONFIG_B], ids=["untied", "tied-deepstack"])
def test_widened_target_keeps_its_logits_and_greedy_tokens(cfg):
  small = fx.lively_target(cfg, seed=3)
  wide = widen.widen_target(small, 2, 4)
  t, w = wide.config.text, small.config.text
  assert (t.hidden_size, t.num_attention_heads, t.num_key_value_heads, t.intermediate_size) == (
      2 * w.hidden_size, 4 * w.num_attention_heads, 4 * w.num_key_value_heads, 4 * w.intermediate_size)
  b = fx.batch(cfg, seed=1, rows=3, with_images=True)
  mask = np.asarray(b.attention_mask)
  la, lb = _logits(small, b), _logits(wide, b)
  assert np.abs(la[mask]).max() > 1.0                   # logits that say something
  np.testing.assert_allclose(lb[mask], la[mask], rtol=1e-5, atol=1e-5)
  np.testing.assert_array_equal(small.generate_greedy(b, 12)[0], wide.generate_greedy(b, 12)[0])


def _draft_logits(head, embed, feats, noise_ids):
  """The head's block logits [B,Q,V] for context features and block tokens (text positions)."""
  from flax import nnx

  from glance_jax.head.model import block_mask
  model = nnx.merge(head.graphdef, head.params)
  b, t, _ = feats.shape
  q = noise_ids.shape[1]
  pos = lambda a, n: jnp.broadcast_to(jnp.arange(a, a + n), (3, b, n))  # noqa: E731
  k, v = model.context_kv(model.project_context(feats), pos(0, t))
  hidden = model(embed[noise_ids], pos(t, q), k, v, block_mask(jnp.full((b,), t), t, q))
  return np.asarray(hidden @ embed.T)


@pytest.mark.parametrize("width", [2, 4])
def test_widened_head_drafts_what_it_drafted(width):
  """The head widened with its (tied) target, fed the widened target's features (each tap tiled)
  and embedding, gives the small head's draft logits; its weights grow ~width times."""
  small = fx.lively_target(oracle.CONFIG_B, seed=4)
  head = fx.lively_head(small, seed=5)
  wide = widen.widen_target(small, width, 2)
  whead = widen_head(head, width, target=wide)
  assert whead.config.num_attention_heads == head.config.num_attention_heads
  embed = lambda t: jnp.asarray(_flat(t.params)["model.language_model.embed_tokens.weight"])  # noqa: E731
  rng = np.random.default_rng(0)
  d, taps = head.config.target_hidden_size, head.config.num_taps
  feats = rng.normal(size=(2, 7, taps, d)).astype(np.float32)
  ids = jnp.asarray(rng.integers(0, oracle.CONFIG_B.text.vocab_size, (2, head.config.block_size)))
  la = _draft_logits(head, embed(small), jnp.asarray(feats.reshape(2, 7, -1)), ids)
  lb = _draft_logits(whead, embed(wide), jnp.asarray(np.tile(feats, width).reshape(2, 7, -1)), ids)
  assert np.abs(la).max() > 1.0
  np.testing.assert_allclose(lb, la, rtol=1e-5, atol=1e-5)
  layers = lambda p: sum(v.size for k, v in _flat(p).items() if k.startswith("layers."))  # noqa: E731
  assert 0.9 * width < layers(whead.params) / layers(head.params) <= width
  assert param_count(whead.params) < param_count(wide.params) / 2


def _flat(params):
  from glance_jax.qwen3_vl.weights import state_tensors
  return state_tensors(params)


def test_bad_factors_and_keys_are_named():
  small = fx.lively_target(oracle.CONFIG_A, seed=3)
  with pytest.raises(ValueError, match="widen: width must be an integer >= 1, got 0"):
    widen.widen_target(small, 0)
  with pytest.raises(ValueError, match="no rule for target key 'model.extra'"):
    widen.widen_state_dict(small.config, {"model.extra": np.zeros(2)}, 2, 2)
  with pytest.raises(ValueError, match="no rule for decoder-layer key 'self_attn.q_proj.bias'"):
    widen.widen_layers({"model.layers.0.self_attn.q_proj.bias": np.zeros(2)}, 2, 2)
  head = fx.lively_head(small, seed=1)
  with pytest.raises(ValueError, match="no rule for head key 'lm_head.weight'"):
    widen_head_state_dict(head.config, {"lm_head.weight": np.zeros((2, 2))}, 2, tied=False)


@pytest.mark.parametrize("layers,with_embed", [(1, False), (2, True)], ids=["midlayer", "midlayers-own-embed"])
def test_widened_eagle3_head_drafts_and_accepts_what_it_did(layers, with_embed):
  """The EAGLE-3 rival widened with its target (eagle3/widen.py): the same first-pass draft logits
  from the widened target's tiled features and embedding, and its dynamic tree decodes the same
  tokens with the same accepted blocks (the memory regime keeps the rival's acceptance too); its
  own weights grow ~width times."""
  from flax import nnx

  from glance_jax.decode.generate import generate
  from glance_jax.eagle3 import Eagle3Checkpoint, Eagle3Config, init_eagle3, vocab_map_from_counts
  from glance_jax.eagle3.widen import widen_eagle3, widen_eagle3_state_dict
  from glance_jax.config import tiny_config
  cfg = tiny_config(vocab_size=64, layers=3, deepstack=(0,), vision_depth=1)   # a random head's top-K covers it
  t = cfg.text
  small = fx.lively_target(cfg, seed=11)
  hcfg = Eagle3Config(hidden_size=t.hidden_size, intermediate_size=2 * t.hidden_size, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=t.head_dim, vocab_size=t.vocab_size,
                      draft_vocab_size=t.vocab_size // 2, num_hidden_layers=layers, rope_theta=t.rope_theta,
                      mrope_section=t.mrope_section, aux_layer_ids=(0, 1, t.num_hidden_layers - 1))
  graphdef, params = init_eagle3(hcfg, seed=2, with_embed=with_embed)
  model = nnx.merge(graphdef, params)
  model.lm_head.weight.set_value(model.lm_head.weight.get_value() * 30.0)   # peaked: deep trees
  d2t, t2d = vocab_map_from_counts(np.random.default_rng(1).integers(0, 50, t.vocab_size), hcfg.draft_vocab_size)
  head = Eagle3Checkpoint(hcfg, graphdef, nnx.split(model)[1], jnp.asarray(d2t, jnp.int32), jnp.asarray(t2d))
  wide = widen.widen_target(small, 2)
  whead = widen_eagle3(head, 2, target=wide)
  assert whead.cfg.hidden_size == 2 * hcfg.hidden_size and whead.cfg.num_attention_heads == 4

  rng = np.random.default_rng(0)
  feats = rng.normal(size=(2, 5, 3, t.hidden_size)).astype(np.float32)
  ids = jnp.asarray(rng.integers(0, t.vocab_size, (2, 5)))
  pos = jnp.broadcast_to(jnp.arange(5), (3, 2, 5))

  def first_pass(h, target, f):
    from glance_jax.eagle3 import causal_mask, init_cache
    m = nnx.merge(h.graphdef, h.params)
    embeds = m.embed(ids, jnp.asarray(_flat(target.params)["model.language_model.embed_tokens.weight"]))
    logits, _, _ = m(m.project(jnp.asarray(f)), embeds, pos, init_cache(h.cfg, 2, 8), jnp.zeros(2, jnp.int32),
                     causal_mask(jnp.zeros(2, jnp.int32), 5, 8))
    return np.asarray(logits)

  la = first_pass(head, small, feats.reshape(2, 5, -1))
  lb = first_pass(whead, wide, np.tile(feats, 2).reshape(2, 5, -1))
  assert np.abs(la).max() > 1.0
  np.testing.assert_allclose(lb, la, rtol=1e-5, atol=1e-4)

  b = fx.batch(cfg, seed=5, rows=8, with_images=True)
  ra = generate(small, b, head=head, method="eagle3", max_new_tokens=24)
  rb = generate(wide, b, head=whead, method="eagle3", max_new_tokens=24)
  acc = np.concatenate(ra.accepted)           # a random head accepts at chance (~K / 64 a round)
  assert (acc > 0).sum() >= 3, np.bincount(acc)
  for x, y, p, q in zip(ra.tokens, rb.tokens, ra.accepted, rb.accepted):
    np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(p, q)
  size = lambda p: sum(v.size for k, v in _flat(p).items() if "layer" in k)  # noqa: E731
  assert 0.9 * 2 < size(whead.params) / size(head.params) <= 2
  with pytest.raises(ValueError, match="no rule for EAGLE-3 head key 'extra.weight'"):
    widen_eagle3_state_dict(hcfg, {"extra.weight": np.zeros(2)}, 2)
