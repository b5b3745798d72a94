"""The paper's recipe: Qwen3-VL-8B-Instruct target (frozen), 5-layer DFlash head initialised from
z-lab/Qwen3-8B-DFlash-b16, the target's greedy answers to 8,000 COCO-Caption2017 and 8,000 TextVQA
train prompts, one epoch. SpecForge's DFlash recipe: block 16, 512 anchors, gamma 7, AdamW lr 6e-4,
weight decay 0, 4% warmup then cosine, clip 1.0, bf16 compute with fp32 master weights.

  python -m glance_jax.data ...   # export the task files (see README: Training data)
  python train.py --config configs/train_qwen3_vl_8b.py --regenerate-only
  python train.py --config configs/train_qwen3_vl_8b.py mesh=1,8,1      # 8 x 80 GB GPUs
"""

from glance_jax.train.config import TrainConfig


def get_config() -> TrainConfig:
  return TrainConfig(
      target="Qwen/Qwen3-VL-8B-Instruct", target_dtype="bfloat16", compute_dtype="bfloat16",
      head_layers=5, block_size=16, head_init="z-lab/Qwen3-8B-DFlash-b16",
      task_files=("data/tasks/coco_caption_train_8k.jsonl", "data/tasks/textvqa_train_8k.jsonl"),
      regen_max_new_tokens=512, regen_batch_size=32, seq_len=3072, max_patches=16384, num_anchors=512, head_group=32,
      batch_size=32, epochs=1, lr=6e-4, weight_decay=0.0, warmup_frac=0.04, clip=1.0,
      mesh=(1, -1, 1), workdir="runs/qwen3_vl_8b", save_every=100, keep=3)
