"""The EAGLE-3 head equals the reference layer, and midlayer-format checkpoints load and round-trip.

The torch reference below restates SafeAILab/EAGLE@cb7e084 `eagle/model/cnets.py` (Model.forward,
LlamaDecoderLayeremb, LlamaAttention) in plain fp32 torch ops on random weights: fc over the three
taps, the midlayer with its concat(input_layernorm(embed), hidden_norm(g)) attention input, causal
GQA attention with 1-D rope, the residual on g, the SwiGLU MLP, norm and lm_head. Its weights are
written with safetensors.torch under the released key names, listed here by hand (not from our
code), so loading them also checks the layout.
"""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from glance_jax.config import tiny_config
from glance_jax.eagle3 import (Eagle3Cache, Eagle3Config, causal_mask, default_aux_layer_ids, draft_to_target,
                               init_cache, init_eagle3, load_eagle3, save_eagle3, vocab_map_from_counts)
from glance_jax.io import CheckpointError, index_checkpoint
from glance_jax.qwen3_vl.weights import key_of

torch = pytest.importorskip("torch")

TARGET = tiny_config(vocab_size=300, hidden=32, layers=8, heads=4, kv_heads=2, head_dim=16, intermediate=64)
# GQA (2 q heads per kv head), heads x hd = 64 != H = 32, a 100-token draft vocabulary.
CFG = Eagle3Config(hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
                   head_dim=16, vocab_size=300, draft_vocab_size=100, rope_theta=5e6,
                   mrope_section=(4, 2, 2), max_position_embeddings=4096, aux_layer_ids=(1, 3, 5))


def _released_config(cfg: Eagle3Config) -> dict:
  """A config.json as SpecForge ships them (configs/qwen3-vl-8b-eagle3.json), at test size."""
  d = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "target_model_type": "qwen3_vl",
       "attention_bias": False, "hidden_act": "silu", "head_dim": cfg.head_dim, "hidden_size": cfg.hidden_size,
       "intermediate_size": cfg.intermediate_size, "max_position_embeddings": 4096,
       "num_attention_heads": cfg.num_attention_heads, "num_hidden_layers": cfg.num_hidden_layers,
       "num_key_value_heads": cfg.num_key_value_heads, "rms_norm_eps": 1e-6, "rope_theta": 5000000,
       "rope_scaling": {"rope_type": "mrope", "mrope_section": [4, 2, 2], "mrope_interleaved": True},
       "tie_word_embeddings": False, "vocab_size": cfg.vocab_size, "draft_vocab_size": cfg.draft_vocab_size,
       "dtype": "float32"}
  if cfg.aux_layer_ids is not None:
    d["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": list(cfg.aux_layer_ids)}
  return d


def _layout(cfg: Eagle3Config) -> dict[str, tuple[int, ...]]:
  """The released midlayer keys and shapes."""
  h, f, q, kv = cfg.hidden_size, cfg.intermediate_size, cfg.num_attention_heads * cfg.head_dim, \
      cfg.num_key_value_heads * cfg.head_dim
  keys = {"fc.weight": (h, 3 * h), "norm.weight": (h,), "lm_head.weight": (cfg.draft_vocab_size, h)}
  prefixes = ["midlayer"] if cfg.num_hidden_layers == 1 else [f"midlayers.{i}" for i in range(cfg.num_hidden_layers)]
  for p in prefixes:
    keys.update({f"{p}.input_layernorm.weight": (h,), f"{p}.hidden_norm.weight": (h,),
                 f"{p}.post_attention_layernorm.weight": (h,),
                 f"{p}.self_attn.q_proj.weight": (q, 2 * h), f"{p}.self_attn.k_proj.weight": (kv, 2 * h),
                 f"{p}.self_attn.v_proj.weight": (kv, 2 * h), f"{p}.self_attn.o_proj.weight": (h, q),
                 f"{p}.mlp.gate_proj.weight": (f, h), f"{p}.mlp.up_proj.weight": (f, h),
                 f"{p}.mlp.down_proj.weight": (h, f)})
  return keys


def _torch_weights(cfg: Eagle3Config, seed: int, *, embed: bool = False) -> dict:
  gen = torch.Generator().manual_seed(seed)
  layout = _layout(cfg)
  if embed:
    layout["embed_tokens.weight"] = (cfg.vocab_size, cfg.hidden_size)
  w = {}
  for k, shape in layout.items():
    noise = torch.randn(shape, generator=gen)
    w[k] = 1.0 + 0.2 * noise if "norm" in k else (noise if "embed" in k else noise / np.sqrt(shape[-1]))
  counts = torch.randint(0, 50, (cfg.vocab_size,), generator=gen).numpy()
  d2t, t2d = vocab_map_from_counts(counts, cfg.draft_vocab_size)
  w["d2t"], w["t2d"] = torch.from_numpy(d2t), torch.from_numpy(t2d)
  return w


