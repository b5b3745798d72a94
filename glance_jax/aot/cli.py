"""python -m glance_jax.aot: compile every program for a TPU topology from this host; JSON + markdown.

  python -m glance_jax.aot --topology v5e:2x2 --mesh 1,1,4 --out runs/aot/v5e_2x2
  python -m glance_jax.aot --topology v5p:2x2x1 --mesh 1,1,4 --programs prefill,round --batch 1,8
  python -m glance_jax.aot --tiny --topology v5e:2x2 --mesh 1,1,4 --out /tmp/aot   # test size, seconds

--programs picks groups: prefill, step (AR decode_step), round, loop, regen, train. One line per
compile goes to stderr as it finishes. A program that fails (out of HBM, a compiler error) gets one
line in the report and the rest still run; an unknown topology or a mesh that does not match its
devices stops the run with one line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import sys
import time

GROUPS = ("prefill", "step", "round", "loop", "regen", "train")
TRAIN_MESHES = ((1, 1, 1), (1, 2, 1), (1, 4, 1), (2, 2, 1), (8, 1, 1), (1, 8, 1), (4, 1, 2), (2, 4, 1), (1, 4, 2),
                (1, 16, 1), (1, 32, 1), (2, 16, 1), (1, 32, 2))   # benchmarks/train_memory.py's list


def _ints(text: str, flag: str) -> tuple[int, ...]:
  try:
    return tuple(int(x) for x in text.split(","))
  except ValueError:
    raise SystemExit(f"{flag}: expected comma-separated integers, got {text!r}") from None


def parse_args(argv=None):
  from glance_jax.aot.programs import METHOD_RUNS
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--topology", default="v5e:2x2", help="libtpu topology name, e.g. v5e:2x2, v5p:2x2x1, v6e:2x4")
  ap.add_argument("--mesh", default="", help="decode mesh (data,fsdp,tensor); product = device count "
                  "(default 1,1,<devices>: the weights split over every device)")
  ap.add_argument("--train-mesh", default="", help="train meshes, ';'-separated (default: those of "
                  "benchmarks/train_memory.py with the topology's device count)")
  ap.add_argument("--programs", default=",".join(GROUPS), help=f"groups among {GROUPS}")
  ap.add_argument("--methods", default=",".join(n for n, _, _ in METHOD_RUNS))
  ap.add_argument("--batch", default="1", help="decode batch sizes for step / round / loop, e.g. 1,8")
  ap.add_argument("--prompt-len", type=int, default=1024)
  ap.add_argument("--max-length", type=int, default=2048, help="cache slots")
  ap.add_argument("--head-group", type=int, default=32, help="train: head blocks per checkpointed pass "
                  "(benchmarks/train_memory.py assumes 32); 0 = all 512 blocks in one pass, as train.py runs today")
  ap.add_argument("--ce-chunk", type=int, default=128, help="train: blocks per cross-entropy chunk "
                  "(TrainConfig.ce_chunk; each chunk's fp32 logits are rows x chunk x 16 x vocab)")
  ap.add_argument("--draft-vocab", type=int, default=32000, help="K of the glance31v / glance63v runs: the "
                  "GLANCE head drafting over the K most frequent tokens (head/draft_vocab.py)")
  ap.add_argument("--no-image", action="store_true", help="text-only prompt (default: one 448x448 image)")
  ap.add_argument("--tiny", action="store_true", help="tiny_config() and small shapes (the test's size)")
  ap.add_argument("--out", default="runs/aot", help="directory for report.json and report.md")
  ap.add_argument("--dump-hlo", action="store_true", help="also write each program's optimised HLO to "
                  "<out>/hlo/<name>.txt (what the HBM-traffic figures are read from)")
  return ap.parse_args(argv)


def sizes_from(args):
  import jax.numpy as jnp
  from glance_jax.aot.programs import Sizes
  from glance_jax.config import QWEN3_VL_8B, tiny_config
  if args.tiny:
    # 4 kv heads: the caches shard over a 4-way tensor axis as the 8B's 8 do (with 2 they are replicated
    # across it, and libtpu 0.0.48.1 fails the batched loop's buffer assignment: docs/benchmarking.md);
    # head_dim 128 (the 8B's): the loops' attention takes the TPU cache-attention kernel, as at 8B
    return Sizes(tiny_config(kv_heads=4, head_dim=128), dtype=jnp.bfloat16, head_layers=2, prompt_len=64,
                 image_hw=None if args.no_image else (64, 64), max_length=160, max_new_tokens=16, regen_batch=4,
                 regen_max_new=16, train_batch=4, train_seq=64, train_anchors=4, train_patches=16,
                 train_head_group=(args.head_group or None) and 2, draft_vocab=args.draft_vocab)
  return Sizes(QWEN3_VL_8B, prompt_len=args.prompt_len, max_length=args.max_length,
               image_hw=None if args.no_image else (448, 448),
               max_new_tokens=args.max_length - args.prompt_len - 66, train_head_group=args.head_group or None,
               train_ce_chunk=args.ce_chunk, draft_vocab=args.draft_vocab)


def build(args, sizes, mesh, groups, batches, methods, hbm, emit):
  """Compiles each program of `groups` and hands its row to `emit`."""
  from glance_jax.aot import programs as pg
  m = pg.models(sizes, mesh)
  one = _compiler(args, hbm)
  glance = pg.loop_config(sizes, "glance", 63, m, mesh)
  stops = pg.stops_arg(sizes, mesh)
  for b in batches:
    pre = pg.prefill_program(f"prefill.b{b}", sizes, mesh, glance, b, sizes.max_length, m)
    if "prefill" in groups:
      emit(one(pre))
    if "step" in groups:
      emit(one(pg.ar_step_program(sizes, mesh, b, pg.state_from_prefill(pre, mesh), m)))
    for name, method, budget in methods:
      spec = pg.loop_config(sizes, method, budget, m, mesh)
      if spec.slots_needed(sizes.prompt_len) > sizes.max_length:
        # a wider round writes further past the last token: fewer new tokens in the same cache
        room = sizes.max_length - (spec.slots_needed(sizes.prompt_len) - spec.cfg.max_new_tokens)
        if room < 1:
          emit({"name": f"round.{name}.b{b}", "kind": "round", "error": f"--max-length {sizes.max_length}: "
                f"no room for a {name} round after a {sizes.prompt_len}-token prompt"})
          continue
        spec = pg.loop_config(sizes, method, budget, m, mesh, max_new_tokens=room)
      # every method's state in the same layout (the rules), so round / AR compares like with like
      st = pg.state_from_prefill(pg.prefill_program("", sizes, mesh, spec, b, sizes.max_length, m), mesh)
      if "round" in groups:
        emit(one(pg.round_program(f"round.{name}.b{b}", spec, st, stops, m)))
      if "loop" in groups:
        emit(one(pg.loop_program(f"loop.{name}.b{b}", spec, st, stops, m)))
  if "regen" in groups:
    spec = pg.loop_config(sizes, "ar", 1, m, mesh, max_new_tokens=sizes.regen_max_new)
    length = spec.slots_needed(sizes.prompt_len)
    pre = pg.prefill_program(f"regen.prefill.b{sizes.regen_batch}", sizes, mesh, spec, sizes.regen_batch, length, m)
    emit(one(pre))
    emit(one(pg.loop_program(f"regen.loop.b{sizes.regen_batch}", spec, pg.state_from_prefill(pre, mesh), stops, m)))


def main(argv=None) -> int:
  import glance_jax.aot  # noqa: F401  (sets libtpu's environment before jax loads it)
  from glance_jax.aot import topology as tp
  args = parse_args(argv)
  out = pathlib.Path(args.out)
  groups = [g for g in args.programs.split(",") if g]
  bad = [g for g in groups if g not in GROUPS]
  if bad:
    print(f"--programs: unknown group(s) {bad}; choose from {GROUPS}", file=sys.stderr)
    return 2
  try:
    from glance_jax.aot import programs as pg
    methods = pg.method_list([x for x in args.methods.split(",") if x])
    decode_shape = _ints(args.mesh, "--mesh") if args.mesh else (1, 1, len(tp.devices(args.topology)))
    mesh = tp.mesh_for(args.topology, decode_shape)
  except (tp.TopologyError, ValueError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  hbm = tp.hbm_bytes(mesh)
  sizes = sizes_from(args)
  rows: list[dict] = []
  t0 = time.perf_counter()

  def emit(row):
    rows.append(row)
    what = row.get("error") or (f"peak {row['peak_bytes'] / 1e9:.2f} GB"
                                f"{'' if 'fits' not in row else (' fits' if row['fits'] else ' DOES NOT FIT')}, "
                                f"HBM traffic {row['hbm_traffic'] / 1e9:.2f} GB")
    print(f"[{len(rows)}] {row['name']}: {row.get('compile_s', 0):.0f} s, {what}", file=sys.stderr, flush=True)

  batches = _ints(args.batch, "--batch")
  build(args, sizes, mesh, [g for g in groups if g != "train"], batches, methods, hbm, emit)
  if "train" in groups:
    n = len(mesh.devices.flat)
    shapes = ([_ints(s, "--train-mesh") for s in args.train_mesh.split(";")] if args.train_mesh
              else [s for s in TRAIN_MESHES if s[0] * s[1] * s[2] == n])
    for shape in shapes:
      try:
        tmesh = tp.mesh_for(args.topology, shape)
      except tp.TopologyError as e:
        rows.append(dict(name=f"train.{'x'.join(map(str, shape))}", kind="train", error=str(e)))
        print(f"[{len(rows)}] {rows[-1]['name']}: {e}", file=sys.stderr)
        continue
      emit(_train_row(args, sizes, tmesh, hbm))
  from glance_jax.aot.report import add_ratios, markdown
  add_ratios(rows)
  meta = dict(topology=args.topology, mesh=decode_shape, device_kind=mesh.devices.flat[0].device_kind,
              devices=len(mesh.devices.flat), hbm_bytes_per_device=hbm, libtpu=tp.libtpu_version(),
              model="tiny_config" if args.tiny else "QWEN3_VL_8B", sizes=_jsonable(dataclasses.asdict(sizes)),
              seconds=time.perf_counter() - t0)
  out.mkdir(parents=True, exist_ok=True)
  (out / "report.json").write_text(json.dumps(dict(meta=meta, programs=rows), indent=1, default=str))
  header = (f"{meta['model']} on {args.topology} ({meta['devices']} x {meta['device_kind']}, "
            f"{(hbm or 0) / 1e9:.1f} GB HBM each), mesh {','.join(map(str, decode_shape))}, libtpu {meta['libtpu']}; per device")
  (out / "report.md").write_text(markdown(rows, header))
  print(f"wrote {out / 'report.json'} and {out / 'report.md'} ({len(rows)} programs, "
        f"{sum('error' in r for r in rows)} failed)", file=sys.stderr)
  return 0


def _compiler(args, hbm):
  """program -> its report row (compiling it; with --dump-hlo, writing its optimised HLO)."""
  from glance_jax.aot.report import compile_one
  dump = pathlib.Path(args.out) / "hlo" if args.dump_hlo else None
  return lambda program: compile_one(program, hbm, dump=dump)[0]


def _train_row(args, sizes, mesh, hbm):
  from glance_jax.aot import programs as pg
  return _compiler(args, hbm)(pg.train_program(sizes, mesh, pg.models(sizes, mesh)))


def _jsonable(d):
  return {k: (str(v) if not isinstance(v, (int, float, str, type(None), tuple, list)) else v) for k, v in d.items()}


if __name__ == "__main__":
  sys.exit(main())
