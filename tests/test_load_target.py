"""load_target: real HF checkpoint layout in, exact logits out; every bad input a one-line error."""

import json
import os
import shutil
import types

import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from glance_jax.config import QWEN3_VL_8B, ConfigError  # noqa: E402
from glance_jax.io import CheckpointError, index_checkpoint, save_tensors  # noqa: E402
from glance_jax.qwen3_vl import weights  # noqa: E402
from glance_jax.qwen3_vl.positions import get_rope_index  # noqa: E402
from glance_jax.qwen3_vl.target import InputError, load_target  # noqa: E402
from tests import oracle  # noqa: E402


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
  """A tiny random HF model written by save_pretrained as sharded safetensors with an index."""
  cfg = oracle.CONFIG_A
  hf = oracle.hf_model(cfg, seed=3)
  path = tmp_path_factory.mktemp("ckpt") / "tiny-qwen3-vl"
  hf.save_pretrained(path, max_shard_size="300KB")
  return types.SimpleNamespace(cfg=cfg, hf=hf, path=path)


def _inputs(cfg, prompt):
  pos, delta = get_rope_index(prompt.ids, None, prompt.grid_thw, None, image_token_id=cfg.image_token_id,
                              video_token_id=cfg.video_token_id)
  return types.SimpleNamespace(input_ids=prompt.ids, attention_mask=np.ones_like(prompt.ids, bool),
                               positions=pos, rope_delta=delta, pixel_values=prompt.pixel_values,
                               image_grid_thw=prompt.grid_thw)


def _one_line_error(exc_type, fn, *words):
  with pytest.raises(exc_type) as e:
    fn()
  msg = str(e.value)
  assert "\n" not in msg, msg
  for w in words:
    assert w in msg, (w, msg)
  return msg


def test_save_pretrained_sharded_round_trip_matches_hf(saved):
  assert (saved.path / "model.safetensors.index.json").exists()
  assert len(list(saved.path.glob("model-*.safetensors"))) > 1
  target = load_target(saved.path, dtype=jnp.float32)
  prompt = oracle.two_image_prompt(saved.cfg, seed=3)
  ids = torch.from_numpy(prompt.ids)
  with torch.no_grad():
    ref = saved.hf(input_ids=ids, attention_mask=torch.ones_like(ids),
                   mm_token_type_ids=(ids == saved.cfg.image_token_id).long(),
                   pixel_values=torch.from_numpy(prompt.pixel_values),
                   image_grid_thw=torch.from_numpy(prompt.grid_thw)).logits.numpy()[0]
  got = np.asarray(target.prefill(_inputs(saved.cfg, prompt), target.init_cache(1, 96)).logits[0])
  assert np.abs(got - ref).max() <= 1e-4


def test_full_size_key_coverage_8b():
  """Every key of HF's 8B state_dict (meta device, no weights) is exactly one of our parameters
  with the same shape; ours come from abstract shapes (no memory)."""
  from transformers import Qwen3VLForConditionalGeneration
  with torch.device("meta"):
    hf = Qwen3VLForConditionalGeneration(oracle.hf_config(QWEN3_VL_8B))
  theirs = {k: tuple(v.shape) for k, v in hf.state_dict().items()}
  _, abstract = weights.abstract_model(QWEN3_VL_8B, jnp.bfloat16)
  ours = weights.expected_keys(abstract)
  assert len(theirs) == 750
  assert ours == theirs
  n_params = sum(int(np.prod(s)) for s in ours.values())
  assert abs(n_params - 8.767e9) < 0.01e9


def test_missing_directory():
  _one_line_error(CheckpointError, lambda: load_target("/nonexistent/qwen3-vl-ckpt"), "/nonexistent/qwen3-vl-ckpt")


def test_config_of_another_model_type(saved, tmp_path):
  bad = tmp_path / "llama"
  shutil.copytree(saved.path, bad)
  cfg = json.loads((bad / "config.json").read_text())
  cfg["model_type"] = "llama"
  (bad / "config.json").write_text(json.dumps(cfg))
  _one_line_error(ConfigError, lambda: load_target(bad, dtype=jnp.float32), "llama", "qwen3_vl")


def _rewrite(saved, tmp_path, edit):
  """Copies the checkpoint with its tensors edited by `edit(dict) -> dict`, as one file."""
  out = tmp_path / "edited"
  out.mkdir()
  shutil.copy(saved.path / "config.json", out / "config.json")
  sd = edit(oracle.state_dict_np(saved.hf))
  sd.pop("lm_head.weight", None) if saved.cfg.tie_word_embeddings else None
  save_tensors(out, sd)
  return out


def test_missing_tensor_named(saved, tmp_path):
  key = "model.language_model.layers.1.mlp.up_proj.weight"
  out = _rewrite(saved, tmp_path, lambda sd: {k: v for k, v in sd.items() if k != key})
  _one_line_error(CheckpointError, lambda: load_target(out, dtype=jnp.float32), key, "missing")


def test_misshaped_tensor_named(saved, tmp_path):
  key = "model.visual.blocks.0.attn.qkv.weight"

  def edit(sd):
    sd[key] = sd[key][:-1]
    return sd

  out = _rewrite(saved, tmp_path, edit)
  msg = _one_line_error(CheckpointError, lambda: load_target(out, dtype=jnp.float32), key)
  assert "(95, 32)" in msg and "(96, 32)" in msg, msg


def test_truncated_safetensors_named(saved, tmp_path):
  bad = tmp_path / "trunc"
  shutil.copytree(saved.path, bad)
  shard = sorted(bad.glob("model-*.safetensors"))[-1]
  size = shard.stat().st_size
  with open(shard, "r+b") as f:
    f.truncate(size - 100)
  _one_line_error(CheckpointError, lambda: load_target(bad, dtype=jnp.float32), shard.name, "truncated")
  assert index_checkpoint is not None and os.path.exists(shard)


def test_placeholders_disagree_with_images(saved):
  target = load_target(saved.path, dtype=jnp.float32)
  prompt = oracle.two_image_prompt(saved.cfg, seed=3)
  inputs = _inputs(saved.cfg, prompt)
  inputs.image_grid_thw = prompt.grid_thw[:1]   # one image's worth of pixels for two placeholders runs
  _one_line_error(InputError, lambda: target.prefill(inputs, target.init_cache(1, 96)), "placeholder")


def test_prompt_longer_than_cache(saved):
  target = load_target(saved.path, dtype=jnp.float32)
  inputs = _inputs(saved.cfg, oracle.two_image_prompt(saved.cfg, seed=3))
  n = inputs.input_ids.shape[1]
  _one_line_error(InputError, lambda: target.prefill(inputs, target.init_cache(1, n - 1)),
                  f"{n} tokens", f"max_length {n - 1}")
