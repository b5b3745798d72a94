"""The block head equals DFlash's draft model, and its DFlash-format checkpoints load back exactly.

The torch reference below is z-lab/dflash@44947fb `dflash/model.py` (Qwen3DFlashAttention /
Qwen3DFlashDecoderLayer / DFlashDraftModel.forward) restated on transformers' own Qwen3 building
blocks (Qwen3RMSNorm, Qwen3MLP, rotate_half, eager_attention_forward, the rotary embeddings), with
every weight and norm re-randomised. Its state_dict keys are DFlash's checkpoint keys.
"""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from glance_jax import sharding as shd
from glance_jax.config import QWEN3_VL_8B, ConfigError, tiny_config
from glance_jax.head import (HeadConfig, abstract_head, block_mask, init_head, load_head,
                             param_count, read_head_config, save_head)
from glance_jax.io import CheckpointError, index_checkpoint, save_tensors
from glance_jax.qwen3_vl.weights import fill_state, key_of

TARGET = tiny_config(layers=6, hidden=64, heads=4, kv_heads=2, head_dim=16, intermediate=96)
# GQA (2 q heads per kv head), 3 taps (fc 192 -> 64), 2 layers, block 4, mask id 511.
CFG = HeadConfig.for_target(TARGET, num_layers=2, block_size=4, target_layer_ids=(1, 3, 5))


def _jit_forward(graphdef):
  @jax.jit
  def f(params, feats, ctx_pos, noise, noise_pos, mask):
    head = nnx.merge(graphdef, params)
    ctx = head.project_context(feats)
    k, v = head.context_kv(ctx, ctx_pos)
    return head(noise, noise_pos, k, v, mask)
  return f


def _text_pos(start, n, batch=1):
  p = np.arange(start, start + n, dtype=np.int32)
  return np.broadcast_to(p, (3, batch, n)).copy()


def _inputs(cfg, b, s, q, seed=0):
  rng = np.random.default_rng(seed)
  feats = rng.standard_normal((b, s, cfg.fc_in_features)).astype(np.float32)
  noise = rng.standard_normal((b, q, cfg.hidden_size)).astype(np.float32)
  return feats, noise


# --- the torch reference (z-lab's forward) -----------------------------------------------------

