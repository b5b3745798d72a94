"""`HeadConfig`: the block-diffusion draft head's architecture, in DFlash's config.json format.

A DFlash draft config is a plain Qwen3 config.json plus `block_size`, `num_target_layers` and
`dflash_config: {target_layer_ids, mask_token_id}` (z-lab/dflash@44947fb `dflash/model.py`,
SpecForge@a6b6b023 `configs/qwen3-8b-dflash.json`). Reading that format lets GLANCE start from the
released text heads (z-lab/Qwen3-8B-DFlash-b16, as the paper does) and write heads that DFlash's
own code can read back.

Two fields are ours: `mrope_section` (Qwen3-VL's interleaved MRoPE, so that image-token context
rows keep their 3-D positions; on text positions, where t = h = w, it is exactly 1-D rope, so a
text head loses nothing) and `target_hidden_size` (DFlash ties fc's input to `n_taps * hidden`;
we keep it separate and only write it when it differs).
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

from glance_jax.config import ConfigError, Qwen3VLConfig, default_mrope_section, read_json

# DFlash's mask token for the Qwen3 tokenizer family (first unused row of the 151936-row
# embedding; SpecForge configs/qwen3-8b-dflash.json). Qwen3-VL shares that tokenizer.
QWEN3_MASK_TOKEN_ID = 151669

_ACCEPTED_MODEL_TYPES = (None, "qwen3", "qwen3_vl_text")


def build_target_layer_ids(num_target_layers: int, num_taps: int) -> tuple[int, ...]:
  """DFlash's tap layers, made distinct and in range for shallow (test-size) targets.

  DFlash (`build_target_layer_ids`): round(1 + i * (L - 4) / (n - 1)), n = 1 -> [L // 2];
  [1, 9, 17, 25, 33] at L = 36, n = 5. When that formula repeats ids or leaves [0, L) (L < n + 3),
  we take min(n, L) evenly spaced distinct layers instead, so tiny targets still get several taps.
  """
  L, n = int(num_target_layers), int(num_taps)
  if L < 1 or n < 1:
    raise ConfigError(f"cannot place {n} taps in a target of {L} layers")
  if n == 1:
    return (L // 2,)
  ids = [int(round(1 + i * (L - 4) / (n - 1))) for i in range(n)]
  if len(set(ids)) == n and all(0 <= i < L for i in ids):
    return tuple(ids)
  cands = list(range(1, L)) if L - 1 >= n else list(range(L))
  n = min(n, len(cands))
  if n == 1:
    return (cands[len(cands) // 2],)
  return tuple(cands[int(round(i * (len(cands) - 1) / (n - 1)))] for i in range(n))


@dataclasses.dataclass(frozen=True, kw_only=True)
class HeadConfig:
  """The draft head. Width fields equal the target's text decoder when built by `for_target`."""
  hidden_size: int
  intermediate_size: int
  num_hidden_layers: int                     # head depth: 5 in the paper
  num_attention_heads: int
  num_key_value_heads: int
  head_dim: int
  rope_theta: float
  mrope_section: tuple[int, int, int]
  target_layer_ids: tuple[int, ...]          # tapped target decoder layers (HF hidden_states[i+1])
  mask_token_id: int
  target_hidden_size: int                    # width of one tapped feature
  vocab_size: int                            # the target's (embed_tokens / lm_head are shared)
  rms_norm_eps: float = 1e-6
  block_size: int = 16                       # root + block_size - 1 drafted offsets
  num_target_layers: int | None = None       # the target's depth, when known

  def __post_init__(self):
    object.__setattr__(self, "target_layer_ids", tuple(int(i) for i in self.target_layer_ids))
    object.__setattr__(self, "mrope_section", tuple(int(i) for i in self.mrope_section))
    ids = self.target_layer_ids
    if self.block_size < 2:
      raise ConfigError(f"block_size {self.block_size} < 2: a block needs the root and at least one "
                        f"drafted slot")
    if not ids:
      raise ConfigError("target_layer_ids is empty: the head needs at least one tapped layer")
    if len(set(ids)) != len(ids) or min(ids) < 0:
      raise ConfigError(f"target_layer_ids {ids} must be distinct and non-negative")
    if self.num_target_layers is not None and max(ids) >= self.num_target_layers:
      raise ConfigError(f"target_layer_ids {ids} include ids >= the target's depth "
                        f"{self.num_target_layers} (valid: 0..{self.num_target_layers - 1})")
    if len(self.mrope_section) != 3 or sum(self.mrope_section) != self.head_dim // 2:
      raise ConfigError(f"mrope_section {self.mrope_section} must be 3 ints summing to "
                        f"head_dim/2 = {self.head_dim // 2}")
    if self.num_attention_heads % self.num_key_value_heads:
      raise ConfigError(f"num_attention_heads {self.num_attention_heads} is not a multiple of "
                        f"num_key_value_heads {self.num_key_value_heads}")
    if not 0 <= self.mask_token_id < self.vocab_size:
      raise ConfigError(f"mask_token_id {self.mask_token_id} outside the vocabulary "
                        f"[0, {self.vocab_size})")

  @property
  def num_taps(self) -> int:
    return len(self.target_layer_ids)

  @property
  def fc_in_features(self) -> int:
    """Width of the concatenated tapped features fed to `fc`."""
    return self.num_taps * self.target_hidden_size

  # --- construction ------------------------------------------------------------------------------

  @classmethod
  def for_target(cls, target_cfg: Qwen3VLConfig, *, num_layers: int = 5, block_size: int = 16,
                 mask_token_id: int | None = None,
                 target_layer_ids: tuple[int, ...] | None = None) -> "HeadConfig":
    """A head shaped like the target's text decoder (DFlash's choice), tapping `num_layers` layers.

    Rope (theta, MRoPE section) is the target's, so context rows reuse the target's positions as-is.
    The mask token defaults to DFlash's 151669 for Qwen-sized vocabularies, else the last id.
    """
    t = target_cfg.text
    if target_layer_ids is None:
      target_layer_ids = build_target_layer_ids(t.num_hidden_layers, num_layers)
    if mask_token_id is None:
      mask_token_id = QWEN3_MASK_TOKEN_ID if t.vocab_size > QWEN3_MASK_TOKEN_ID else t.vocab_size - 1
    return cls(hidden_size=t.hidden_size, intermediate_size=t.intermediate_size,
               num_hidden_layers=num_layers, num_attention_heads=t.num_attention_heads,
               num_key_value_heads=t.num_key_value_heads, head_dim=t.head_dim,
               rms_norm_eps=t.rms_norm_eps, rope_theta=t.rope_theta, mrope_section=t.mrope_section,
               block_size=block_size, target_layer_ids=tuple(target_layer_ids),
               mask_token_id=mask_token_id, target_hidden_size=t.hidden_size, vocab_size=t.vocab_size,
               num_target_layers=t.num_hidden_layers)

  def check_target(self, target_cfg: Qwen3VLConfig, *, where: str = "head") -> None:
    """Raises one ConfigError listing every way this head cannot draft for `target_cfg`."""
    t = target_cfg.text
    problems = []
    if self.hidden_size != t.hidden_size:
      problems.append(f"head hidden_size {self.hidden_size} != target hidden_size {t.hidden_size} "
                      f"(block tokens are embedded by the target)")
    if self.target_hidden_size != t.hidden_size:
      problems.append(f"fc input width {self.fc_in_features} != {self.num_taps} taps x target "
                      f"hidden_size {t.hidden_size} = {self.num_taps * t.hidden_size}")
    if self.vocab_size != t.vocab_size:
      problems.append(f"head vocab_size {self.vocab_size} != target vocab_size {t.vocab_size}")
    bad = [i for i in self.target_layer_ids if i >= t.num_hidden_layers]
    if bad:
      problems.append(f"target_layer_ids {self.target_layer_ids} include {bad} >= the target's depth "
                      f"{t.num_hidden_layers}")
    if problems:
      raise ConfigError(f"{where}: incompatible with the target: {'; '.join(problems)}")

  # --- DFlash config.json <-> dataclass ------------------------------------------------------------

  @classmethod
  def from_dflash_dict(cls, d: dict[str, Any], source: str = "config") -> "HeadConfig":
    """Reads a DFlash draft config.json (a Qwen3 config + block_size + dflash_config)."""
    if d.get("model_type") not in _ACCEPTED_MODEL_TYPES:
      raise ConfigError(f"{source}: model_type is {d.get('model_type')!r}, expected 'qwen3' "
                        f"(a DFlash draft config)")
    if d.get("attention_bias"):
      raise ConfigError(f"{source}: attention_bias is true; the DFlash head has no attention biases")
    if d.get("hidden_act", "silu") != "silu":
      raise ConfigError(f"{source}: hidden_act is {d['hidden_act']!r}, expected 'silu'")
    sliding = [t for t in d.get("layer_types") or () if t != "full_attention"]
    if sliding or d.get("use_sliding_window"):
      raise ConfigError(f"{source}: sliding-window layers ({sliding or 'use_sliding_window'}) are "
                        f"not supported; the head attends to its full context")
    missing = [k for k in ("hidden_size", "intermediate_size", "num_hidden_layers",
                           "num_attention_heads", "vocab_size", "block_size") if k not in d]
    if missing:
      raise ConfigError(f"{source}: missing {', '.join(missing)} (not a DFlash draft config?)")
    dflash = dict(d.get("dflash_config") or {})
    if dflash.get("mask_token_id") is None:
      raise ConfigError(f"{source}: dflash_config.mask_token_id is missing")
    # transformers 5 folds legacy rope_scaling/rope_theta into rope_parameters; accept both.
    rope = dict(d.get("rope_scaling") or {})
    rope.update(d.get("rope_parameters") or {})
    if rope.get("mrope_interleaved") is False:
      raise ConfigError(f"{source}: mrope_interleaved is false; only Qwen3-VL's interleaved MRoPE "
                        f"is supported")
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type not in ("default", "mrope"):
      raise ConfigError(f"{source}: rope_type {rope_type!r} is not supported (only default rope)")
    theta = float(rope.get("rope_theta", d.get("rope_theta", 1_000_000.0)))
    heads = d["num_attention_heads"]
    head_dim = d.get("head_dim") or d["hidden_size"] // heads
    layers = d["num_hidden_layers"]
    num_target_layers = d.get("num_target_layers")
    ids = dflash.get("target_layer_ids")
    if ids is None:
      if num_target_layers is None:
        raise ConfigError(f"{source}: neither dflash_config.target_layer_ids nor num_target_layers")
      ids = build_target_layer_ids(num_target_layers, layers)
    try:
      return cls(hidden_size=d["hidden_size"], intermediate_size=d["intermediate_size"],
                 num_hidden_layers=layers, num_attention_heads=heads,
                 num_key_value_heads=d.get("num_key_value_heads", heads), head_dim=head_dim,
                 rms_norm_eps=float(d.get("rms_norm_eps", 1e-6)), rope_theta=theta,
                 mrope_section=tuple(rope.get("mrope_section") or default_mrope_section(head_dim)),
                 block_size=int(d["block_size"]), target_layer_ids=tuple(ids),
                 mask_token_id=int(dflash["mask_token_id"]),
                 target_hidden_size=int(dflash.get("target_hidden_size", d["hidden_size"])),
                 vocab_size=d["vocab_size"], num_target_layers=num_target_layers)
    except ConfigError as e:  # name the file: the field checks know only the values
      raise ConfigError(f"{source}: {e}") from None

  @classmethod
  def from_json_file(cls, path: str | pathlib.Path) -> "HeadConfig":
    return cls.from_dflash_dict(read_json(path, what="head config"), source=str(path))

  def to_dflash_dict(self, *, dtype: str = "bfloat16") -> dict[str, Any]:
    """The config.json DFlash's `DFlashDraftModel` (transformers `Qwen3Config`) reads."""
    dflash: dict[str, Any] = dict(target_layer_ids=list(self.target_layer_ids),
                                  mask_token_id=self.mask_token_id)
    if self.target_hidden_size != self.hidden_size:
      dflash["target_hidden_size"] = self.target_hidden_size
    num_target_layers = self.num_target_layers
    if num_target_layers is None:  # DFlash's code reads it; the deepest tap + 1 is a lower bound.
      num_target_layers = max(self.target_layer_ids) + 1
    return dict(
        architectures=["DFlashDraftModel"], model_type="qwen3",
        auto_map={"AutoModel": "dflash.DFlashDraftModel"},
        attention_bias=False, attention_dropout=0.0, block_size=self.block_size, dflash_config=dflash,
        dtype=dtype, head_dim=self.head_dim, hidden_act="silu", hidden_size=self.hidden_size,
        initializer_range=0.02, intermediate_size=self.intermediate_size,
        layer_types=["full_attention"] * self.num_hidden_layers, max_position_embeddings=262144,
        max_window_layers=self.num_hidden_layers, num_attention_heads=self.num_attention_heads,
        num_hidden_layers=self.num_hidden_layers, num_key_value_heads=self.num_key_value_heads,
        num_target_layers=num_target_layers, rms_norm_eps=self.rms_norm_eps,
        rope_scaling=dict(rope_type="default", mrope_section=list(self.mrope_section),
                          mrope_interleaved=True),
        rope_theta=self.rope_theta, sliding_window=None, tie_word_embeddings=False, use_cache=True,
        use_sliding_window=False, vocab_size=self.vocab_size)
