"""The recipe's optimizer: AdamW on fp32 master weights, linear warmup then cosine to 0, clip 1.0.

SpecForge (`specforge/optimizer.py` BF16Optimizer, `specforge/lr_scheduler.py`
CosineAnnealingWarmupLR) keeps fp32 copies of the draft's weights, clips their gradients to a
global norm, and steps `torch.optim.AdamW(lr, weight_decay)` with torch's default betas
(0.9, 0.999) and eps 1e-8; the DFlash recipe sets lr 6e-4, weight decay 0, warmup ratio 0.04, clip
1.0. Its schedule gives optimizer step t (from 0) lr * (t+1)/W during the W = int(0.04 * total)
warmup steps, then a cosine from lr to 0 over the remaining total - W steps; `lr_schedule`
reproduces that exactly.

Here the master weights are simply the fp32 params in the train state; `make_train_step`
casts them to the compute dtype (bf16) inside the loss, so gradients and moments stay fp32.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import optax


def lr_schedule(*, total_steps: int, lr: float = 6e-4, warmup_frac: float = 0.04) -> optax.Schedule:
  """step -> learning rate (SpecForge's CosineAnnealingWarmupLR, eta_min 0)."""
  if total_steps < 1:
    raise ValueError(f"total_steps must be >= 1, got {total_steps}")
  if not 0.0 <= warmup_frac < 1.0:
    raise ValueError(f"warmup_frac must be in [0, 1), got {warmup_frac}")
  warmup = int(warmup_frac * total_steps)
  decay = max(total_steps - warmup, 1)

  def schedule(step):
    t = jnp.asarray(step, jnp.float32)
    warm = lr * (t + 1.0) / max(warmup, 1)
    frac = jnp.clip((t - warmup) / decay, 0.0, 1.0)
    cos = 0.5 * lr * (1.0 + jnp.cos(math.pi * frac))
    return jnp.where(t < warmup, warm, cos)

  return schedule


def make_optimizer(*, total_steps: int, lr: float = 6e-4, weight_decay: float = 0.0,
                   warmup_frac: float = 0.04, clip: float | None = 1.0, b1: float = 0.9,
                   b2: float = 0.999, eps: float = 1e-8
                   ) -> tuple[optax.GradientTransformation, optax.Schedule]:
  """-> (tx, schedule): clip_by_global_norm(clip) then AdamW with the schedule.

  The optimizer only ever sees the head's parameters: the frozen target is an argument of the
  train step, never part of the optimized tree, so it needs no masking.
  """
  schedule = lr_schedule(total_steps=total_steps, lr=lr, warmup_frac=warmup_frac)
  adamw = optax.adamw(schedule, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay)
  tx = adamw if clip is None else optax.chain(optax.clip_by_global_norm(clip), adamw)
  return tx, schedule
