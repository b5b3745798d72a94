"""Config presets for the Qwen3 family GLANCE targets: text-only Qwen3-4B / Qwen3-8B (the targets of
z-lab's released DFlash heads) and every dense Qwen3-VL size (2B, 4B, 8B, 32B; Instruct and Thinking
share architectures). Values are the hub config.json's; docs/models.md says where each was confirmed.

`memory_estimate` gives parameter + KV-cache bytes, the basis of the mesh table in docs/models.md (an
estimate: activations, the head and XLA's workspace come on top).
"""

from __future__ import annotations

from glance_jax.config import QWEN3_VL_8B, Qwen3VLConfig, TextConfig, VisionConfig

_QWEN3_TEXT_ONLY = dict(image_token_id=-1, video_token_id=-1, vision_start_token_id=-1,
                        vision_end_token_id=-1, eos_token_ids=(151645,))

QWEN3_4B = Qwen3VLConfig(
    text=TextConfig(vocab_size=151936, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
                    num_attention_heads=32, num_key_value_heads=8, head_dim=128, rope_theta=1_000_000.0),
    vision=None, tie_word_embeddings=True, **_QWEN3_TEXT_ONLY)

QWEN3_8B = Qwen3VLConfig(
    text=TextConfig(vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                    num_attention_heads=32, num_key_value_heads=8, head_dim=128, rope_theta=1_000_000.0),
    vision=None, tie_word_embeddings=False, **_QWEN3_TEXT_ONLY)

# The small vision tower (depth 24, width 1024) of the 2B and 4B; the 8B and 32B share the 8B's.
_SMALL_VISION = dict(depth=24, hidden_size=1024, intermediate_size=4096, num_heads=16,
                     num_position_embeddings=2304, deepstack_visual_indexes=(5, 11, 17))
_LARGE_VISION = dict(depth=27, hidden_size=1152, intermediate_size=4304, num_heads=16,
                     num_position_embeddings=2304, deepstack_visual_indexes=(8, 16, 24))

QWEN3_VL_2B = Qwen3VLConfig(
    text=TextConfig(vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=28,
                    num_attention_heads=16, num_key_value_heads=8, head_dim=128),
    vision=VisionConfig(out_hidden_size=2048, **_SMALL_VISION), tie_word_embeddings=True)

QWEN3_VL_4B = Qwen3VLConfig(
    text=TextConfig(vocab_size=151936, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
                    num_attention_heads=32, num_key_value_heads=8, head_dim=128),
    vision=VisionConfig(out_hidden_size=2560, **_SMALL_VISION), tie_word_embeddings=True)

QWEN3_VL_32B = Qwen3VLConfig(
    text=TextConfig(vocab_size=151936, hidden_size=5120, intermediate_size=25600, num_hidden_layers=64,
                    num_attention_heads=64, num_key_value_heads=8, head_dim=128),
    vision=VisionConfig(out_hidden_size=5120, **_LARGE_VISION), tie_word_embeddings=False)

PRESETS: dict[str, Qwen3VLConfig] = {
    "Qwen/Qwen3-4B": QWEN3_4B, "Qwen/Qwen3-8B": QWEN3_8B,
    "Qwen/Qwen3-VL-2B-Instruct": QWEN3_VL_2B, "Qwen/Qwen3-VL-4B-Instruct": QWEN3_VL_4B,
    "Qwen/Qwen3-VL-8B-Instruct": QWEN3_VL_8B, "Qwen/Qwen3-VL-32B-Instruct": QWEN3_VL_32B,
}


def memory_estimate(cfg: Qwen3VLConfig, *, param_count: int, batch: int = 1, tokens: int = 8192,
                    bytes_per_value: int = 2) -> dict[str, int]:
  """Bytes of the weights and of a KV cache of `batch` x `tokens` slots (bf16 by default)."""
  t = cfg.text
  kv = 2 * t.num_hidden_layers * batch * tokens * t.num_key_value_heads * t.head_dim * bytes_per_value
  return dict(params=param_count * bytes_per_value, kv_cache=kv, total=param_count * bytes_per_value + kv)
