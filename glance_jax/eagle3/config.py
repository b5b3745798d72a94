"""`Eagle3Config`: the EAGLE-3 draft head's architecture, in the released "midlayer" config.json.

The format is EAGLE's / SpecForge's / AngelSlim's (SafeAILab/EAGLE@cb7e084 `eagle/model/cnets.py`,
SpecForge@a6b6b02 `configs/qwen3-vl-8b-eagle3.json`): a Llama config with `architectures
["LlamaForCausalLMEagle3"]`, `draft_vocab_size`, and optionally `target_hidden_size` and
`eagle_config.eagle_aux_hidden_state_layer_ids`. Reading it lets the head draft with released
checkpoints; writing it lets SGLang / SpecForge read ours back.

Tap convention (`aux_layer_ids`): id i names the OUTPUT of target decoder layer i (0-based), i.e.
HF `hidden_states[i + 1]`, the input of layer i + 1. That is what SGLang does with these ids
(`layers_to_capture = [i + 1 ...]`, captured before layer i + 1 runs) and what SpecForge's HF
backend does (a forward hook on `layers[i]`); our `TextModel(tap_layers=...)` taps the same
state. Absent from the config, EAGLE-3's default for a target of L layers applies: outputs of
{1, L//2 - 1, L - 4} (EAGLE captures the inputs of layers {2, L//2, L - 3}); {1, 17, 32} at L=36.
On Qwen3-VL the outputs of layers 0-2 also carry the deepstack image features: our taps (like HF)
are taken after that addition, SGLang's before it, so on image rows a tap id < 3 is ambiguous
(SpecForge's Qwen3-VL recipe uses {3, 17, 32} for that reason, PR #431).
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

from glance_jax.config import ConfigError, Qwen3VLConfig, read_json

ARCHITECTURE = "LlamaForCausalLMEagle3"


def default_aux_layer_ids(num_target_layers: int) -> tuple[int, int, int]:
  """EAGLE-3's taps for a target of L layers: outputs of layers (1, L//2 - 1, L - 4)."""
  L = int(num_target_layers)
  ids = (1, L // 2 - 1, L - 4)
  if min(ids) < 0:
    raise ConfigError(f"a target of {L} layers is too shallow for EAGLE-3's default taps {ids}; "
                      f"set eagle_config.eagle_aux_hidden_state_layer_ids")
  return ids


@dataclasses.dataclass(frozen=True, kw_only=True)
class Eagle3Config:
  """The head. `vocab_size` is the target's; the head's own lm_head has `draft_vocab_size` rows."""
  hidden_size: int
  intermediate_size: int
  num_attention_heads: int
  num_key_value_heads: int
  head_dim: int
  vocab_size: int
  draft_vocab_size: int
  num_hidden_layers: int = 1                 # 1: keys `midlayer.*`; n > 1: `midlayers.{i}.*`
  rms_norm_eps: float = 1e-6
  rope_theta: float = 10_000.0               # Llama's default when config.json has none
  # Qwen3-VL interleaved MRoPE over positions (t, h, w); None: 1-D rope on the t component.
  mrope_section: tuple[int, int, int] | None = None
  max_position_embeddings: int = 2048
  target_hidden_size: int | None = None      # width of one tapped feature; None: hidden_size
  aux_layer_ids: tuple[int, ...] | None = None  # None: default_aux_layer_ids(target depth)

  def __post_init__(self):
    if self.target_hidden_size is not None and int(self.target_hidden_size) == self.hidden_size:
      object.__setattr__(self, "target_hidden_size", None)  # one spelling, so configs compare equal
    if self.mrope_section is not None:
      object.__setattr__(self, "mrope_section", tuple(int(i) for i in self.mrope_section))
      if len(self.mrope_section) != 3 or sum(self.mrope_section) != self.head_dim // 2:
        raise ConfigError(f"mrope_section {self.mrope_section} must be 3 ints summing to "
                          f"head_dim/2 = {self.head_dim // 2}")
    if self.aux_layer_ids is not None:
      object.__setattr__(self, "aux_layer_ids", tuple(int(i) for i in self.aux_layer_ids))
      if len(self.aux_layer_ids) != 3 or min(self.aux_layer_ids) < 0:
        raise ConfigError(f"eagle_aux_hidden_state_layer_ids {list(self.aux_layer_ids)} must be 3 "
                          f"non-negative layer ids (fc reads 3 concatenated features)")
    if self.num_hidden_layers < 1:
      raise ConfigError(f"num_hidden_layers {self.num_hidden_layers} < 1")
    if self.num_attention_heads % self.num_key_value_heads:
      raise ConfigError(f"num_attention_heads {self.num_attention_heads} is not a multiple of "
                        f"num_key_value_heads {self.num_key_value_heads}")
    if not 0 < self.draft_vocab_size <= self.vocab_size:
      raise ConfigError(f"draft_vocab_size {self.draft_vocab_size} outside [1, vocab_size "
                        f"{self.vocab_size}]")

  @property
  def feature_size(self) -> int:
    """Width of one tapped target feature."""
    return self.target_hidden_size or self.hidden_size

  @property
  def fc_in_features(self) -> int:
    return 3 * self.feature_size

  def layer_ids_for(self, num_target_layers: int) -> tuple[int, ...]:
    """The tapped target layers (outputs of decoder layer i, HF hidden_states[i + 1])."""
    return self.aux_layer_ids or default_aux_layer_ids(num_target_layers)

  def check_target(self, target_cfg: Qwen3VLConfig, *, where: str = "eagle3 head") -> None:
    """Raises one ConfigError naming every config key that does not fit `target_cfg`."""
    t = target_cfg.text
    problems = []
    if self.hidden_size != t.hidden_size:  # tokens are embedded by the target's embed_tokens
      problems.append(f"'hidden_size' {self.hidden_size} != target hidden_size {t.hidden_size}")
    if self.feature_size != t.hidden_size:
      problems.append(f"'target_hidden_size' {self.feature_size} != target hidden_size {t.hidden_size}")
    if self.vocab_size != t.vocab_size:
      problems.append(f"'vocab_size' {self.vocab_size} != target vocab_size {t.vocab_size}")
    try:
      ids = self.layer_ids_for(t.num_hidden_layers)
    except ConfigError as e:
      problems.append(str(e))
    else:
      bad = [i for i in ids if i >= t.num_hidden_layers]
      if bad:
        problems.append(f"'eagle_config.eagle_aux_hidden_state_layer_ids' {list(ids)} include {bad} "
                        f">= the target's {t.num_hidden_layers} layers")
    if problems:
      raise ConfigError(f"{where}: does not fit the target: {'; '.join(problems)}")

  # --- config.json <-> dataclass ---------------------------------------------------------------

  @classmethod
  def from_dict(cls, d: dict[str, Any], source: str = "config") -> "Eagle3Config":
    archs = d.get("architectures") or [ARCHITECTURE]
    if not any("eagle3" in str(a).lower() for a in archs) or d.get("model_type", "llama") != "llama":
      hint = " (vLLM speculators format is not supported)" if "speculators_model_type" in d else ""
      raise ConfigError(f"{source}: architectures {archs} / model_type {d.get('model_type')!r} is not "
                        f"an EAGLE-3 midlayer config ({ARCHITECTURE!r}, 'llama'){hint}")
    for key, ok in (("attention_bias", False), ("mlp_bias", False), ("bias", False),
                    ("tie_word_embeddings", False)):
      if bool(d.get(key, ok)) != ok:
        raise ConfigError(f"{source}: '{key}' is {d[key]!r}; the EAGLE-3 head has none")
    if d.get("hidden_act", "silu") != "silu":
      raise ConfigError(f"{source}: 'hidden_act' is {d['hidden_act']!r}, expected 'silu'")
    missing = [k for k in ("hidden_size", "intermediate_size", "num_attention_heads", "vocab_size")
               if k not in d]
    if missing:
      raise ConfigError(f"{source}: missing {', '.join(repr(k) for k in missing)}")
    # transformers 5 folds rope_scaling / rope_theta into rope_parameters; accept both.
    rope = dict(d.get("rope_scaling") or {})
    rope.update(d.get("rope_parameters") or {})
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type not in ("default", "mrope"):
      raise ConfigError(f"{source}: 'rope_scaling' type {rope_type!r} is not supported "
                        f"(default rope or Qwen3-VL interleaved mrope only)")
    section = rope.get("mrope_section")
    if section is not None and rope.get("mrope_interleaved") is False:
      raise ConfigError(f"{source}: 'rope_scaling.mrope_interleaved' is false; only Qwen3-VL's "
                        f"interleaved MRoPE is supported")
    heads = int(d["num_attention_heads"])
    ids = (d.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    try:
      return cls(hidden_size=int(d["hidden_size"]), intermediate_size=int(d["intermediate_size"]),
                 num_attention_heads=heads, num_key_value_heads=int(d.get("num_key_value_heads") or heads),
                 head_dim=int(d.get("head_dim") or d["hidden_size"] // heads),
                 vocab_size=int(d["vocab_size"]),
                 draft_vocab_size=int(d.get("draft_vocab_size") or d["vocab_size"]),
                 num_hidden_layers=int(d.get("num_hidden_layers", 1)),
                 rms_norm_eps=float(d.get("rms_norm_eps", 1e-6)),
                 rope_theta=float(rope.get("rope_theta", d.get("rope_theta", 10_000.0))),
                 mrope_section=None if section is None else tuple(section),
                 max_position_embeddings=int(d.get("max_position_embeddings", 2048)),
                 target_hidden_size=d.get("target_hidden_size"),
                 aux_layer_ids=None if ids is None else tuple(ids))
    except ConfigError as e:  # name the file: the field checks know only the values
      raise ConfigError(f"{source}: {e}") from None

  @classmethod
  def from_json_file(cls, path: str | pathlib.Path) -> "Eagle3Config":
    return cls.from_dict(read_json(path, what="EAGLE-3 config"), source=str(path))

  def to_dict(self, *, dtype: str = "bfloat16") -> dict[str, Any]:
    """The config.json SpecForge / SGLang read (optional fields only when set)."""
    d: dict[str, Any] = dict(
        architectures=[ARCHITECTURE], model_type="llama", attention_bias=False, hidden_act="silu",
        hidden_size=self.hidden_size, intermediate_size=self.intermediate_size,
        num_attention_heads=self.num_attention_heads, num_key_value_heads=self.num_key_value_heads,
        head_dim=self.head_dim, num_hidden_layers=self.num_hidden_layers,
        vocab_size=self.vocab_size, draft_vocab_size=self.draft_vocab_size,
        rms_norm_eps=self.rms_norm_eps, rope_theta=self.rope_theta,
        max_position_embeddings=self.max_position_embeddings, tie_word_embeddings=False,
        pretraining_tp=1, dtype=dtype)
    if self.mrope_section is not None:
      d["rope_scaling"] = dict(rope_type="default", mrope_section=list(self.mrope_section),
                               mrope_interleaved=True)
    if self.target_hidden_size not in (None, self.hidden_size):
      d["target_hidden_size"] = self.target_hidden_size
    if self.aux_layer_ids is not None:
      d["eagle_config"] = dict(eagle_aux_hidden_state_layer_ids=list(self.aux_layer_ids))
    return d
