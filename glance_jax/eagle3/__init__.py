"""The EAGLE-3 draft head (one autoregressive draft step per call) and its midlayer-format weights.

  Eagle3Config.from_dict(d) / .from_json_file(path) / .to_dict(); .check_target(target_cfg);
      .layer_ids_for(L) -> tapped target layers (outputs of decoder layer i, HF hidden_states[i+1])
  Eagle3Head: embed(ids, target_embed) -> embeds; project(feats) -> g;
      __call__(g, embeds, positions, cache, start, mask) -> (draft logits, h, cache)
  init_cache(cfg, batch, slots) / causal_mask(start, t, slots)
  init_eagle3(cfg, seed=, with_embed=) / abstract_head(cfg)
  save_eagle3(dir, cfg, params, d2t, t2d) / load_eagle3(path, target_cfg, dtype=) -> Eagle3Checkpoint
  vocab_map_from_counts(counts, K) -> (d2t, t2d); draft_to_target(ids, d2t)
"""

from glance_jax.eagle3.checkpoint import Eagle3Checkpoint, load_eagle3, read_eagle3_config, save_eagle3
from glance_jax.eagle3.config import ARCHITECTURE, Eagle3Config, default_aux_layer_ids
from glance_jax.eagle3.model import (Eagle3Cache, Eagle3Head, abstract_head, causal_mask, draft_to_target,
                                     init_cache, init_eagle3, vocab_map_from_counts, vocab_map_problem)

__all__ = [
    "ARCHITECTURE", "Eagle3Config", "default_aux_layer_ids",
    "Eagle3Cache", "Eagle3Head", "abstract_head", "causal_mask", "init_cache", "init_eagle3",
    "draft_to_target", "vocab_map_from_counts", "vocab_map_problem",
    "Eagle3Checkpoint", "load_eagle3", "read_eagle3_config", "save_eagle3",
]
