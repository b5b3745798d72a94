"""Writes a complete tiny Qwen3-VL checkpoint directory in the real Hugging Face layout.

config.json, sharded-or-single safetensors, tokenizer.json + tokenizer_config.json, chat template and
preprocessor_config.json: exactly what `load_target` and `Processor.from_pretrained` read for the
real 8B model, so tests and the embedded default of decode.py exercise the real loading path.
"""

from __future__ import annotations

import json
import pathlib

from flax import nnx

from glance_jax.config import Qwen3VLConfig, tiny_config
from glance_jax.io import save_tensors
from glance_jax.qwen3_vl.weights import state_tensors


def special_ids(cfg: Qwen3VLConfig) -> dict[str, int]:
  """Where the tiny configs put Qwen's special tokens (the top of the vocabulary)."""
  v = cfg.text.vocab_size
  ids = {"<|vision_start|>": cfg.vision_start_token_id, "<|vision_end|>": cfg.vision_end_token_id,
         "<|image_pad|>": cfg.image_token_id, "<|video_pad|>": cfg.video_token_id,
         "<|im_start|>": v - 4, "<|im_end|>": cfg.eos_token_ids[0], "<|endoftext|>": v - 2}
  return {t: i for t, i in ids.items() if i >= 0}  # a text-only config has no vision ids (-1)


def preprocessor_config(min_pixels: int = 64 * 64, max_pixels: int = 128 * 128) -> dict:
  """The real Qwen3-VL preprocessor_config.json with smaller pixel-area bounds (areas, not edges)."""
  return {"image_processor_type": "Qwen2VLImageProcessorFast", "do_resize": True, "do_rescale": True,
          "do_normalize": True, "do_convert_rgb": True, "resample": 3, "rescale_factor": 1 / 255,
          "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "patch_size": 16,
          "temporal_patch_size": 2, "merge_size": 2,
          "size": {"shortest_edge": min_pixels, "longest_edge": max_pixels}}


def write_checkpoint(out_dir, cfg: Qwen3VLConfig, params: nnx.State, *, max_shard_bytes: int | None = None,
                     min_pixels: int = 64 * 64, max_pixels: int = 128 * 128,
                     tokenizer_corpus=None, chat_template: str | None = None) -> pathlib.Path:
  """Saves params (a Target's state) plus every side file of the HF layout; the tokenizer is trained
  on `tokenizer_corpus` (lines of text) when given. A text-only config writes no preprocessor config."""
  from glance_jax.testing.tokenizer import make_tiny_tokenizer
  out = pathlib.Path(out_dir)
  out.mkdir(parents=True, exist_ok=True)
  save_tensors(out, state_tensors(params), max_shard_bytes=max_shard_bytes)
  (out / "config.json").write_text(json.dumps(cfg.to_hf_dict(), indent=2))
  if not cfg.text_only:
    (out / "preprocessor_config.json").write_text(json.dumps(preprocessor_config(min_pixels, max_pixels), indent=2))
  kw = {} if chat_template is None else {"chat_template": chat_template}
  make_tiny_tokenizer(out, cfg.text.vocab_size, special_ids(cfg), corpus=tokenizer_corpus, **kw)
  return out


def make_tiny_checkpoint(out_dir, cfg: Qwen3VLConfig | None = None, *, seed: int = 0,
                         max_shard_bytes: int | None = None) -> pathlib.Path:
  """A random tiny target (lively weights: varied text, no norm exactly 1) as a checkpoint directory."""
  from glance_jax.qwen3_vl.weights import abstract_model
  from glance_jax.testing.random_weights import lively
  cfg = cfg or tiny_config()
  params = lively(abstract_model(cfg)[1], seed)   # lively reads only shapes: no initialiser to compile
  return write_checkpoint(out_dir, cfg, params, max_shard_bytes=max_shard_bytes)
