"""configs/ ship the real 8B architecture; config.json parsing matches transformers'."""

import dataclasses
import json
import pathlib

import pytest

from glance_jax.config import QWEN3_VL_8B, ConfigError, Qwen3VLConfig, tiny_config

CONFIGS = pathlib.Path(__file__).resolve().parents[1] / "configs"


def test_shipped_8b_config_is_the_preset():
  assert Qwen3VLConfig.from_json_file(CONFIGS / "qwen3_vl_8b_instruct.json") == QWEN3_VL_8B


def test_shipped_tiny_config_round_trips():
  assert Qwen3VLConfig.from_json_file(CONFIGS / "qwen3_vl_tiny.json") == tiny_config()
  cfg = tiny_config(tie=True)
  assert Qwen3VLConfig.from_hf_dict(cfg.to_hf_dict()) == cfg


def test_transformers_reads_the_same_architecture():
  transformers = pytest.importorskip("transformers")
  hf = transformers.Qwen3VLConfig(**{k: v for k, v in json.loads(
      (CONFIGS / "qwen3_vl_8b_instruct.json").read_text()).items() if k != "model_type"})
  t, v = hf.text_config, hf.vision_config
  ours = QWEN3_VL_8B
  assert (t.hidden_size, t.num_hidden_layers, t.num_key_value_heads, t.head_dim, t.intermediate_size) == (
      ours.text.hidden_size, ours.text.num_hidden_layers, ours.text.num_key_value_heads, ours.text.head_dim,
      ours.text.intermediate_size)
  assert t.rope_parameters["rope_theta"] == ours.text.rope_theta
  assert tuple(t.rope_parameters["mrope_section"]) == ours.text.mrope_section
  assert tuple(v.deepstack_visual_indexes) == ours.vision.deepstack_visual_indexes


def test_other_model_type_and_missing_fields_are_clear_errors(tmp_path):
  d = QWEN3_VL_8B.to_hf_dict()
  with pytest.raises(ConfigError, match="model_type is 'qwen2_vl'"):
    Qwen3VLConfig.from_hf_dict(dict(d, model_type="qwen2_vl"))
  bad = dict(d, text_config={k: v for k, v in d["text_config"].items() if k != "hidden_size"})
  with pytest.raises(ConfigError, match="hidden_size"):
    Qwen3VLConfig.from_hf_dict(bad)
  with pytest.raises(ConfigError, match="config file not found"):
    Qwen3VLConfig.from_json_file(tmp_path / "config.json")
  (tmp_path / "config.json").write_text("{not json")
  with pytest.raises(ConfigError, match="not valid JSON"):
    Qwen3VLConfig.from_json_file(tmp_path / "config.json")
  with pytest.raises(ConfigError, match="mrope_section"):
    dataclasses.replace(QWEN3_VL_8B.text, mrope_section=(10, 10, 10))
