"""The block-diffusion draft head (DFlash architecture) and its DFlash-format weights.

  HeadConfig.for_target(target_cfg) / .from_dflash_dict(d) / .to_dflash_dict()
  init_head(cfg, seed=, dtype=, from_dflash=, mesh=) -> (graphdef, params)
  BlockHead: project_context(feats) -> ctx; context_kv(ctx, positions) -> (k, v) per layer;
             __call__(noise, noise_positions, ctx_k, ctx_v, mask) -> hidden
  block_mask(ctx_len, ctx_slots, block) -> decoding mask
  save_head(dir, cfg, params) / load_head(path, dtype=, target_config=, block_size=)
  Head: a head bound for decoding (Head.load(path, target=), Head.random(target), .ablated(kind))
"""

from glance_jax.head.checkpoint import load_head, read_head_config, save_head
from glance_jax.head.config import QWEN3_MASK_TOKEN_ID, HeadConfig, build_target_layer_ids
from glance_jax.head.head import ABLATIONS, Head
from glance_jax.head.init import init_head
from glance_jax.head.model import BlockHead, abstract_head, block_mask, param_count

__all__ = [
    "ABLATIONS", "Head", "HeadConfig", "QWEN3_MASK_TOKEN_ID", "build_target_layer_ids",
    "BlockHead", "abstract_head", "block_mask", "init_head", "param_count",
    "load_head", "read_head_config", "save_head",
]
