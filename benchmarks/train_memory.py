"""Per-device memory of the paper's training recipe at 8B, estimated from abstract shapes.

Parameters come from `nnx.eval_shape` of the real Qwen3-VL-8B target and the 5-layer DFlash head
(no memory is allocated), placed on a candidate mesh with the library's own logical-axis rules
(glance_jax.sharding.DEFAULT_RULES) to get each device's share. Activations follow the training
step's data flow (objective.py): a frozen bf16 target forward (no gradient) producing 5 tapped
features, then the head over all anchors' blocks in checkpointed groups, and the chunked CE.

  python benchmarks/train_memory.py                       # the paper recipe, meshes for 80 GB GPUs / TPUs
  python benchmarks/train_memory.py --batch 32 --seq 3072 --anchors 512 --head-group 32
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

GB = 1e9


def param_bytes_per_device(state, mesh, dtype_bytes: int) -> float:
  """Bytes of `state` on one device when sharded by the logical rules on `mesh`."""
  from flax import nnx
  from glance_jax import sharding as shd
  total = 0.0
  for _, var in nnx.to_flat_state(state):
    shape = var.get_value().shape
    spec = shd.logical_to_spec(var.get_metadata().get("axes"), shape, mesh)
    n = float(np.prod(shape))
    for ax in spec:
      n /= shd.shards(ax, mesh)
    total += n * dtype_bytes
  return total


def estimate(mesh_shape, *, batch: int, seq: int, anchors: int, block: int, head_group: int, ce_chunk: int,
             head_layers: int = 5) -> dict:
  import jax.numpy as jnp
  from jax.sharding import AbstractMesh
  from glance_jax.config import QWEN3_VL_8B
  from glance_jax.head import HeadConfig
  from glance_jax.head.model import abstract_head
  from glance_jax.qwen3_vl.weights import abstract_model
  mesh = AbstractMesh(tuple(mesh_shape), ("data", "fsdp", "tensor"))
  t = QWEN3_VL_8B.text
  head_cfg = HeadConfig.for_target(QWEN3_VL_8B, num_layers=head_layers, block_size=block)
  _, target = abstract_model(QWEN3_VL_8B, jnp.bfloat16)
  _, head = abstract_head(head_cfg, jnp.float32)
  tp = mesh.shape["tensor"]
  # batch rows split over data x fsdp (FSDP is data parallel for activations)
  rows = batch / (mesh.shape["data"] * mesh.shape["fsdp"])
  target_w = param_bytes_per_device(target, mesh, 2)
  head_w = param_bytes_per_device(head, mesh, 4)
  head_state = head_w * 4          # fp32 master + grads + Adam mu + nu
  # frozen target forward, bf16, one layer live at a time (no gradient: nothing saved)
  d, f, hq = t.hidden_size, t.intermediate_size, t.num_attention_heads
  tgt_layer = rows * seq * (4 * d + 3 * f / tp) * 2 + rows * (hq / tp) * seq * seq * 4   # + fp32 scores
  feats = rows * seq * 5 * d * 2
  # head: context K/V for every layer (saved for backward), then groups of G blocks, checkpointed
  q = anchors * block
  kv = t.num_key_value_heads * t.head_dim / tp
  ctx_kv = rows * head_layers * 2 * seq * kv * 2
  qg = head_group * block
  head_group_act = rows * head_layers * (qg * (10 * d + 3 * f / tp) * 2 + (hq / tp) * qg * (seq + qg) * 6)
  saved_between_groups = rows * (q * d * 2) * head_layers
  ce = rows * ce_chunk * block * t.vocab_size / tp * 4 * 2          # logits + softmax grad, fp32
  acts = tgt_layer + feats + ctx_kv + head_group_act + saved_between_groups + ce
  total = target_w + head_state + acts
  return dict(mesh=tuple(mesh_shape), rows_per_device=rows, target_weights_gb=target_w / GB,
              head_state_gb=head_state / GB, activations_gb=acts / GB, total_gb=total / GB,
              parts_gb=dict(target_layer=tgt_layer / GB, features=feats / GB, head_ctx_kv=ctx_kv / GB,
                            head_group=head_group_act / GB, head_saved=saved_between_groups / GB, ce=ce / GB))


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--batch", type=int, default=32, help="global sequences per step (SpecForge: 4/GPU x 8)")
  ap.add_argument("--seq", type=int, default=3072)
  ap.add_argument("--anchors", type=int, default=512)
  ap.add_argument("--block", type=int, default=16)
  ap.add_argument("--head-group", type=int, default=32)
  ap.add_argument("--ce-chunk", type=int, default=128)
  args = ap.parse_args(argv)
  meshes = [(1, 1, 1), (1, 2, 1), (1, 4, 1), (2, 2, 1), (8, 1, 1), (1, 8, 1), (4, 1, 2), (2, 4, 1), (1, 4, 2), (1, 16, 1), (1, 32, 1), (2, 16, 1),
            (1, 32, 2)]
  rows = [estimate(m, batch=args.batch, seq=args.seq, anchors=args.anchors, block=args.block,
                   head_group=args.head_group, ce_chunk=args.ce_chunk) for m in meshes]
  print(f"paper recipe: batch {args.batch} x seq {args.seq}, {args.anchors} anchors x block {args.block}, "
        f"head_group {args.head_group}, CE chunk {args.ce_chunk}; target bf16 frozen, head fp32 master + Adam")
  print("| mesh (data,fsdp,tensor) | devices | rows/device | target weights | head state | activations | total GB/device |")
  print("|---|---|---|---|---|---|---|")
  for r in rows:
    if r["rows_per_device"] < 1:
      continue
    print(f"| {r['mesh']} | {int(np.prod(r['mesh']))} | {r['rows_per_device']:.2f} | {r['target_weights_gb']:.1f} | "
          f"{r['head_state_gb']:.1f} | {r['activations_gb']:.1f} | {r['total_gb']:.1f} |")
  for cap, name in ((80, "80 GB GPU"), (32, "32 GB TPU chip"), (16, "16 GB TPU chip")):
    fit = [r for r in rows if r["total_gb"] <= 0.9 * cap and r["rows_per_device"] >= 1]
    if not fit:
      print(f"{name}: none of the listed meshes fits in 90% of memory")
      continue
    best = min(fit, key=lambda r: (int(np.prod(r["mesh"])), r["total_gb"]))
    print(f"{name}: smallest listed mesh that fits in 90% of memory is {best['mesh']} = "
          f"{int(np.prod(best['mesh']))} devices at {best['total_gb']:.1f} GB each")
  return rows


if __name__ == "__main__":
  main()