def _torch_reference(cfg: HeadConfig, seed: int, *, mrope: bool):
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  from torch import nn
  from transformers.models.qwen3.modeling_qwen3 import (Qwen3MLP, Qwen3RMSNorm, Qwen3RotaryEmbedding,
                                                        eager_attention_forward, rotate_half)
  qcfg = transformers.Qwen3Config(
      vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
      num_hidden_layers=cfg.num_hidden_layers, num_attention_heads=cfg.num_attention_heads,
      num_key_value_heads=cfg.num_key_value_heads, head_dim=cfg.head_dim, rms_norm_eps=cfg.rms_norm_eps,
      rope_theta=cfg.rope_theta)
  if mrope:
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextRotaryEmbedding
    vcfg = transformers.Qwen3VLTextConfig(
        hidden_size=cfg.hidden_size, num_attention_heads=cfg.num_attention_heads, head_dim=cfg.head_dim,
        rope_parameters=dict(rope_type="default", rope_theta=cfg.rope_theta,
                             mrope_section=list(cfg.mrope_section), mrope_interleaved=True))
    rotary = Qwen3VLTextRotaryEmbedding(vcfg)
  else:
    rotary = Qwen3RotaryEmbedding(qcfg)

  def apply_rotary_pos_emb(q, k, cos, sin):  # z-lab: queries take the last q_len positions
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    q_len = q.size(-2)
    q_embed = (q * cos[..., -q_len:, :]) + (rotate_half(q) * sin[..., -q_len:, :])
    return q_embed, (k * cos) + (rotate_half(k) * sin)

  class Attention(nn.Module):
    def __init__(self):
      super().__init__()
      hd = cfg.head_dim
      self.head_dim, self.scaling = hd, hd**-0.5
      self.num_key_value_groups = cfg.num_attention_heads // cfg.num_key_value_heads
      self.q_proj = nn.Linear(cfg.hidden_size, cfg.num_attention_heads * hd, bias=False)
      self.k_proj = nn.Linear(cfg.hidden_size, cfg.num_key_value_heads * hd, bias=False)
      self.v_proj = nn.Linear(cfg.hidden_size, cfg.num_key_value_heads * hd, bias=False)
      self.o_proj = nn.Linear(cfg.num_attention_heads * hd, cfg.hidden_size, bias=False)
      self.q_norm = Qwen3RMSNorm(hd, eps=cfg.rms_norm_eps)
      self.k_norm = Qwen3RMSNorm(hd, eps=cfg.rms_norm_eps)

    def forward(self, hidden_states, target_hidden, position_embeddings, attention_mask):
      bsz, q_len = hidden_states.shape[:-1]
      ctx_len = target_hidden.shape[1]
      q = self.q_norm(self.q_proj(hidden_states).view(bsz, q_len, -1, self.head_dim)).transpose(1, 2)
      k = torch.cat([self.k_proj(target_hidden), self.k_proj(hidden_states)], dim=1)
      v = torch.cat([self.v_proj(target_hidden), self.v_proj(hidden_states)], dim=1)
      k = self.k_norm(k.view(bsz, ctx_len + q_len, -1, self.head_dim)).transpose(1, 2)
      v = v.view(bsz, ctx_len + q_len, -1, self.head_dim).transpose(1, 2)
      q, k = apply_rotary_pos_emb(q, k, *position_embeddings)
      out, _ = eager_attention_forward(self, q, k, v, attention_mask, scaling=self.scaling)
      return self.o_proj(out.reshape(bsz, q_len, -1))

  class Layer(nn.Module):
    def __init__(self):
      super().__init__()
      self.self_attn = Attention()
      self.mlp = Qwen3MLP(qcfg)
      self.input_layernorm = Qwen3RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
      self.post_attention_layernorm = Qwen3RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)

    def forward(self, target_hidden, hidden_states, attention_mask, position_embeddings):
      residual = hidden_states
      h = self.self_attn(self.input_layernorm(hidden_states), target_hidden, position_embeddings,
                         attention_mask)
      hidden_states = residual + h
      return hidden_states + self.mlp(self.post_attention_layernorm(hidden_states))

  class Draft(nn.Module):
    def __init__(self):
      super().__init__()
      self.layers = nn.ModuleList([Layer() for _ in range(cfg.num_hidden_layers)])
      self.norm = Qwen3RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
      self.fc = nn.Linear(cfg.fc_in_features, cfg.hidden_size, bias=False)
      self.hidden_norm = Qwen3RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)

    def forward(self, position_ids, noise_embedding, target_hidden, attention_mask=None):
      hidden_states = noise_embedding
      target_hidden = self.hidden_norm(self.fc(target_hidden))
      position_embeddings = rotary(hidden_states, position_ids)
      for layer in self.layers:
        hidden_states = layer(target_hidden, hidden_states, attention_mask, position_embeddings)
      return self.norm(hidden_states)

  torch.manual_seed(seed)
  model = Draft().eval()
  gen = torch.Generator().manual_seed(seed + 1)
  with torch.no_grad():
    for name, p in model.named_parameters():
      noise = torch.randn(p.shape, generator=gen)
      p.copy_(1.0 + 0.2 * noise if "norm" in name else noise / np.sqrt(p.shape[-1]))
  return torch, model


def _ours_from_torch(cfg, model):
  graphdef, abstract = abstract_head(cfg)
  sd = {k: jnp.asarray(v.detach().numpy()) for k, v in model.state_dict().items()}
  ours = {key_of(p) for p, _ in nnx.to_flat_state(abstract)}
  assert set(sd) == ours  # our parameter paths are DFlash's checkpoint keys
  return graphdef, fill_state(abstract, sd)


