"""Architecture configs: frozen dataclasses that mirror Hugging Face's Qwen3-VL / Qwen3 config.json.

Field names follow transformers' `Qwen3VLVisionConfig` / `Qwen3VLTextConfig` so that a checkpoint's
config.json maps onto them by name. `from_hf_dict` reads `qwen3_vl` (vision-language) and `qwen3`
(text-only `Qwen3ForCausalLM`, `vision=None`) configs, refuses other model types and fills every field
the real checkpoint may omit with the value transformers would use.

A text-only Qwen3 is the Qwen3-VL text decoder with 1-D rope. Our rope is Qwen3-VL's interleaved
MRoPE, which equals 1-D rope whenever the three position components are equal, as they are for every
token of a prompt without images; so a text-only target runs the same modules, and its special
vision ids are -1 (no token ever matches them).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from typing import Any

import jax.numpy as jnp

# --dtype / config names of the compute dtypes every command accepts (decode, bench, train).
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}

class ConfigError(ValueError):
  """A config.json that is not a Qwen3-VL config, or has missing/invalid fields."""


def read_json(path: str | pathlib.Path, *, what: str = "config") -> dict[str, Any]:
  """A JSON config file as a dict; a missing file or invalid JSON is a one-line ConfigError."""
  path = pathlib.Path(path)
  if not path.is_file():
    raise ConfigError(f"{what} file not found: {path}")
  try:
    return json.loads(path.read_text())
  except json.JSONDecodeError as e:
    raise ConfigError(f"{path}: not valid JSON ({e})") from None


@dataclasses.dataclass(frozen=True, kw_only=True)
class VisionConfig:
  depth: int
  hidden_size: int
  intermediate_size: int
  num_heads: int
  out_hidden_size: int
  num_position_embeddings: int
  deepstack_visual_indexes: tuple[int, ...]
  in_channels: int = 3
  patch_size: int = 16
  temporal_patch_size: int = 2
  spatial_merge_size: int = 2
  hidden_act: str = "gelu_pytorch_tanh"
  rope_theta: float = 10000.0
  layer_norm_eps: float = 1e-6  # hard-coded in HF, not read from config.json

  @property
  def head_dim(self) -> int:
    return self.hidden_size // self.num_heads

  @property
  def patch_dim(self) -> int:
    """Features per pixel_values row: (C, T, P, P) flattened."""
    return self.in_channels * self.temporal_patch_size * self.patch_size**2

  @property
  def merged_dim(self) -> int:
    return self.hidden_size * self.spatial_merge_size**2


@dataclasses.dataclass(frozen=True, kw_only=True)
class TextConfig:
  vocab_size: int
  hidden_size: int
  intermediate_size: int
  num_hidden_layers: int
  num_attention_heads: int
  num_key_value_heads: int
  head_dim: int
  rms_norm_eps: float = 1e-6
  rope_theta: float = 5_000_000.0
  mrope_section: tuple[int, int, int] = (24, 20, 20)
  hidden_act: str = "silu"

  def __post_init__(self):
    if sum(self.mrope_section) != self.head_dim // 2:
      raise ConfigError(
          f"mrope_section {self.mrope_section} sums to {sum(self.mrope_section)}, "
          f"expected head_dim/2 = {self.head_dim // 2}")
    if self.num_attention_heads % self.num_key_value_heads:
      raise ConfigError(f"num_attention_heads {self.num_attention_heads} is not a multiple of "
                        f"num_key_value_heads {self.num_key_value_heads}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Qwen3VLConfig:
  text: TextConfig
  vision: VisionConfig | None        # None: a text-only Qwen3ForCausalLM (model_type "qwen3")
  image_token_id: int = 151655
  video_token_id: int = 151656
  vision_start_token_id: int = 151652
  vision_end_token_id: int = 151653
  tie_word_embeddings: bool = False
  eos_token_ids: tuple[int, ...] = (151645,)  # <|im_end|>, config.json's text eos

  @property
  def text_only(self) -> bool:
    return self.vision is None

  @property
  def model_type(self) -> str:
    return "qwen3" if self.vision is None else "qwen3_vl"

  @property
  def spatial_merge_size(self) -> int:
    """The vision merge (2 for every Qwen3-VL); 2 for text-only targets too, where it is never used."""
    return 2 if self.vision is None else self.vision.spatial_merge_size

  def __post_init__(self):
    if self.vision is None:
      return
    if self.vision.out_hidden_size != self.text.hidden_size:
      raise ConfigError(f"vision out_hidden_size {self.vision.out_hidden_size} != text "
                        f"hidden_size {self.text.hidden_size}")
    if len(self.vision.deepstack_visual_indexes) > self.text.num_hidden_layers:
      raise ConfigError("more deepstack layers than decoder layers")

  # --- Hugging Face config.json <-> dataclass -------------------------------------------------

  @classmethod
  def from_hf_dict(cls, d: dict[str, Any], *, source: str = "config") -> "Qwen3VLConfig":
    model_type = d.get("model_type")
    if model_type == "qwen3":
      return _text_only_from_hf_dict(cls, d, source)
    if model_type != "qwen3_vl":
      raise ConfigError(f"{source}: model_type is {model_type!r}, expected 'qwen3_vl' (Qwen3-VL) or "
                        f"'qwen3' (text-only Qwen3ForCausalLM)")
    try:
      t, v = dict(d["text_config"]), dict(d["vision_config"])
    except KeyError as e:
      raise ConfigError(f"{source}: missing {e.args[0]}") from None
    text_kw = _text_kwargs(t, source, default_theta=5_000_000.0)
    vision_fields = {f.name for f in dataclasses.fields(VisionConfig)}
    vision_kw = {k: v[k] for k in vision_fields if k in v}
    vision_kw["deepstack_visual_indexes"] = tuple(v.get("deepstack_visual_indexes", (8, 16, 24)))
    try:
      return cls(
          text=TextConfig(**text_kw),
          vision=VisionConfig(**vision_kw),
          image_token_id=d.get("image_token_id", 151655),
          video_token_id=d.get("video_token_id", 151656),
          vision_start_token_id=d.get("vision_start_token_id", 151652),
          vision_end_token_id=d.get("vision_end_token_id", 151653),
          tie_word_embeddings=bool(d.get("tie_word_embeddings", t.get("tie_word_embeddings", False))),
          eos_token_ids=_eos_ids(t.get("eos_token_id", d.get("eos_token_id", 151645))),
      )
    except TypeError as e:  # a required field is missing
      raise ConfigError(f"{source}: {e}") from None

  @classmethod
  def from_json_file(cls, path: str | pathlib.Path) -> "Qwen3VLConfig":
    return cls.from_hf_dict(read_json(path), source=str(path))

  def to_hf_dict(self) -> dict[str, Any]:
    """The config.json transformers 5.x writes for this architecture."""
    if self.vision is None:
      return _text_only_to_hf_dict(self)
    t = dataclasses.asdict(self.text)
    t.pop("mrope_section")
    theta = t.pop("rope_theta")
    t.update(model_type="qwen3_vl_text", attention_bias=False, tie_word_embeddings=self.tie_word_embeddings,
             rope_parameters=dict(rope_type="default", rope_theta=theta,
                                  mrope_section=list(self.text.mrope_section), mrope_interleaved=True),
             eos_token_id=list(self.eos_token_ids) if len(self.eos_token_ids) > 1 else self.eos_token_ids[0])
    v = dataclasses.asdict(self.vision)
    for k in ("rope_theta", "layer_norm_eps"):
      v.pop(k)
    v.update(model_type="qwen3_vl_vision", deepstack_visual_indexes=list(self.vision.deepstack_visual_indexes))
    return dict(
        model_type="qwen3_vl", architectures=["Qwen3VLForConditionalGeneration"],
        text_config=t, vision_config=v, image_token_id=self.image_token_id,
        video_token_id=self.video_token_id, vision_start_token_id=self.vision_start_token_id,
        vision_end_token_id=self.vision_end_token_id, tie_word_embeddings=self.tie_word_embeddings)


def default_mrope_section(head_dim: int) -> tuple[int, int, int]:
  """Qwen3-VL's split of head_dim/2 frequencies into (t, h, w): (24, 20, 20) at head_dim 128."""
  half = head_dim // 2
  hw = half * 5 // 16
  return (half - 2 * hw, hw, hw)


