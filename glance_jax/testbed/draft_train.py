"""The testbed's two-model draft: a smaller Qwen3-VL trained on the target's own answers.

Classic speculation drafts with a smaller model of the target's family (the paper: Qwen3-VL-4B for
the 8B) that shares its tokenizer and image geometry. The testbed's draft is its target with half
the decoder layers (the first, which carries the deepstack injection, and the last: `keep`), its
embeddings, vision tower and final norm, then trained on the same regenerated rows as the GLANCE and
EAGLE-3 heads (next-token cross-entropy on the response tokens), so the three drafters learn the
same answers. Training is target_train's loop (its step, schedule and resumable state) with
batches drawn from the rows (train/examples.DataOrder: a seeded permutation per epoch, so a resumed
run reads the same batches).

  python -m glance_jax.testbed.build --suite v5 --stages draft     # after the head stage (its rows)
"""

from __future__ import annotations

import dataclasses
import pathlib
import shutil

import numpy as np

from glance_jax.testbed import target_train as tt

_LAYER = "model.language_model.layers."


def layer_dropped(target_dir: str | pathlib.Path, out_dir: str | pathlib.Path, keep: tuple[int, ...]) -> pathlib.Path:
  """A checkpoint directory holding the target with only decoder layers `keep` (renumbered 0..),
  and the target's tokenizer, chat template and preprocessor: the draft's starting point."""
  import jax.numpy as jnp

  from glance_jax.io import save_tensors, write_json
  from glance_jax.qwen3_vl.target import load_target
  from glance_jax.qwen3_vl.weights import state_tensors
  src, out = pathlib.Path(target_dir), pathlib.Path(out_dir)
  target = load_target(src, dtype=jnp.float32)
  n = target.config.text.num_hidden_layers
  if not keep or sorted(set(keep)) != list(keep) or keep[0] != 0 or keep[-1] >= n:
    raise ValueError(f"draft layers {keep}: must be increasing, start at 0 (the deepstack injection) "
                     f"and lie in the target's {n} layers ({src})")
  renumber = {old: new for new, old in enumerate(keep)}
  tensors = {}
  for key, value in state_tensors(target.params).items():
    if key.startswith(_LAYER):
      i, rest = key[len(_LAYER):].split(".", 1)
      if int(i) not in renumber:
        continue
      key = f"{_LAYER}{renumber[int(i)]}.{rest}"
    tensors[key] = value
  cfg = dataclasses.replace(target.config, text=dataclasses.replace(target.config.text, num_hidden_layers=len(keep)))
  out.mkdir(parents=True, exist_ok=True)
  save_tensors(out, tensors)
  write_json(out / "config.json", cfg.to_hf_dict())
  for name in tt._SIDE_FILES:
    if name != "config.json" and (src / name).is_file():
      shutil.copyfile(src / name, out / name)
  return out


def row_batches(rows: list[dict], cfg: tt.TargetTrainConfig, processor, model_cfg):
  """step -> the TrainBatch of rows DataOrder(len(rows), batch, seed) gives at that step."""
  from glance_jax.train.batch import collate
  from glance_jax.train.examples import DataOrder, row_to_example
  order = DataOrder(len(rows), cfg.batch_size, cfg.seed)
  improc = processor.image_processor
  # one patch budget for every batch (one compiled step): the batch size times the most patches
  # any row's images make (each distinct image file processed once, here)
  seen: dict[str, int] = {}
  for r in rows:
    for path in r.get("images") or ():
      if path not in seen:
        seen[path] = int(np.prod(improc([path])[1], axis=-1).sum())
  per_row = max((sum(seen[p] for p in r.get("images") or ()) for r in rows), default=0)
  budget = max(1, cfg.batch_size * per_row)

  def batch(step: int):
    examples = [row_to_example(rows[i], improc) for i in order.global_indices(step)]
    return collate(examples, model_cfg, seq_len=cfg.seq_len, max_patches=budget,
                   pad_id=processor.pad_token_id, truncate=True)
  return batch


def train_draft(target_dir, row_files, out_dir, workdir, cfg: tt.TargetTrainConfig, *,
                keep: tuple[int, ...] | None = None, log_every: int = 50, save_dtype=None) -> pathlib.Path:
  """The draft (layers `keep` of the target; default its first and last) trained on `row_files`
  (train/regenerate.py rows) -> an HF checkpoint directory `out_dir`; state in `workdir` (resumes)."""
  from glance_jax.config import Qwen3VLConfig
  from glance_jax.train.examples import valid_rows
  from glance_jax.train.regenerate import read_regenerated
  work = pathlib.Path(workdir)
  n = Qwen3VLConfig.from_json_file(pathlib.Path(target_dir) / "config.json").text.num_hidden_layers
  keep = tuple(keep) if keep is not None else (0, n - 1)
  init = work / "draft_init"
  if not (init / "model.safetensors").is_file():
    layer_dropped(target_dir, init, keep)
  model_cfg = Qwen3VLConfig.from_json_file(init / "config.json")
  rows = [r for f in row_files for r in read_regenerated(f)]
  if not rows:
    raise ValueError(f"no regenerated rows in {[str(f) for f in row_files]}: nothing to train the draft on")
  rows = valid_rows(rows, placeholder_ids=(model_cfg.image_token_id, model_cfg.video_token_id))
  cfg = dataclasses.replace(cfg, init_from=str(init))
  return tt.train_target(out_dir, work, cfg, log_every=log_every, save_dtype=save_dtype,
                         batches=lambda processor, mcfg: row_batches(rows, cfg, processor, mcfg))
