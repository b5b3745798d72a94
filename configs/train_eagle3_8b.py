"""The EAGLE-3 rival at 8B: SpecForge's Qwen3-VL-8B recipe (configs/qwen3-vl-8b-eagle3.json,
examples/run_qwen3_vl_dense_eagle3_online.sh, scripts/train_eagle3.py defaults) on the GLANCE 8B
run's regenerated rows (configs/train_qwen3_vl_8b.py: same target, task files, seq_len and mesh).

One midlayer shaped like the target's decoder (hidden 4096, 32 / 8 heads, MRoPE (24, 20, 20)), taps
(3, 17, 32) (SpecForge's Qwen3-VL choice: ids < 3 would read the deepstack image features, PR #431),
a 32000-token draft vocabulary from the rows, 7 TTT steps with decay 0.8, AdamW lr 1e-4, wd 0, 1.5%
warmup then cosine, clip 0.5, 10 epochs, one sequence per device (SpecForge: batch 1 x 8 GPUs), bf16
compute on fp32 master weights; the target's embed_tokens frozen and not saved with the head.

  python train.py --config configs/train_qwen3_vl_8b.py --regenerate-only     # the shared rows
  python train.py --config configs/train_eagle3_8b.py mesh=1,8,1              # 8 x 80 GB GPUs
"""

import dataclasses
import pathlib

from glance_jax.train.config import TrainConfig, load_config


def get_config() -> TrainConfig:
  base = load_config(pathlib.Path(__file__).with_name("train_qwen3_vl_8b.py"))
  return dataclasses.replace(
      base, drafter="eagle3", head_init=None, regen_dir=str(pathlib.Path(base.workdir) / "regen"),
      workdir="runs/qwen3_vl_8b_eagle3",
      eagle3_draft_vocab=32000, eagle3_ttt_steps=7, eagle3_decay=0.8, eagle3_layers=1,
      eagle3_aux_layer_ids=(3, 17, 32),
      batch_size=8, epochs=10, steps=None, lr=1e-4, weight_decay=0.0, warmup_frac=0.015, clip=0.5,
      compute_dtype="bfloat16", target_dtype="bfloat16", mesh=(1, -1, 1), save_every=500, keep=3)
