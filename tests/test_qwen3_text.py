"""Text-only Qwen3 targets (Qwen3ForCausalLM): transformers' checkpoints load, logits and greedy
tokens equal transformers', and every decoding method is lossless on them (batch 1 and padded batches)."""

import types

import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from glance_jax.config import ConfigError, Qwen3VLConfig, tiny_config  # noqa: E402
from glance_jax.decode.generate import generate  # noqa: E402
from glance_jax.qwen3_vl.positions import get_rope_index  # noqa: E402
from glance_jax.qwen3_vl.target import InputError, load_target  # noqa: E402
from tests import decode_fixtures as fx  # noqa: E402
from tests import oracle  # noqa: E402

# GQA with head_dim != hidden/heads in both; the second ties embeddings and has 3 q heads per kv head.
UNTIED = tiny_config(text_only=True)
TIED = tiny_config(vocab_size=300, hidden=48, layers=3, heads=6, kv_heads=2, head_dim=16, intermediate=96,
                   tie=True, text_only=True)
MAX_NEW = 32


CONFIGS = {"untied": UNTIED, "tied": TIED}
_SAVED: dict = {}


def _saved(name: str, tmp_path_factory):
  """A re-randomised transformers Qwen3ForCausalLM saved by save_pretrained as sharded safetensors
  (once per config and session)."""
  if name not in _SAVED:
    cfg = CONFIGS[name]
    hf = oracle.hf_text_model(cfg, seed=5)
    path = tmp_path_factory.mktemp("qwen3") / "tiny-qwen3"
    hf.save_pretrained(path, max_shard_size="100KB")
    _SAVED[name] = types.SimpleNamespace(cfg=cfg, hf=hf, path=path, target=load_target(path, dtype=jnp.float32))
  return _SAVED[name]


@pytest.fixture(scope="module", params=list(CONFIGS))
def saved(request, tmp_path_factory):
  return _saved(request.param, tmp_path_factory)


def text_batch(cfg: Qwen3VLConfig, seed: int, rows: int, max_len: int = 24):
  """Right-padded random prompts of different lengths; positions = token index (no placeholders)."""
  rng = np.random.default_rng(seed)
  ids = np.zeros((rows, max_len), np.int64)
  mask = np.zeros((rows, max_len), bool)
  for r in range(rows):
    n = int(rng.integers(4, max_len + 1)) if r else max_len
    ids[r, :n] = rng.integers(0, 40, n)
    mask[r, :n] = True
  pos, delta = get_rope_index(ids, mask, None, None, image_token_id=cfg.image_token_id,
                              video_token_id=cfg.video_token_id)
  return types.SimpleNamespace(input_ids=ids, attention_mask=mask, positions=pos, rope_delta=delta,
                               pixel_values=None, image_grid_thw=None)


def row(b, r):
  n = int(b.attention_mask[r].sum())
  return types.SimpleNamespace(
      input_ids=b.input_ids[r:r + 1, :n], attention_mask=b.attention_mask[r:r + 1, :n],
      positions=b.positions[:, r:r + 1, :n], rope_delta=b.rope_delta[r:r + 1], pixel_values=None,
      image_grid_thw=None)


def test_config_is_text_only_and_checkpoint_is_sharded(saved):
  assert len(list(saved.path.glob("model-*.safetensors"))) > 1
  cfg = saved.target.config
  assert cfg.text_only and cfg.text == saved.cfg.text and cfg.tie_word_embeddings == saved.cfg.tie_word_embeddings
  has_head = "lm_head" in saved.target.params
  assert has_head == (not saved.cfg.tie_word_embeddings)


def test_positions_are_the_token_index():
  b = text_batch(UNTIED, seed=0, rows=2)
  n = int(b.attention_mask[1].sum())
  for axis in range(3):
    np.testing.assert_array_equal(b.positions[axis, 1, :n], np.arange(n))
  assert (b.rope_delta == 0).all()


def test_fp32_logits_match_transformers(saved):
  b = text_batch(saved.cfg, seed=1, rows=1)
  cache = saved.target.init_cache(1, b.input_ids.shape[1] + 1)
  ours = np.asarray(saved.target.prefill(b, cache).logits)
  with torch.no_grad():
    ref = saved.hf(input_ids=torch.from_numpy(b.input_ids)).logits.numpy()
  assert np.abs(ours - ref).max() < 1e-4, np.abs(ours - ref).max()


def test_greedy_32_tokens_equal_transformers_generate(saved):
  b = text_batch(saved.cfg, seed=2, rows=1)
  ours, _ = saved.target.generate_greedy(b, MAX_NEW, stop_tokens=())
  saved.hf.generation_config.eos_token_id = None
  with torch.no_grad():
    ref = saved.hf.generate(torch.from_numpy(b.input_ids), attention_mask=torch.ones_like(torch.from_numpy(b.input_ids)),
                            max_new_tokens=MAX_NEW, min_new_tokens=MAX_NEW, do_sample=False, pad_token_id=0)
  ref = ref[0, b.input_ids.shape[1]:].numpy()
  assert len(set(ref.tolist())) > 3   # a lively model, not one token repeated
  np.testing.assert_array_equal(ours[0], ref)


@pytest.mark.parametrize("which,method,budget", [
    ("untied", "chain", 15), ("tied", "glance", 63),
    # the other pairings: each config and each method is already covered above (~40 s each)
    pytest.param("untied", "glance", 63, marks=pytest.mark.slow),
    pytest.param("tied", "chain", 15, marks=pytest.mark.slow)])
def test_head_decoding_is_lossless_and_batch_rows_equal_batch_one(tmp_path_factory, which, method, budget):
  saved = _saved(which, tmp_path_factory)
  target = saved.target
  head = fx.lively_head(target, seed=7)
  b = text_batch(saved.cfg, seed=3, rows=3)
  assert len(set(b.attention_mask.sum(1).tolist())) > 1          # rows really are padded differently
  ar = generate(target, b, method="ar", max_new_tokens=MAX_NEW, stop_tokens=())
  out = generate(target, b, head=head, method=method, budget=budget, max_new_tokens=MAX_NEW, stop_tokens=())
  for r in range(3):
    np.testing.assert_array_equal(out.tokens[r], ar.tokens[r])
    alone = generate(target, row(b, r), head=head, method=method, budget=budget, max_new_tokens=MAX_NEW,
                     stop_tokens=())
    np.testing.assert_array_equal(alone.tokens[0], ar.tokens[r])
  greedy, _ = target.generate_greedy(row(b, 0), MAX_NEW, stop_tokens=())
  np.testing.assert_array_equal(ar.tokens[0], greedy[0])


def test_images_on_a_text_only_target_are_one_line_errors(saved):
  b = text_batch(saved.cfg, seed=4, rows=1)
  b.pixel_values = np.zeros((4, 1536), np.float32)
  b.image_grid_thw = np.asarray([[1, 2, 2]])
  cache = saved.target.init_cache(1, 64)
  with pytest.raises(InputError, match="text-only"):
    saved.target.prefill(b, cache)


def test_config_errors_name_the_field():
  d = UNTIED.to_hf_dict()
  assert Qwen3VLConfig.from_hf_dict(d) == UNTIED
  with pytest.raises(ConfigError, match="sliding"):
    Qwen3VLConfig.from_hf_dict({**d, "use_sliding_window": True})
  with pytest.raises(ConfigError, match="rope_type 'yarn'"):
    Qwen3VLConfig.from_hf_dict({**d, "rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6}})
  with pytest.raises(ConfigError, match="qwen3_vl.*qwen3"):
    Qwen3VLConfig.from_hf_dict({**d, "model_type": "llama"})
