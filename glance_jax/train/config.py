"""`TrainConfig`: every knob of a head-training run, read from a Python config file + overrides.

A config file (configs/train_*.py) defines `get_config() -> TrainConfig`. Command-line overrides
are `key=value` pairs, converted to the field's type (tuples as comma lists), so
`python train.py --config configs/train_tiny.py steps=50 mesh=1,1,2` needs no new code. A key that
names a keyword parameter of the file's get_config goes to get_config instead, as a string: one
file serves a family of runs (`configs/train_testbed.py suite=v4`), and the other overrides apply to
what it returns.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import pathlib
import typing
from typing import Sequence

DRAFTERS = ("glance", "eagle3", "parent")


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainConfig:
  # --- the drafter this run trains: glance (the DFlash block head) | eagle3 (the rival EAGLE-3 head,
  # train/eagle3_train.py: the same rows, mesh, checkpoints and export path, its own objective) |
  # parent (a parent correction of the head_init head's marginals, train/parent_train.py)
  drafter: str = "glance"
  # --- models
  target: str                              # HF Qwen3-VL checkpoint directory or hub repo id
  target_dtype: str = "bfloat16"           # the frozen target's weights and compute
  head_layers: int = 5                     # DFlash head depth (paper: 5)
  block_size: int = 16                     # B; the head drafts B - 1 tokens
  head_init: str | None = None             # DFlash checkpoint to start from (paper: z-lab/Qwen3-8B-DFlash-b16); drafter=eagle3: a midlayer head
  compute_dtype: str = "bfloat16"          # head forward dtype; master weights stay fp32
  # --- data
  task_files: tuple[str, ...] = ()         # JSONL prompt files (glance_jax.data.records); regenerated first
  regen_max_new_tokens: int = 256          # the target's answers: length cap
  regen_temperature: float = 0.0           # 0: the target's greedy answers; > 0: draws at that T
  regen_top_p: float = 1.0                 # (a head then learns the target's distribution at its
  regen_top_k: int = 0                     # forks, not its tie-breaks: train/regenerate.py)
  regen_batch_size: int = 8
  seq_len: int = 1024                      # prompt + response, right-padded
  max_patches: int = 1024                  # static vision patch budget per batch (all images)
  truncate: bool = True                    # cut sequences longer than seq_len (never image rows)
  on_bad_record: str = "skip"              # skip | raise: a record with a missing image etc.
  # --- EAGLE-3 (drafter="eagle3"; SpecForge's recipe). The block-head knobs above do not apply.
  eagle3_draft_vocab: int = 32000          # K: the rows' K most frequent response tokens (capped at the target vocab)
  eagle3_ttt_steps: int = 7                # training-time test: unrolled draft steps per row
  eagle3_decay: float = 0.8                # step k of the unroll weighs decay^k
  eagle3_layers: int = 1                   # midlayers (1: the released `midlayer.*` layout)
  eagle3_aux_layer_ids: tuple[int, ...] = ()  # 3 tapped target layers; () = EAGLE-3's default for its depth
  eagle3_save_embed: bool = False          # export a copy of the target's embed_tokens with the head
  # --- parent correction (drafter="parent"; head/parent_correction.py)
  parent_joint: bool = False               # train the head with it (else head_init is frozen)
  parent_width: int = 256                  # m: the transition MLP's width
  parent_rank: int = 32                    # r: the logit bias's rank
  parent_path: bool = False                # also read the bag of the parent's ancestors (head/parent_correction.py)
  # --- objective (SpecForge DFlash recipe)
  num_anchors: int = 512                   # blocks per sequence, fresh random anchors each step
  gamma: float | None = None               # loss decay; None = 7 for B = 16 (SpecForge)
  head_group: int | None = None            # blocks per checkpointed head pass; None = all anchors in one
                                           # pass (the 8B recipe needs groups: its scores would not fit)
  ce_chunk: int = 128                      # blocks per CE chunk: each chunk's fp32 logits are
                                           # [rows, ce_chunk, B, V] (8 rows at 8B: 10 GB at 128)
  # --- optimisation (recipe defaults)
  batch_size: int = 8                      # global sequences per step
  epochs: int = 1
  steps: int | None = None                 # overrides epochs when set
  lr: float = 6e-4
  weight_decay: float = 0.0
  warmup_frac: float = 0.04
  clip: float = 1.0
  seed: int = 0
  # --- parallelism: (data, fsdp, tensor); -1 = all remaining devices
  mesh: tuple[int, int, int] = (-1, 1, 1)
  # --- bookkeeping
  workdir: str = "runs/glance"             # regen/, ckpt/, metrics.jsonl, head/ live here
  regen_dir: str | None = None             # the regenerated rows; None = <workdir>/regen (an EAGLE-3
                                           # run points at its GLANCE run's: the same rows, made once)
  export_dir: str | None = None            # the trained head; None = <workdir>/head (eagle3: <workdir>/eagle3_head)
  save_every: int = 500                    # orbax checkpoint every K steps (and at the end)
  keep: int = 3                            # last n checkpoints kept
  log_every: int = 1

  @property
  def regen_sampling(self):
    """The regeneration's decode.sampling.SamplingConfig (greedy at regen_temperature 0)."""
    from glance_jax.decode.sampling import SamplingConfig
    try:
      return SamplingConfig(self.regen_temperature, self.regen_top_k, self.regen_top_p)
    except ValueError as e:
      raise ValueError(f"regen_temperature / regen_top_k / regen_top_p: {e}") from None

  def __post_init__(self):
    self.regen_sampling   # checks the three regen_ sampling fields
    if self.drafter not in DRAFTERS:
      raise ValueError(f"drafter must be one of {', '.join(map(repr, DRAFTERS))}, got {self.drafter!r}")
    if self.drafter == "parent" and not self.parent_joint and not self.head_init:
      raise ValueError("drafter=parent trains a correction for a frozen head: set head_init=DIR (a DFlash-format "
                       "head), or parent_joint=true to train a head with it")
    if self.eagle3_aux_layer_ids and len(self.eagle3_aux_layer_ids) != 3:
      raise ValueError(f"eagle3_aux_layer_ids must be 3 layer ids or empty (the default), got "
                       f"{self.eagle3_aux_layer_ids}")
    if not self.eagle3_decay > 0:
      raise ValueError(f"eagle3_decay must be > 0, got {self.eagle3_decay}")
    if self.block_size < 2:
      raise ValueError(f"block_size must be >= 2, got {self.block_size}")
    if self.on_bad_record not in ("skip", "raise"):
      raise ValueError(f"on_bad_record must be 'skip' or 'raise', got {self.on_bad_record!r}")
    if self.head_group is not None and self.head_group < 1:
      raise ValueError(f"head_group must be >= 1 or None, got {self.head_group}")
    for name in ("batch_size", "num_anchors", "save_every", "keep", "seq_len", "epochs", "ce_chunk",
                 "eagle3_draft_vocab", "eagle3_ttt_steps", "eagle3_layers", "parent_width", "parent_rank"):
      if getattr(self, name) < 1:
        raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


