"""The training run behind `python train.py`: regenerate, build, restore, step, log, save, export.

Multi-host: every process runs this same function after `jax.distributed.initialize`; the mesh
spans all devices. When the mesh's `data` axis splits the batch rows process by process (the
usual case), each process reads, decodes and collates only its own share of each global batch;
the token arrays are assembled with `make_array_from_process_local_data`, and the (small) image
patches of all shares are exchanged with `process_allgather`, because the vision tower runs over
every image of the batch as one replicated sequence. Otherwise (rows not split by process) every
process collates the whole global batch and places only its addressable shards. Regeneration is a
separate single-process phase (`--regenerate-only`), since the decode loop takes host inputs that
must be the same everywhere.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

from glance_jax import sharding as shd
from glance_jax.config import DTYPES
from glance_jax.train.config import TrainConfig
from glance_jax.progress import Progress

logger = logging.getLogger(__name__)

def resolve_mesh(shape, n_devices: int) -> tuple[int, ...]:
  """(-1 -> whatever the other axes leave); a shape that does not divide the devices is an error."""
  shape = [int(s) for s in shape]
  known = int(np.prod([s for s in shape if s != -1]))
  if shape.count(-1) > 1:
    raise shd.MeshError(f"mesh {tuple(shape)}: at most one axis may be -1")
  if -1 in shape:
    if n_devices % known:
      raise shd.MeshError(f"mesh {tuple(shape)} does not divide the {n_devices} devices")
    shape[shape.index(-1)] = n_devices // known
  if int(np.prod(shape)) != n_devices:
    raise shd.MeshError(f"mesh {tuple(shape)} needs {int(np.prod(shape))} devices, but {n_devices} are available")
  return tuple(shape)


def regen_paths(cfg: TrainConfig) -> list[pathlib.Path]:
  regen = pathlib.Path(cfg.regen_dir) if cfg.regen_dir else pathlib.Path(cfg.workdir) / "regen"
  return [regen / (pathlib.Path(t).stem + ".jsonl") for t in cfg.task_files]


def run_regeneration(cfg: TrainConfig, target, processor) -> list[pathlib.Path]:
  """The target's answers (greedy, or drawn with cfg.regen_sampling) to every task file's prompts
  (resumable, one process)."""
  from glance_jax.data.records import read_task_file
  from glance_jax.train.regenerate import regenerate
  outs = []
  for task_file, out in zip(cfg.task_files, regen_paths(cfg)):
    records = read_task_file(task_file, on_error=cfg.on_bad_record)
    outs.append(regenerate(target, processor, records, out, batch_size=cfg.regen_batch_size,
                           max_new_tokens=cfg.regen_max_new_tokens, sampling=cfg.regen_sampling,
                           seed=cfg.seed))
  return outs


def _global_batch(batch, mesh):
  """Host TrainBatch (the whole global batch) -> global arrays; each process fills only the shards
  its own devices hold."""
  from glance_jax.train.batch import batch_shardings
  shardings = batch_shardings(batch, mesh)

  def place(x, s):
    x = np.asarray(x)
    return jax.make_array_from_callback(x.shape, s, lambda idx: x[idx])
  return jax.tree.map(place, batch, shardings)


def rows_split_by_process(mesh, global_batch: int, nproc: int | None = None) -> bool:
  """True when the batch's row sharding (sharding.TRAIN_RULES: rows over data x fsdp) gives each
  process a contiguous, equal share of rows, in process order."""
  from glance_jax import sharding as shd
  nproc = jax.process_count() if nproc is None else nproc
  entry = shd.logical_to_spec((shd.BATCH,), (global_batch,), mesh, shd.TRAIN_RULES)[0]
  names = () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)
  n_shards = shd.shards(entry, mesh)
  if nproc == 1 or n_shards % nproc:
    return False
  order = [mesh.axis_names.index(n) for n in names]
  order += [i for i in range(len(mesh.axis_names)) if i not in order]
  procs = np.vectorize(lambda d: d.process_index)(mesh.devices).transpose(order).reshape(n_shards, -1)
  per_shard = [set(row.tolist()) for row in procs]                        # row shard -> processes
  firsts = [min(p) for p in per_shard]
  return (all(len(p) == 1 for p in per_shard) and firsts == sorted(firsts)
          and all(firsts.count(p) == n_shards // nproc for p in range(nproc)))


def _patch_budget(cfg: TrainConfig, target_cfg) -> int | None:
  """The static image-patch budget; None for a text-only target (no vision arrays in the batch)."""
  return None if target_cfg.text_only else cfg.max_patches


def _local_share_batch(local_examples, cfg: TrainConfig, target_cfg, mesh):
  """This process's rows -> global arrays; image patches of every process gathered and packed in
  global row order (process-major), so the placeholders' order matches the patches' order."""
  from jax.experimental import multihost_utils
  from glance_jax.train.batch import _padded_vision, batch_shardings, collate
  local = collate(local_examples, target_cfg, seq_len=cfg.seq_len, max_patches=_patch_budget(cfg, target_cfg),
                  pad_id=0, truncate=cfg.truncate)
  if target_cfg.text_only:  # no vision arrays to gather
    sh = batch_shardings(local, mesh)
    return local.replace(**{k: jax.make_array_from_process_local_data(getattr(sh, k), np.asarray(getattr(local, k)))
                            for k in ("input_ids", "loss_mask", "attention_mask", "positions")})
  v = target_cfg.vision
  pix = [np.asarray(e.pixel_values, np.float32) for e in local_examples if e.pixel_values is not None]
  grids = [np.asarray(e.image_grid_thw, np.int64).reshape(-1, 3) for e in local_examples if e.pixel_values is not None]
  px = np.concatenate(pix) if pix else np.zeros((0, v.patch_dim), np.float32)
  gr = np.concatenate(grids) if grids else np.zeros((0, 3), np.int64)
  if px.shape[0] > cfg.max_patches:
    raise ValueError(f"process {jax.process_index()}: {px.shape[0]} image patches > max_patches {cfg.max_patches}")
  max_images = cfg.max_patches // v.spatial_merge_size**2
  gathered = multihost_utils.process_allgather(dict(
      px=np.pad(px, ((0, cfg.max_patches - px.shape[0]), (0, 0))), n_px=np.int32(px.shape[0]),
      gr=np.pad(gr, ((0, max_images - gr.shape[0]), (0, 0))), n_gr=np.int32(gr.shape[0])))
  all_px = [np.asarray(gathered["px"][p][: int(gathered["n_px"][p])]) for p in range(jax.process_count())]
  all_gr = np.concatenate([np.asarray(gathered["gr"][p][: int(gathered["n_gr"][p])]) for p in range(jax.process_count())])
  vision = _padded_vision(all_px, all_gr if all_gr.size else None, target_cfg, cfg.max_patches)
  sh = batch_shardings(local.replace(**vision), mesh)
  tokens = {k: jax.make_array_from_process_local_data(getattr(sh, k), np.asarray(getattr(local, k)))
            for k in ("input_ids", "loss_mask", "attention_mask", "positions")}
  vis = {k: jax.make_array_from_callback(a.shape, getattr(sh, k), lambda idx, a=a: a[idx]) for k, a in vision.items()}
  return local.replace(**tokens, **vis)


def _truncate_metrics(path: pathlib.Path, last_step: int) -> None:
  """After a restore at `last_step`, later lines (from the killed run) would be duplicated."""
  if not path.exists():
    return
  keep = []
  for line in path.read_text().splitlines():
    try:
      if json.loads(line)["step"] <= last_step:
        keep.append(line)
    except (json.JSONDecodeError, KeyError):
      continue
  path.write_text("".join(l + "\n" for l in keep))


def _scalars(metrics: dict) -> dict:
  out = {}
  for k, v in jax.device_get(metrics).items():
    v = np.asarray(v)
    out[k] = [round(float(x), 6) for x in v] if v.ndim else float(v)
  return out


def train(cfg: TrainConfig, *, progress: bool = True) -> dict:
  """Runs (or resumes) training to the end; returns a summary. Every process calls it."""
  from glance_jax.head import Head
  from glance_jax.head import HeadConfig, init_head, save_head
  from glance_jax.qwen3_vl.inputs import Processor
  from glance_jax.qwen3_vl.processor import ImageProcessor
  from glance_jax.qwen3_vl.target import load_target
  from glance_jax.train import step as step_lib
  from glance_jax.train.batch import collate
  from glance_jax.train.checkpoint import Checkpointer
  from glance_jax.train.examples import DataOrder, row_to_example, valid_rows
  from glance_jax.train.optim import make_optimizer
  from glance_jax.train.regenerate import read_regenerated

  workdir = pathlib.Path(cfg.workdir)
  nproc, pid = jax.process_count(), jax.process_index()
  mesh = shd.make_mesh(resolve_mesh(cfg.mesh, jax.device_count()))
  target = load_target(cfg.target, dtype=DTYPES[cfg.target_dtype], mesh=mesh)

  # --- data: the target's own answers
  paths = regen_paths(cfg)
  if not paths:
    raise ValueError("no task_files configured: nothing to train on")
  missing = [p for p in paths if not p.exists()]
  if missing and nproc > 1:
    raise ValueError(f"regenerated data missing {[str(p) for p in missing]}: run "
                     f"`python train.py --config ... --regenerate-only` in one process first")
  if missing or nproc == 1:
    run_regeneration(cfg, target, Processor.from_pretrained(str(target.path)))
  rows = valid_rows([r for p in paths for r in read_regenerated(p)], on_error=cfg.on_bad_record,
                    placeholder_ids=(target.config.image_token_id, target.config.video_token_id))
  improc = None if target.config.text_only else ImageProcessor.from_pretrained(str(target.path))
  order = DataOrder(len(rows), cfg.batch_size, cfg.seed)
  total = cfg.steps or cfg.epochs * order.steps_per_epoch

  # --- head, optimizer, state (born sharded), step
  tx, schedule = make_optimizer(total_steps=total, lr=cfg.lr, weight_decay=cfg.weight_decay,
                                warmup_frac=cfg.warmup_frac, clip=cfg.clip)
  own = None   # a drafter with its own step and export (eagle3, parent)
  if cfg.drafter == "eagle3":   # the rival: its vocabulary, state and TTT step (train/eagle3_train.py)
    from glance_jax.train import eagle3_train
    own = eagle3_train.build(cfg, target, rows, mesh, tx=tx, schedule=schedule)
    graphdef, state, train_step = own.graphdef, own.state, own.step
  elif cfg.drafter == "parent":   # a correction of a frozen (or joint) head (train/parent_train.py)
    from glance_jax.train import parent_train
    own = parent_train.build(cfg, target, mesh, tx=tx, schedule=schedule)
    state, train_step = own.state, own.step
  else:
    head_cfg = HeadConfig.for_target(target.config, num_layers=cfg.head_layers, block_size=cfg.block_size)
    init = init_head(head_cfg, dtype=jnp.float32, from_dflash=cfg.head_init, mesh=mesh) if cfg.head_init else None
    graphdef, state = step_lib.init_train_state(head_cfg, tx=tx, seed=cfg.seed, head=init, mesh=mesh)
    state_sh = step_lib.train_state_shardings(head_cfg, tx, mesh)
    train_step = step_lib.make_train_step(
        head_cfg, graphdef, target.config, target.graphdef, tx=tx, block_size=cfg.block_size,
        num_anchors=cfg.num_anchors, gamma=cfg.gamma, head_group=cfg.head_group, chunk=cfg.ce_chunk,
        compute_dtype=DTYPES[cfg.compute_dtype],
        schedule=schedule, state_sharding=state_sh)

  # --- resume
  ckpt = Checkpointer(workdir / "ckpt", keep=cfg.keep)
  abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state)
  restored = ckpt.restore_latest(abstract)
  start = 0
  if restored is not None:
    state, meta = restored
    start = int(meta["position"]["step"])
    logger.info("resumed from step %d (%s)", start, meta["position"])
  metrics_path = workdir / "metrics.jsonl"
  if pid == 0:
    _truncate_metrics(metrics_path, start)

  # --- loop
  bar = Progress(total, "train", unit="step", initial=start, enabled=progress and pid == 0)
  last = {}
  local_share = rows_split_by_process(mesh, cfg.batch_size)
  logger.info("data: %s", f"process {pid} reads its own share of each batch" if local_share
              else "every process collates the whole global batch")
  for step in range(start, total):
    t0 = time.perf_counter()
    if local_share:   # read, decode and collate only this process's rows
      local = [row_to_example(rows[i], improc) for i in order.local_indices(step, pid, nproc)]
      batch = _local_share_batch(local, cfg, target.config, mesh)
      n_tokens = sum(len(e.input_ids) for e in local) * nproc
    else:
      host = collate([row_to_example(rows[i], improc) for i in order.global_indices(step)], target.config,
                     seq_len=cfg.seq_len, max_patches=_patch_budget(cfg, target.config), pad_id=0,
                     truncate=cfg.truncate)
      n_tokens = int(np.asarray(host.attention_mask).sum())
      batch = _global_batch(host, mesh)
    state, metrics = train_step(state, target.params, batch)
    if (step + 1) % cfg.log_every == 0 or step + 1 == total:
      last = _scalars(metrics)
      dt = time.perf_counter() - t0
      last.update(step=step + 1, tokens_per_s=n_tokens / dt, seconds=dt)
      if pid == 0:
        with open(metrics_path, "a") as f:
          f.write(json.dumps(last) + "\n")
      bar.set_postfix(**(own.postfix(last) if own else dict(
          loss=f"{last['loss']:.3f}", acc1=f"{last['acc_per_offset'][0]:.2f}",
          tau=f"{last['tau_implied']:.2f}", tok_s=f"{last['tokens_per_s']:.0f}")))
    bar.update(1)
    if (step + 1) % cfg.save_every == 0 or step + 1 == total:
      ckpt.save(step + 1, state, {"position": order.position(step + 1), "config": dataclasses.asdict(cfg)})
  bar.close()
  ckpt.close()
  if own is not None:            # its own export (eagle3: the midlayer format; parent: beside the head)
    return own.finish(state, dict(steps=total, resumed_from=start, last=last))

  # --- export in the DFlash format decode.py --head reads
  export = pathlib.Path(cfg.export_dir) if cfg.export_dir else workdir / "head"
  if nproc > 1:  # every process must take part in gathering the sharded params
    from jax.experimental import multihost_utils
    params = multihost_utils.process_allgather(state.params, tiled=True)
  else:
    params = jax.device_get(state.params)
  if pid == 0:
    save_head(export, head_cfg, params)
    # the rows' token counts beside it: the draft vocabulary of any size (head/draft_vocab.py)
    from glance_jax.head.draft_vocab import save_counts
    from glance_jax.train.token_counts import target_response_counts
    save_counts(export, target_response_counts(rows, target.config, seq_len=cfg.seq_len, truncate=cfg.truncate))
  return dict(steps=total, resumed_from=start, export=str(export), last=last,
              head=Head(head_cfg, graphdef, state.params))




