"""A DFlash head in z-lab's released layout (config.json as published + model.safetensors, written here
from the torch restatement of z-lab's layer in tests/test_head.py) drafts on a tiny text-only Qwen3
target exactly as z-lab's `dflash_generate` does, and decodes losslessly; heads that do not fit the
target are one-line errors naming the field."""

import json
import types

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from glance_jax.config import tiny_config  # noqa: E402
from glance_jax.decode.generate import generate
from glance_jax.head import Head  # noqa: E402
from glance_jax.head import HeadConfig, block_mask  # noqa: E402
from glance_jax.io import CheckpointError, save_tensors  # noqa: E402
from glance_jax.qwen3_vl.positions import get_rope_index  # noqa: E402
from glance_jax.qwen3_vl.target import load_target  # noqa: E402
from tests import oracle  # noqa: E402
from tests.test_head import _torch_reference  # noqa: E402

TARGET = tiny_config(vocab_size=300, hidden=48, layers=6, heads=6, kv_heads=2, head_dim=16, intermediate=96,
                     tie=True, text_only=True)
LAYER_IDS = [1, 3, 4]
MASK_ID = 290
BLOCK = 16
MAX_NEW = 40


def released_config(num_layers: int = 2, **overrides) -> dict:
  """The config.json of z-lab/Qwen3-*-DFlash-b16 as published (a Qwen3Config + block_size,
  num_target_layers, dflash_config), sized for TARGET: 1-D rope (rope_scaling null, no mrope fields)."""
  t = TARGET.text
  d = {
      "architectures": ["DFlashDraftModel"], "auto_map": {"AutoModel": "dflash.DFlashDraftModel"},
      "attention_bias": False, "attention_dropout": 0.0, "block_size": BLOCK,
      "dflash_config": {"mask_token_id": MASK_ID, "target_layer_ids": LAYER_IDS},
      "head_dim": t.head_dim, "hidden_act": "silu", "hidden_size": t.hidden_size, "initializer_range": 0.02,
      "intermediate_size": t.intermediate_size, "layer_types": ["full_attention"] * num_layers,
      "max_position_embeddings": 40960, "max_window_layers": num_layers, "model_type": "qwen3",
      "num_attention_heads": t.num_attention_heads, "num_hidden_layers": num_layers,
      "num_key_value_heads": t.num_key_value_heads, "num_target_layers": t.num_hidden_layers,
      "rms_norm_eps": 1e-6, "rope_scaling": None, "rope_theta": t.rope_theta, "sliding_window": None,
      "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.57.0",
      "use_cache": True, "use_sliding_window": False, "vocab_size": t.vocab_size}
  d.update(overrides)
  return d


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
  root = tmp_path_factory.mktemp("released")
  hf = oracle.hf_text_model(TARGET, seed=21)
  hf.save_pretrained(root / "target", max_shard_size="100KB")
  target = load_target(root / "target", dtype=jnp.float32)
  cfg_dict = released_config()
  head_cfg = HeadConfig.from_dflash_dict(cfg_dict)
  _, draft = _torch_reference(head_cfg, seed=22, mrope=False)
  (root / "head").mkdir()
  save_tensors(root / "head", {k: v.detach().numpy() for k, v in draft.state_dict().items()})
  (root / "head" / "config.json").write_text(json.dumps(cfg_dict, indent=2))
  return types.SimpleNamespace(hf=hf, target=target, draft=draft, root=root,
                               head=Head.load(root / "head", target=target))


def _prompt(seed: int, n: int = 12):
  ids = np.random.default_rng(seed).integers(0, 40, (1, n))
  pos, delta = get_rope_index(ids, None, None, None, image_token_id=-1, video_token_id=-1)
  return types.SimpleNamespace(input_ids=ids, attention_mask=np.ones_like(ids, bool), positions=pos,
                               rope_delta=delta, pixel_values=None, image_grid_thw=None)


def _torch_feats(hf, ids):
  """z-lab's extract_context_feature: hidden_states[i + 1] of every tapped layer, concatenated."""
  with torch.no_grad():
    out = hf(input_ids=torch.as_tensor(ids), output_hidden_states=True)
  return out.logits, torch.cat([out.hidden_states[i + 1] for i in LAYER_IDS], dim=-1)


def _torch_draft(hf, draft, seq, start):
  """One z-lab draft pass: block [root, MASK x 15] at positions start..start+15, context = committed
  tokens' features (recomputed rather than cached; equal to z-lab's cropped cache)."""
  _, feats = _torch_feats(hf, seq[:, :start])
  block = torch.full((1, BLOCK), MASK_ID)
  block[0, 0] = int(seq[0, start])
  with torch.no_grad():
    h = draft(torch.arange(start + BLOCK)[None], hf.model.embed_tokens(block), feats)
    return block, hf.lm_head(h[:, 1 - BLOCK:])