def test_decoding_matches_dflash_reference_per_row():
  """Batched + masked (ours) == z-lab's unmasked batch-1 forward on each row's valid context."""
  torch, model = _torch_reference(CFG, seed=0, mrope=False)
  graphdef, params = _ours_from_torch(CFG, model)
  b, s, q = 2, 7, CFG.block_size
  ctx_len = np.array([7, 4])
  feats, noise = _inputs(CFG, b, s, q)
  ctx_pos = _text_pos(0, s, b)
  noise_pos = np.stack([_text_pos(int(n), q)[:, 0] for n in ctx_len], axis=1)   # [3,B,Q]
  got = np.asarray(_jit_forward(graphdef)(params, feats, ctx_pos, noise, noise_pos,
                                          block_mask(jnp.asarray(ctx_len), s, q)))
  for r, n in enumerate(ctx_len):
    pos = torch.arange(n + q)[None]  # context 0..n-1, block n..n+q-1, as dflash_generate passes them
    with torch.no_grad():
      want = model(pos, torch.from_numpy(noise[r:r + 1]), torch.from_numpy(feats[r:r + 1, :n])).numpy()[0]
    assert np.abs(got[r] - want).max() <= 1e-4, np.abs(got[r] - want).max()


def test_mrope_positions_and_packed_mask_match_reference():
  """Image-like 3-D context positions (HF's Qwen3-VL rotary) and an arbitrary training mask."""
  torch, model = _torch_reference(CFG, seed=3, mrope=True)
  graphdef, params = _ours_from_torch(CFG, model)
  b, s, q = 1, 9, CFG.block_size
  feats, noise = _inputs(CFG, b, s, q, seed=1)
  rng = np.random.default_rng(2)
  ctx_pos = _text_pos(0, s)
  ctx_pos[1, 0, 2:6] = [2, 2, 3, 3]      # a 2x2 image: h, w differ from t
  ctx_pos[2, 0, 2:6] = [2, 3, 2, 3]
  ctx_pos[:, 0, 6:] = np.arange(4, 7)
  noise_pos = _text_pos(7, q)
  mask = rng.random((b, q, s + q)) < 0.6
  mask[:, :, s:] = True                  # every query sees its block (as in training)
  got = np.asarray(_jit_forward(graphdef)(params, feats, ctx_pos, noise, noise_pos, jnp.asarray(mask)))
  add = torch.zeros(mask.shape).masked_fill(~torch.from_numpy(mask), torch.finfo(torch.float32).min)
  pos = torch.from_numpy(np.concatenate([ctx_pos, noise_pos], axis=-1)).long()
  with torch.no_grad():
    want = model(pos, torch.from_numpy(noise), torch.from_numpy(feats), add[:, None]).numpy()
  assert np.abs(got - want).max() <= 1e-4, np.abs(got - want).max()


# --- mask semantics and the context cache ------------------------------------------------------

@pytest.fixture(scope="module")
def head():
  graphdef, params = init_head(CFG, seed=1)
  return graphdef, params


def test_context_beyond_ctx_len_is_invisible_and_block_is_bidirectional(head):
  graphdef, params = head
  f = _jit_forward(graphdef)
  b, s, q = 1, 6, CFG.block_size
  feats, noise = _inputs(CFG, b, s, q, seed=4)
  mask = block_mask(jnp.asarray([3]), s, q)
  ctx_pos, noise_pos = _text_pos(0, s), _text_pos(3, q)
  base = np.asarray(f(params, feats, ctx_pos, noise, noise_pos, mask))
  garbage = feats.copy()
  garbage[:, 3:] = 100.0 * np.random.default_rng(5).standard_normal(garbage[:, 3:].shape)
  np.testing.assert_array_equal(np.asarray(f(params, garbage, ctx_pos, noise, noise_pos, mask)), base)
  changed = feats.copy()
  changed[:, 1] += 1.0
  assert np.abs(np.asarray(f(params, changed, ctx_pos, noise, noise_pos, mask)) - base).max() > 1e-3
  last = noise.copy()
  last[:, -1] += 1.0                     # a later block token changes EVERY slot: not causal
  diff = np.abs(np.asarray(f(params, feats, ctx_pos, last, noise_pos, mask)) - base).max(axis=-1)[0]
  assert (diff > 1e-4).all(), diff