def _coerce(field: dataclasses.Field, text: str):
  hint = typing.get_type_hints(TrainConfig)[field.name]
  origin, args = typing.get_origin(hint), typing.get_args(hint)
  if text.lower() in ("none", "null") and type(None) in args:
    return None
  if hint is bool or (bool in args):
    if text.lower() not in ("true", "false", "1", "0"):
      raise ValueError(f"{field.name}: expected true/false, got {text!r}")
    return text.lower() in ("true", "1")
  if origin is tuple:
    item = args[0] if args else str
    parts = [p for p in text.split(",") if p != ""]
    return tuple(item(p) for p in parts)
  for t in (int, float, str):
    if hint is t or t in args:
      return t(text)
  return text


def apply_overrides(cfg: TrainConfig, overrides: Sequence[str], config_params: Sequence[str] = ()) -> TrainConfig:
  """`cfg` with each key=value override applied (`config_params`: the config file's own keys, named
  in the error for an unknown key)."""
  fields = {f.name: f for f in dataclasses.fields(TrainConfig)}
  changes = {}
  for item in overrides:
    if "=" not in item:
      raise ValueError(f"override {item!r} is not key=value")
    key, value = item.split("=", 1)
    if key not in fields:
      also = f"; the config file's get_config takes {', '.join(config_params)}" if config_params else ""
      raise ValueError(f"unknown config key {key!r}; known: {', '.join(sorted(fields))}{also}")
    try:
      changes[key] = _coerce(fields[key], value)
    except ValueError as e:
      raise ValueError(f"override {item!r}: {e}") from None
  return dataclasses.replace(cfg, **changes)


def load_config(path: str | pathlib.Path, overrides: Sequence[str] = ()) -> TrainConfig:
  path = pathlib.Path(path)
  if not path.is_file():
    raise ValueError(f"config file not found: {path}")
  spec = importlib.util.spec_from_file_location(f"glance_train_config_{path.stem}", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  if not hasattr(module, "get_config"):
    raise ValueError(f"{path}: defines no get_config()")
  params = [p.name for p in inspect.signature(module.get_config).parameters.values()
            if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
  own, rest = {}, []
  for item in overrides:
    key, sep, value = item.partition("=")
    if sep and key in params:
      own[key] = value
    else:
      rest.append(item)
  return apply_overrides(module.get_config(**own), rest, params)