def _torch_dflash_generate(hf, draft, ids, max_new):
  """z-lab's dflash_generate at temperature 0 without stop tokens: returns (new tokens, acceptance
  lengths per round, each = accepted drafts + 1)."""
  n = ids.shape[1]
  seq = torch.as_tensor(ids)
  with torch.no_grad():
    first = hf(input_ids=seq).logits[:, -1].argmax(-1)
  seq = torch.cat([seq, first[:, None]], 1)
  start, accepts = n, []
  while start < n + max_new:
    block, draft_logits = _torch_draft(hf, draft, seq, start)
    block[:, 1:] = draft_logits.argmax(-1)
    with torch.no_grad():
      post = hf(input_ids=torch.cat([seq[:, :start], block], 1)).logits[:, start:].argmax(-1)
    a = int((block[:, 1:] == post[:, :-1]).cumprod(1).sum())
    seq = torch.cat([seq[:, :start], block[:, :a + 1], post[:, a:a + 1]], 1)
    start += a + 1
    accepts.append(a + 1)
  return seq[0, n:n + max_new].numpy(), accepts


def test_released_config_reads_as_published(setup):
  c = setup.head.config
  assert (c.target_layer_ids, c.mask_token_id, c.block_size) == (tuple(LAYER_IDS), MASK_ID, BLOCK)
  assert (c.rope_theta, c.num_target_layers, c.fc_in_features) == (TARGET.text.rope_theta, 6, 3 * 48)


def test_first_draft_equals_zlab(setup):
  """Our head on our target's taps == z-lab's draft on transformers' hidden_states (logits, fp32)."""
  p = _prompt(1)
  s = p.input_ids.shape[1]
  target, head = setup.target, setup.head
  out = target.prefill(p, target.init_cache(1, s + BLOCK), tap_layers=tuple(LAYER_IDS))
  root = int(jnp.argmax(out.logits[0, -1]))
  feats = jnp.concatenate([out.taps[i] for i in LAYER_IDS], -1)
  block = jnp.asarray([[root] + [MASK_ID] * (BLOCK - 1)])
  pos = lambda a, n: jnp.broadcast_to(jnp.arange(a, a + n)[None, None], (3, 1, n))
  model = nnx.merge(head.graphdef, head.params)
  k, v = model.context_kv(model.project_context(feats), pos(0, s))
  emb = nnx.merge(target.graphdef, target.params).embed(block)
  h = model(emb, pos(s, BLOCK), k, v, block_mask(jnp.asarray([s]), s, BLOCK))
  ours = np.asarray(nnx.merge(target.graphdef, target.params).logits(h))[0, 1:]
  seq = torch.cat([torch.as_tensor(p.input_ids), torch.tensor([[root]])], 1)
  _, ref = _torch_draft(setup.hf, setup.draft, seq, s)
  assert np.abs(ours - ref[0].numpy()).max() < 1e-4
  np.testing.assert_array_equal(ours.argmax(-1), ref[0].numpy().argmax(-1))


@pytest.mark.parametrize("seed", [2, 3])
def test_chain_decoding_equals_zlab_round_by_round_and_is_lossless(setup, seed):
  p = _prompt(seed)
  ref_tokens, ref_accepts = _torch_dflash_generate(setup.hf, setup.draft, p.input_ids, MAX_NEW)
  ar = generate(setup.target, p, method="ar", max_new_tokens=MAX_NEW, stop_tokens=())
  chain = generate(setup.target, p, head=setup.head, method="chain", budget=BLOCK - 1,
                   max_new_tokens=MAX_NEW, stop_tokens=())
  glance = generate(setup.target, p, head=setup.head, method="glance", budget=31, max_new_tokens=MAX_NEW,
                    stop_tokens=())
  np.testing.assert_array_equal(ar.tokens[0], ref_tokens)
  np.testing.assert_array_equal(chain.tokens[0], ref_tokens)
  np.testing.assert_array_equal(glance.tokens[0], ref_tokens)
  # z-lab counts the prefill token as round 0's output; ours counts it separately. Every round's
  # acceptance (until the cap cuts the last one) is the same.
  ours = list(chain.accepted[0] + 1)
  assert ours[:-1] == ref_accepts[:len(ours) - 1], (ours, ref_accepts)


@pytest.mark.parametrize("overrides,words", [
    ({"hidden_size": 64, "head_dim": 16}, ["hidden_size 64", "48"]),
    ({"vocab_size": 151936}, ["vocab_size 151936", "300"]),
    # the released 8B head's taps, on a 6-layer target
    ({"num_target_layers": 36, "dflash_config": {"mask_token_id": MASK_ID, "target_layer_ids": [1, 9, 17]}},
     ["[9, 17]", "depth 6"]),
], ids=["hidden", "vocab", "taps"])
def test_a_head_that_does_not_fit_the_target_is_one_line_error(setup, tmp_path, overrides, words):
  d = released_config(**overrides)
  (tmp_path / "config.json").write_text(json.dumps(d))
  save_tensors(tmp_path, {"x": np.zeros(1, np.float32)})
  with pytest.raises(CheckpointError) as e:
    Head.load(tmp_path, target=setup.target)
  msg = str(e.value)
  assert "\n" not in msg and str(tmp_path) in msg
  for w in words:
    assert w in msg, (w, msg)