def test_zero_context_head_ignores_the_target_features(head):
  """The ablation (decode.py bench --ablate zero-context): the head's output no longer depends on
  the features, it equals the plain head's on all-zero features, and the params are shared."""
  from glance_jax.head.model import zero_context_graphdef
  graphdef, params = head
  zgd = zero_context_graphdef(graphdef, params)
  assert nnx.merge(zgd, params).zero_context and not nnx.merge(graphdef, params).zero_context
  plain, ablated = _jit_forward(graphdef), _jit_forward(zgd)
  b, s, q = 1, 6, CFG.block_size
  feats, noise = _inputs(CFG, b, s, q, seed=7)
  mask = block_mask(jnp.asarray([s]), s, q)
  args = (_text_pos(0, s), noise, _text_pos(s, q), mask)
  got = np.asarray(ablated(params, feats, *args))
  np.testing.assert_array_equal(np.asarray(ablated(params, 3.0 * feats + 1.0, *args)), got)
  np.testing.assert_allclose(np.asarray(plain(params, np.zeros_like(feats), *args)), got, atol=1e-6, rtol=0)
  assert np.abs(np.asarray(plain(params, feats, *args)) - got).max() > 1e-3


def test_context_kv_in_chunks_equals_at_once(head):
  graphdef, params = head
  h = nnx.merge(graphdef, params)
  feats, _ = _inputs(CFG, 2, 9, 1, seed=6)
  pos = _text_pos(0, 9, 2)
  ctx = h.project_context(jnp.asarray(feats))
  k, v = h.context_kv(ctx, pos)
  k1, v1 = h.context_kv(h.project_context(jnp.asarray(feats[:, :4])), pos[:, :, :4])
  k2, v2 = h.context_kv(h.project_context(jnp.asarray(feats[:, 4:])), pos[:, :, 4:])
  assert len(k) == CFG.num_hidden_layers and k[0].shape == (2, 9, CFG.num_key_value_heads, CFG.head_dim)
  for l in range(CFG.num_hidden_layers):
    np.testing.assert_allclose(np.concatenate([k1[l], k2[l]], 1), k[l], atol=1e-6, rtol=0)
    np.testing.assert_allclose(np.concatenate([v1[l], v2[l]], 1), v[l], atol=1e-6, rtol=0)


def test_block_mask_values():
  m = np.asarray(block_mask(jnp.asarray([0, 2]), 3, 2))
  assert m.shape == (2, 2, 5)
  np.testing.assert_array_equal(m[0], [[0, 0, 0, 1, 1]] * 2)
  np.testing.assert_array_equal(m[1], [[1, 1, 0, 1, 1]] * 2)


# --- checkpoints -------------------------------------------------------------------------------

@pytest.fixture()
def saved(tmp_path, head):
  graphdef, params = head
  save_head(tmp_path / "head", CFG, params)
  return tmp_path / "head"


def test_save_load_round_trip_drafts_identically(saved, head):
  graphdef, params = head
  cfg, g2, p2 = load_head(saved, dtype=jnp.float32, target_config=TARGET, block_size=CFG.block_size)
  assert cfg == CFG
  keys = set(index_checkpoint(saved))
  assert {"fc.weight", "hidden_norm.weight", "norm.weight", "layers.1.self_attn.k_norm.weight",
          "layers.0.mlp.down_proj.weight"} <= keys and len(keys) == 3 + 11 * CFG.num_hidden_layers
  feats, noise = _inputs(CFG, 1, 5, CFG.block_size, seed=7)
  args = (feats, _text_pos(0, 5), noise, _text_pos(5, CFG.block_size), block_mask(jnp.asarray([5]), 5, 4))
  np.testing.assert_array_equal(np.asarray(_jit_forward(g2)(p2, *args)),
                                np.asarray(_jit_forward(graphdef)(params, *args)))


def test_bf16_save_is_dflash_format(tmp_path, head):
  save_head(tmp_path, CFG, head[1], dtype=jnp.bfloat16)
  d = json.loads((tmp_path / "config.json").read_text())
  assert d["dtype"] == "bfloat16" and d["dflash_config"]["target_layer_ids"] == [1, 3, 5]
  assert {e.dtype for e in index_checkpoint(tmp_path).values()} == {"BF16"}
  cfg, _, params = load_head(tmp_path, dtype=jnp.bfloat16)
  assert cfg == CFG and params["fc"]["weight"].get_value().dtype == jnp.bfloat16