def _write(root, config: dict, tensors: dict):
  from safetensors.torch import save_file
  root.mkdir(parents=True, exist_ok=True)
  (root / "config.json").write_text(json.dumps(config))
  save_file({k: v.contiguous() for k, v in tensors.items()}, str(root / "model.safetensors"),
            metadata={"format": "pt"})
  return root


def _torch_forward(cfg: Eagle3Config, w: dict, feats, embeds):
  """EAGLE's forward over a whole sequence at positions 0..T-1: (logits [B,T,Vd], h [B,T,H])."""
  b, t, _ = feats.shape
  nh, nkv, hd, eps = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, cfg.rms_norm_eps

  def rms(x, weight):
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

  def rot(x):
    return torch.cat([-x[..., hd // 2:], x[..., :hd // 2]], dim=-1)

  inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, hd, 2).float() / hd))
  freqs = torch.arange(t).float()[:, None] * inv[None]
  emb = torch.cat([freqs, freqs], dim=-1)
  cos, sin = emb.cos(), emb.sin()                                       # [T, hd]
  causal = torch.tril(torch.ones(t, t, dtype=torch.bool))
  x = feats @ w["fc.weight"].T                                          # g
  prefixes = ["midlayer"] if cfg.num_hidden_layers == 1 else [f"midlayers.{i}" for i in range(cfg.num_hidden_layers)]
  for p in prefixes:
    a_in = torch.cat([rms(embeds, w[f"{p}.input_layernorm.weight"]), rms(x, w[f"{p}.hidden_norm.weight"])], dim=-1)
    q = (a_in @ w[f"{p}.self_attn.q_proj.weight"].T).view(b, t, nh, hd).transpose(1, 2)
    k = (a_in @ w[f"{p}.self_attn.k_proj.weight"].T).view(b, t, nkv, hd).transpose(1, 2)
    v = (a_in @ w[f"{p}.self_attn.v_proj.weight"].T).view(b, t, nkv, hd).transpose(1, 2)
    q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
    k, v = k.repeat_interleave(nh // nkv, dim=1), v.repeat_interleave(nh // nkv, dim=1)
    s = (q @ k.transpose(-1, -2)) / np.sqrt(hd)
    o = torch.softmax(s.masked_fill(~causal, float("-inf")), dim=-1) @ v
    h = x + o.transpose(1, 2).reshape(b, t, nh * hd) @ w[f"{p}.self_attn.o_proj.weight"].T
    m = rms(h, w[f"{p}.post_attention_layernorm.weight"])
    x = h + (torch.nn.functional.silu(m @ w[f"{p}.mlp.gate_proj.weight"].T) * (m @ w[f"{p}.mlp.up_proj.weight"].T)) \
        @ w[f"{p}.mlp.down_proj.weight"].T
  return rms(x, w["norm.weight"]) @ w["lm_head.weight"].T, x


def _text_pos(start, n, batch):
  return np.broadcast_to(np.arange(start, start + n, dtype=np.int32), (3, batch, n)).copy()


# --- (a) the forward equals the reference, prefill and cached steps ------------------------------

@pytest.mark.parametrize("layers", [1, 2])
def test_prefill_then_cached_steps_match_torch(tmp_path, layers):
  cfg = dataclasses.replace(CFG, num_hidden_layers=layers)
  w = _torch_weights(cfg, seed=layers)
  ck = load_eagle3(_write(tmp_path / "head", _released_config(cfg), w), TARGET, dtype=jnp.float32)
  assert set(index_checkpoint(tmp_path / "head")) == set(_layout(cfg)) | {"d2t", "t2d"}
  assert {key_of(p) for p, _ in nnx.to_flat_state(ck.params)} == set(_layout(cfg))
  rng = np.random.default_rng(layers)
  b, t0, t1, slots = 2, 5, 3, 12
  table = rng.standard_normal((cfg.vocab_size, cfg.hidden_size)).astype(np.float32)   # target's embed_tokens
  feats = rng.standard_normal((b, t0 + t1, cfg.fc_in_features)).astype(np.float32)
  ids = rng.integers(0, cfg.vocab_size, (b, t0 + t1))

  @jax.jit
  def step(params, feats, ids, pos, cache, start):
    head = nnx.merge(ck.graphdef, params)
    mask = causal_mask(start, ids.shape[1], slots)
    return head(head.project(feats), head.embed(ids, jnp.asarray(table)), pos, cache, start, mask)

  # Garbage in the free slots: only the mask keeps the second pass from seeing it.
  junk = init_cache(cfg, b, slots)
  junk = Eagle3Cache(k=tuple(jnp.asarray(rng.standard_normal(k.shape), k.dtype) for k in junk.k),
                     v=tuple(jnp.asarray(rng.standard_normal(v.shape), v.dtype) for v in junk.v))
  start0, start1 = jnp.zeros((b,), jnp.int32), jnp.full((b,), t0, jnp.int32)
  logits0, h0, cache = step(ck.params, feats[:, :t0], ids[:, :t0], _text_pos(0, t0, b), junk, start0)
  logits1, h1, _ = step(ck.params, feats[:, t0:], ids[:, t0:], _text_pos(t0, t1, b), cache, start1)
  with torch.no_grad():
    want_logits, want_h = (x.numpy() for x in _torch_forward(cfg, w, torch.from_numpy(feats),
                                                             torch.from_numpy(table[ids])))
  assert logits0.shape == (b, t0, cfg.draft_vocab_size) and logits0.dtype == jnp.float32
  for got, want in ((logits0, want_logits[:, :t0]), (h0, want_h[:, :t0]),
                    (logits1, want_logits[:, t0:]), (h1, want_h[:, t0:])):
    assert np.abs(np.asarray(got) - want).max() <= 1e-4, np.abs(np.asarray(got) - want).max()


# --- (b) save -> load round trip ------------------------------------------------------------------

def test_save_load_round_trip_is_bitwise(tmp_path):
  graphdef, params = init_eagle3(CFG, seed=3, with_embed=True)
  rng = np.random.default_rng(0)
  params = jax.tree.map(lambda x: x + jnp.asarray(rng.standard_normal(x.shape), x.dtype), params)  # norms too
  d2t, t2d = vocab_map_from_counts(rng.integers(0, 9, CFG.vocab_size), CFG.draft_vocab_size)
  save_eagle3(tmp_path / "h", CFG, params, d2t, t2d)
  ck = load_eagle3(tmp_path / "h", TARGET, dtype=jnp.float32)
  assert ck.cfg == CFG and ck.graphdef == graphdef
  assert json.loads((tmp_path / "h" / "config.json").read_text())["architectures"] == ["LlamaForCausalLMEagle3"]
  want, got = dict(nnx.to_flat_state(params)), dict(nnx.to_flat_state(ck.params))
  assert want.keys() == got.keys()
  for k in want:
    assert np.array_equal(np.asarray(want[k].get_value()), np.asarray(got[k].get_value())), k
  assert np.array_equal(np.asarray(ck.d2t), d2t) and np.array_equal(np.asarray(ck.t2d), t2d)
  with open(tmp_path / "h" / "model.safetensors", "rb") as f:   # stored as the reference stores them
    header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
  assert header["d2t"]["dtype"] == "I64" and header["t2d"]["dtype"] == "BOOL"
  save_eagle3(tmp_path / "bf16", CFG, params, d2t, t2d, dtype=jnp.bfloat16)
  ck16 = load_eagle3(tmp_path / "bf16", dtype=jnp.bfloat16)
  got16 = dict(nnx.to_flat_state(ck16.params))
  for k in want:
    assert np.array_equal(np.asarray(want[k].get_value().astype(jnp.bfloat16)), np.asarray(got16[k].get_value())), k


# --- (c) a torch-written file in the released layout, with its own embed_tokens, loads ----------

def test_released_layout_with_embed_tokens_loads(tmp_path):
  cfg = dataclasses.replace(CFG, aux_layer_ids=None)        # SpecForge's configs carry no eagle_config
  w = _torch_weights(cfg, seed=7, embed=True)
  ck = load_eagle3(_write(tmp_path / "h", _released_config(cfg), w), TARGET, dtype=jnp.float32)
  assert ck.cfg == cfg and ck.cfg.layer_ids_for(TARGET.text.num_hidden_layers) == (1, 3, 4)
  flat = {key_of(p): v.get_value() for p, v in nnx.to_flat_state(ck.params)}
  assert set(flat) == set(_layout(cfg)) | {"embed_tokens.weight"}
  for k, v in flat.items():
    assert np.array_equal(np.asarray(v), w[k].numpy()), k
  assert np.array_equal(np.asarray(ck.d2t), w["d2t"].numpy()) and np.array_equal(np.asarray(ck.t2d), w["t2d"].numpy())
  head = nnx.merge(ck.graphdef, ck.params)
  ids = jnp.array([[0, 299, 5]])
  assert np.array_equal(np.asarray(head.embed(ids)), w["embed_tokens.weight"].numpy()[[0, 299, 5]][None])


# --- (d) one-line errors naming the file and the key ---------------------------------------------

def _error(path, target=TARGET) -> str:
  with pytest.raises(CheckpointError) as e:
    load_eagle3(path, target, dtype=jnp.float32)
  msg = str(e.value)
  assert "\n" not in msg
  return msg


def test_errors_name_the_file_and_the_key(tmp_path):
  w = _torch_weights(CFG, seed=1)
  good = _write(tmp_path / "good", _released_config(CFG), w)
  missing = _write(tmp_path / "missing", _released_config(CFG),
                   {k: v for k, v in w.items() if k != "midlayer.hidden_norm.weight"})
  msg = _error(missing)
  assert str(missing / "model.safetensors") in msg and "'midlayer.hidden_norm.weight'" in msg and "missing" in msg
  misshaped = _write(tmp_path / "misshaped", _released_config(CFG), {**w, "fc.weight": torch.zeros(32, 64)})
  msg = _error(misshaped)
  assert str(misshaped / "model.safetensors") in msg and "'fc.weight' (32, 64) vs expected (32, 96)" in msg
  msg = _error(good, tiny_config(vocab_size=300, hidden=48, layers=8, heads=4, kv_heads=2, head_dim=16))
  assert str(good / "config.json") in msg and "'hidden_size' 32 != target hidden_size 48" in msg
  msg = _error(good, tiny_config(vocab_size=300, hidden=32, layers=4, heads=4, kv_heads=2, head_dim=16))
  assert str(good / "config.json") in msg and "'eagle_config.eagle_aux_hidden_state_layer_ids'" in msg
  msg = _error(good, tiny_config(vocab_size=512, hidden=32, layers=8, heads=4, kv_heads=2, head_dim=16))
  assert "'vocab_size' 300 != target vocab_size 512" in msg
  bad_d2t = _write(tmp_path / "d2t", _released_config(CFG), {**w, "d2t": w["d2t"][:50].clone()})
  assert "'d2t' (50,) vs expected (100,)" in _error(bad_d2t)
  t2d = w["t2d"].clone()
  t2d[int(np.flatnonzero(~t2d.numpy())[0])] = True
  bad_t2d = _write(tmp_path / "t2d", _released_config(CFG), {**w, "t2d": t2d})
  msg = _error(bad_t2d)
  assert str(bad_t2d / "model.safetensors") in msg and "'t2d' marks 101 tokens" in msg
  bad_cfg = _write(tmp_path / "rope", {**_released_config(CFG), "rope_scaling": {"rope_type": "llama3"}}, w)
  assert str(bad_cfg / "config.json") in _error(bad_cfg) and "'rope_scaling'" in _error(bad_cfg)


# --- (e) the draft vocabulary and the config ----------------------------------------------------

def test_vocab_map_from_counts_and_draft_to_target():
  counts = np.array([0, 5, 9, 5, 0, 7, 1, 5])                 # ties at 5: the lower ids win
  d2t, t2d = vocab_map_from_counts(counts, 4)
  used = np.array([1, 2, 3, 5])
  assert d2t.dtype == np.int64 and np.array_equal(d2t, used - np.arange(4))
  assert np.array_equal(t2d, np.isin(np.arange(8), used))
  assert np.array_equal(np.asarray(draft_to_target(jnp.array([[3, 0], [1, 2]]), d2t)), [[5, 1], [2, 3]])
  d2t, t2d = vocab_map_from_counts(np.array([0, 0, 3, 0]), 3)  # fewer seen than K: unseen low ids fill in
  assert np.array_equal(np.arange(3) + d2t, [0, 1, 2]) and t2d.tolist() == [True, True, True, False]
  with pytest.raises(ValueError):
    vocab_map_from_counts(counts, 9)


def test_config_round_trip_and_tap_defaults():
  assert Eagle3Config.from_dict(CFG.to_dict()) == CFG
  assert Eagle3Config.from_dict(_released_config(CFG)) == CFG
  assert default_aux_layer_ids(36) == (1, 17, 32)            # EAGLE's inputs of layers {2, 18, 33}
  text = dataclasses.replace(CFG, mrope_section=None, aux_layer_ids=None, target_hidden_size=32)
  d = text.to_dict()
  assert "rope_scaling" not in d and "eagle_config" not in d and "target_hidden_size" not in d
  assert Eagle3Config.from_dict(d) == text and text.layer_ids_for(36) == (1, 17, 32)
