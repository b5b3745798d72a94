"""A tiny training setup on disk: checkpoint, task file, regenerated answers, config files."""

from __future__ import annotations

import pathlib
import shutil
import textwrap

import numpy as np

from glance_jax.data.records import PromptRecord, write_task_file
from glance_jax.demo import default_image
from glance_jax.testing.checkpoint import make_tiny_checkpoint

WORDS = ("red green blue square circle what color shape is the this picture left right top "
         "bottom how many count one two three").split()


def make_setup(root: pathlib.Path, *, n_prompts: int = 12, seed: int = 0) -> dict:
  """Writes model/, task file, and returns paths. Prompts mix text-only and one-image rows."""
  rng = np.random.default_rng(seed)
  model = make_tiny_checkpoint(root / "model", seed=seed)
  records = []
  for i in range(n_prompts):
    images = ()
    if i % 3 == 0:
      p = root / "images" / f"{i}.png"
      p.parent.mkdir(parents=True, exist_ok=True)
      default_image(seed=i).save(p)
      images = (str(p),)
    prompt = " ".join(rng.choice(WORDS, size=int(rng.integers(3, 8))))
    records.append(PromptRecord(id=f"p{i}", task="toy", split="train", prompt=prompt, images=images))
  task = root / "toy.jsonl"
  write_task_file(records, task)
  return dict(model=model, task=task, records=records)


def write_config(path: pathlib.Path, *, model, task, workdir, **overrides) -> pathlib.Path:
  fields = dict(target=str(model), target_dtype="float32", compute_dtype="float32", head_layers=1,
                block_size=8, task_files=(str(task),), regen_max_new_tokens=16, regen_batch_size=4,
                seq_len=128, max_patches=256, num_anchors=4, batch_size=4, steps=8, lr=3e-3,
                mesh=(-1, 1, 1), workdir=str(workdir), save_every=2, keep=3, log_every=1)
  fields.update(overrides)
  body = ",\n      ".join(f"{k}={v!r}" for k, v in fields.items())
  path.write_text(textwrap.dedent(f"""\
      from glance_jax.train.config import TrainConfig

      def get_config():
        return TrainConfig(
            {body})
      """).replace("\n            ", "\n      ", 0))
  return path


def copy_regen(src_workdir: pathlib.Path, dst_workdir: pathlib.Path) -> None:
  shutil.copytree(src_workdir / "regen", dst_workdir / "regen")