def test_load_rejects_mismatched_targets_and_tensors(saved):
  wider = tiny_config(layers=6, hidden=96, heads=4, kv_heads=2, head_dim=16, intermediate=96)
  with pytest.raises(CheckpointError, match=r"head hidden_size 64 != target hidden_size 96.*fc input "
                                            r"width 192 != 3 taps x target hidden_size 96 = 288"):
    load_head(saved, dtype=jnp.float32, target_config=wider)
  with pytest.raises(CheckpointError, match=r"head block_size 4 != expected block_size 16"):
    load_head(saved, dtype=jnp.float32, block_size=16)
  shallow = tiny_config(layers=4, hidden=64, heads=4, kv_heads=2, head_dim=16, intermediate=96)
  with pytest.raises(CheckpointError, match=r"target_layer_ids \(1, 3, 5\) include \[5\] >= the "
                                            r"target's depth 4"):
    load_head(saved, dtype=jnp.float32, target_config=shallow)
  other_vocab = tiny_config(layers=6, hidden=64, heads=4, kv_heads=2, head_dim=16, intermediate=96,
                            vocab_size=256)
  with pytest.raises(CheckpointError, match=r"head vocab_size 512 != target vocab_size 256"):
    load_head(saved, dtype=jnp.float32, target_config=other_vocab)

  from safetensors.numpy import load_file
  tensors = load_file(str(saved / "model.safetensors"))
  bad = dict(tensors)
  bad["layers.1.mlp.up_proj.weight"] = bad["layers.1.mlp.up_proj.weight"].T.copy()
  save_tensors(saved, bad)
  with pytest.raises(CheckpointError, match=r"1 misshaped: 'layers.1.mlp.up_proj.weight' \(64, 96\) vs "
                                            r"expected \(96, 64\)"):
    load_head(saved, dtype=jnp.float32)
  bad = dict(tensors)
  bad["fc.weight"] = bad["fc.weight"][:, :128].copy()
  save_tensors(saved, bad)
  with pytest.raises(CheckpointError, match=r"'fc.weight' takes 128 input features but the config "
                                            r"expects 3 taps x 64 = 192"):
    load_head(saved, dtype=jnp.float32)


def test_init_from_dflash_overrides_ids_and_mask_but_not_shapes(saved, head):
  cfg = dataclasses.replace(CFG, target_layer_ids=(0, 2, 4), mask_token_id=7, rope_theta=1e6)
  graphdef, params = init_head(cfg, from_dflash=str(saved))
  for (p, a), (_, b) in zip(nnx.to_flat_state(params), nnx.to_flat_state(head[1])):
    np.testing.assert_array_equal(a.get_value(), b.get_value(), err_msg=key_of(p))
  assert read_head_config(saved) == CFG
  with pytest.raises(CheckpointError, match=r"intermediate_size 96 vs 128"):
    init_head(dataclasses.replace(CFG, intermediate_size=128), from_dflash=str(saved))


def test_init_on_a_mesh_places_params_by_logical_axes():
  mesh = shd.make_mesh(devices=jax.devices()[:1])
  _, params = init_head(CFG, mesh=mesh)
  w = params["layers"][0]["self_attn"]["q_proj"]["weight"].get_value()
  assert isinstance(w.sharding, jax.sharding.NamedSharding) and w.sharding.mesh.shape == mesh.shape


def test_8b_head_shards_like_the_target_decoder():
  """fc is a down projection (out on fsdp, the 5-tap input on tensor); norms replicate."""
  mesh = jax.sharding.AbstractMesh((1, 2, 4), shd.MESH_AXES)
  _, abstract = abstract_head(HeadConfig.for_target(QWEN3_VL_8B))
  specs = {key_of(p): s.spec for p, s in nnx.to_flat_state(shd.state_shardings(abstract, mesh))}
  P = jax.sharding.PartitionSpec
  assert specs["fc.weight"] == P("fsdp", "tensor") and specs["norm.weight"] == P(None)
  assert specs["layers.4.self_attn.q_proj.weight"] == P("tensor", "fsdp")
  assert specs["layers.4.mlp.down_proj.weight"] == P("fsdp", "tensor")


# --- configs -----------------------------------------------------------------------------------

