"""The parity oracle: transformers' Qwen3-VL in fp32 with every weight, norm and bias re-randomised.

HF initialises norms to 1 and biases to 0, which would hide a missing or misplaced weight in the
port; every parameter here is drawn fresh (norm weights around 1 so activations stay sane).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from glance_jax.config import Qwen3VLConfig, tiny_config
from glance_jax.testing.images import random_images  # noqa: F401  (tests call oracle.random_images)

# Two tiny architectures: GQA with head_dim != hidden/heads in both; the second ties embeddings,
# uses 3 q heads per kv head, a 6x6 position table and deepstack from two vision blocks.
CONFIG_A = tiny_config()
CONFIG_B = tiny_config(vocab_size=300, hidden=48, layers=3, heads=6, kv_heads=2, head_dim=16,
                       intermediate=96, vision_depth=3, vision_hidden=48, vision_heads=3,
                       vision_intermediate=80, num_position_embeddings=36, deepstack=(0, 2), tie=True)


def hf_config(cfg: Qwen3VLConfig):
  from transformers import Qwen3VLConfig as HFConfig
  return HFConfig(**hf_kwargs(cfg))


def hf_kwargs(cfg: Qwen3VLConfig) -> dict:
  """cfg.to_hf_dict() without the fields a transformers config class sets itself."""
  d = cfg.to_hf_dict()
  d.pop("model_type")
  d.pop("architectures")
  return d


def hf_model(cfg: Qwen3VLConfig, seed: int = 0):
  """A random HF Qwen3VLForConditionalGeneration, fp32, eval mode, every parameter redrawn."""
  import torch
  from transformers import Qwen3VLForConditionalGeneration
  torch.manual_seed(seed)
  return rerandomise(Qwen3VLForConditionalGeneration(hf_config(cfg)).eval(), seed)


def hf_text_model(cfg: Qwen3VLConfig, seed: int = 0):
  """A random HF Qwen3ForCausalLM (text-only config), fp32, eval mode, every parameter redrawn."""
  import torch
  from transformers import Qwen3Config, Qwen3ForCausalLM
  torch.manual_seed(seed)
  return rerandomise(Qwen3ForCausalLM(Qwen3Config(**hf_kwargs(cfg))).eval(), seed)


def rerandomise(model, seed: int):
  """Redraws every parameter of `model` in place (norm weights around 1, vectors around 0)."""
  import torch
  gen = torch.Generator().manual_seed(seed + 1)
  with torch.no_grad():
    for name, p in model.named_parameters():
      noise = torch.randn(p.shape, generator=gen)
      if "norm" in name and name.endswith("weight"):
        p.copy_(1.0 + 0.2 * noise)
      elif p.ndim == 1:
        p.copy_(0.2 * noise)
      else:
        p.copy_(noise * (1.0 / np.sqrt(p[0].numel())))
  return model


def state_dict_np(model) -> dict[str, np.ndarray]:
  return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


def image_processor():
  from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
  return Qwen2VLImageProcessorPil(patch_size=16, temporal_patch_size=2, merge_size=2,
                                  image_mean=[0.5] * 3, image_std=[0.5] * 3,
                                  size={"shortest_edge": 32 * 32, "longest_edge": 16777216})




@dataclasses.dataclass
class Prompt:
  ids: np.ndarray            # int64 [1, S]
  pixel_values: np.ndarray   # float32 [N, 1536]
  grid_thw: np.ndarray       # int64 [n, 3]


def two_image_prompt(cfg: Qwen3VLConfig, seed: int = 0) -> Prompt:
  """text, image 1, text, image 2 (different grid), text; placeholders expanded."""
  px = image_processor()(images=random_images(seed), return_tensors="np")
  grid = np.asarray(px["image_grid_thw"])
  n = [int(g.prod() // 4) for g in grid]
  vs, ve, im = cfg.vision_start_token_id, cfg.vision_end_token_id, cfg.image_token_id
  ids = ([10, 11, 12, vs] + [im] * n[0] + [ve, 20, 21, vs] + [im] * n[1] + [ve, 13, 12, 10, 14, 12])
  return Prompt(np.asarray([ids], np.int64), np.asarray(px["pixel_values"], np.float32), grid)
