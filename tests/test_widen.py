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