# SpecForge@a6b6b023 configs/qwen3-8b-dflash.json (z-lab/Qwen3-8B-DFlash-b16's architecture).
QWEN3_8B_DFLASH = {
    "architectures": ["DFlashDraftModel"], "attention_bias": False, "attention_dropout": 0.0,
    "block_size": 16, "dflash_config": {"mask_token_id": 151669, "target_layer_ids": [1, 9, 17, 25, 33]},
    "dtype": "bfloat16", "head_dim": 128, "hidden_act": "silu", "hidden_size": 4096,
    "intermediate_size": 12288, "layer_types": ["full_attention"] * 5, "max_position_embeddings": 40960,
    "model_type": "qwen3", "num_attention_heads": 32, "num_hidden_layers": 5, "num_key_value_heads": 8,
    "num_target_layers": 36, "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000,
    "sliding_window": None, "tie_word_embeddings": False, "use_sliding_window": False, "vocab_size": 151936,
}


def test_8b_head_matches_the_paper_and_dflash():
  cfg = HeadConfig.for_target(QWEN3_VL_8B)
  assert cfg.target_layer_ids == (1, 9, 17, 25, 33) and cfg.mask_token_id == 151669
  _, abstract = abstract_head(cfg)                        # shapes only, no memory
  d, f = 4096, 12288
  per_layer = 2 * d * 4096 + 2 * d * 1024 + 3 * d * f + 2 * d + 2 * 128
  assert param_count(abstract) == 5 * d * d + 2 * d + 5 * per_layer == 1_048_626_432   # ~1.05B
  text_head = HeadConfig.from_dflash_dict(QWEN3_8B_DFLASH)
  assert text_head.rope_theta == 1e6 and text_head.mrope_section == (24, 20, 20)
  # Only rope differs between the text head and ours: the weights fit as they are.
  assert dataclasses.replace(text_head, rope_theta=cfg.rope_theta) == cfg
  legacy_free = {k: v for k, v in QWEN3_8B_DFLASH.items() if k not in ("rope_scaling", "rope_theta")}
  v5 = HeadConfig.from_dflash_dict(dict(legacy_free, rope_parameters={"rope_type": "default",
                                                                       "rope_theta": 1e6}))
  assert v5 == text_head
  vl = HeadConfig.from_dflash_dict(dict(QWEN3_8B_DFLASH, rope_theta=5e6, model_type="qwen3_vl_text",
                                        rope_scaling={"mrope_interleaved": True,
                                                      "mrope_section": [24, 20, 20]}))
  assert vl == dataclasses.replace(text_head, rope_theta=5e6)


def test_config_round_trips_and_transformers_reads_it():
  for cfg in (CFG, HeadConfig.for_target(QWEN3_VL_8B),
              dataclasses.replace(CFG, target_hidden_size=48)):
    assert HeadConfig.from_dflash_dict(cfg.to_dflash_dict()) == cfg
  transformers = pytest.importorskip("transformers")
  d = HeadConfig.for_target(QWEN3_VL_8B).to_dflash_dict()
  hf = transformers.Qwen3Config(**{k: v for k, v in d.items() if k != "model_type"})
  assert (hf.hidden_size, hf.num_hidden_layers, hf.head_dim, hf.block_size) == (4096, 5, 128, 16)
  assert hf.dflash_config["target_layer_ids"] == [1, 9, 17, 25, 33]


def test_for_tiny_targets_and_config_errors():
  tiny = HeadConfig.for_target(tiny_config())            # 4 target layers, 5 requested taps
  assert tiny.target_layer_ids == (0, 1, 2, 3) and tiny.mask_token_id == 511
  tiny.check_target(tiny_config())
  with pytest.raises(ConfigError, match=r"target_layer_ids \(1, 4\) include ids >= the target's depth 4"):
    HeadConfig.for_target(tiny_config(), target_layer_ids=(1, 4))
  with pytest.raises(ConfigError, match=r"block_size 1 < 2"):
    HeadConfig.for_target(tiny_config(), block_size=1)
  with pytest.raises(ConfigError, match=r"dflash_config.mask_token_id is missing"):
    HeadConfig.from_dflash_dict(dict(QWEN3_8B_DFLASH, dflash_config={"target_layer_ids": [1]}))
  with pytest.raises(ConfigError, match=r"sliding-window"):
    HeadConfig.from_dflash_dict(dict(QWEN3_8B_DFLASH, layer_types=["sliding_attention"] * 5))