def _eos_ids(eos) -> tuple[int, ...]:
  return tuple(eos) if isinstance(eos, (list, tuple)) else (eos,)


def _text_kwargs(t: dict[str, Any], source: str, *, default_theta: float) -> dict[str, Any]:
  """TextConfig keyword arguments from a text config dict (Qwen3-VL's text_config or a Qwen3 config)."""
  # transformers 5 folds legacy rope_scaling/rope_theta into rope_parameters; accept both.
  rope = dict(t.get("rope_scaling") or {})
  rope.update(t.get("rope_parameters") or {})
  rope_type = rope.get("rope_type", rope.get("type", "default"))
  if rope_type not in ("default", "mrope"):
    raise ConfigError(f"{source}: rope_type {rope_type!r} is not supported (only default rope)")
  if t.get("attention_bias"):
    raise ConfigError(f"{source}: attention_bias is true; Qwen3 attention has no biases")
  text_fields = {f.name for f in dataclasses.fields(TextConfig)}
  kw = {k: t[k] for k in text_fields if k in t}
  kw["rope_theta"] = float(rope.get("rope_theta", t.get("rope_theta", default_theta)))
  if not kw.get("head_dim"):
    kw["head_dim"] = t["hidden_size"] // t["num_attention_heads"]
  if "mrope_section" in rope:
    kw["mrope_section"] = tuple(rope["mrope_section"])
  else:  # 1-D rope: any split of the frequencies is exact on text positions (t = h = w)
    kw["mrope_section"] = default_mrope_section(kw["head_dim"])
  return kw


def _text_only_from_hf_dict(cls, d: dict[str, Any], source: str) -> "Qwen3VLConfig":
  """A Qwen3ForCausalLM config.json (model_type "qwen3": every text field at the top level)."""
  sliding = [t for t in d.get("layer_types") or () if t != "full_attention"]
  if sliding or d.get("use_sliding_window"):
    raise ConfigError(f"{source}: sliding-window layers are not supported")
  missing = [k for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                         "num_attention_heads") if k not in d]
  if missing:
    raise ConfigError(f"{source}: missing {', '.join(missing)}")
  kw = _text_kwargs(d, source, default_theta=10_000.0)
  kw.setdefault("num_key_value_heads", d["num_attention_heads"])
  try:
    return cls(text=TextConfig(**kw), vision=None, image_token_id=-1, video_token_id=-1,
               vision_start_token_id=-1, vision_end_token_id=-1,
               tie_word_embeddings=bool(d.get("tie_word_embeddings", True)),
               eos_token_ids=_eos_ids(d.get("eos_token_id", 151645)))
  except TypeError as e:
    raise ConfigError(f"{source}: {e}") from None


def _text_only_to_hf_dict(cfg: "Qwen3VLConfig") -> dict[str, Any]:
  """The config.json of a transformers 5.x Qwen3ForCausalLM."""
  t = cfg.text
  eos = list(cfg.eos_token_ids) if len(cfg.eos_token_ids) > 1 else cfg.eos_token_ids[0]
  return dict(model_type="qwen3", architectures=["Qwen3ForCausalLM"], vocab_size=t.vocab_size,
              hidden_size=t.hidden_size, intermediate_size=t.intermediate_size,
              num_hidden_layers=t.num_hidden_layers, num_attention_heads=t.num_attention_heads,
              num_key_value_heads=t.num_key_value_heads, head_dim=t.head_dim, hidden_act=t.hidden_act,
              rms_norm_eps=t.rms_norm_eps, attention_bias=False, eos_token_id=eos,
              rope_parameters=dict(rope_type="default", rope_theta=t.rope_theta),
              tie_word_embeddings=cfg.tie_word_embeddings, use_sliding_window=False)


# --- presets ----------------------------------------------------------------------------------

QWEN3_VL_8B = Qwen3VLConfig(
    text=TextConfig(vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                    num_attention_heads=32, num_key_value_heads=8, head_dim=128),
    vision=VisionConfig(depth=27, hidden_size=1152, intermediate_size=4304, num_heads=16,
                        out_hidden_size=4096, num_position_embeddings=2304,
                        deepstack_visual_indexes=(8, 16, 24)),
)


def tiny_config(*, vocab_size: int = 512, hidden: int = 64, layers: int = 4, heads: int = 4,
                kv_heads: int = 2, head_dim: int = 32, intermediate: int = 128,
                vision_depth: int = 4, vision_hidden: int = 32, vision_heads: int = 2,
                vision_intermediate: int = 64, num_position_embeddings: int = 64,
                deepstack: tuple[int, ...] = (0, 2, 3), tie: bool = False,
                mrope_section: tuple[int, int, int] | None = None, text_only: bool = False) -> Qwen3VLConfig:
  """A tiny Qwen3-VL (or, with text_only, a tiny Qwen3ForCausalLM) for tests: special ids sit at the
  top of the vocabulary."""
  if mrope_section is None:
    mrope_section = default_mrope_section(head_dim)
  text = TextConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=intermediate,
                    num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                    head_dim=head_dim, mrope_section=tuple(mrope_section),
                    rope_theta=1_000_000.0 if text_only else 5_000_000.0)
  if text_only:
    return Qwen3VLConfig(text=text, vision=None, image_token_id=-1, video_token_id=-1,
                         vision_start_token_id=-1, vision_end_token_id=-1,
                         eos_token_ids=(vocab_size - 3,), tie_word_embeddings=tie)
  return Qwen3VLConfig(
      text=text,
      vision=VisionConfig(depth=vision_depth, hidden_size=vision_hidden, intermediate_size=vision_intermediate,
                          num_heads=vision_heads, out_hidden_size=hidden,
                          num_position_embeddings=num_position_embeddings,
                          deepstack_visual_indexes=tuple(deepstack)),
      vision_start_token_id=vocab_size - 8, vision_end_token_id=vocab_size - 7,
      image_token_id=vocab_size - 6, video_token_id=vocab_size - 5,
      eos_token_ids=(vocab_size - 3,), tie_word_embeddings=tie)
