"""Training examples from regenerated rows, and the deterministic data order.

The order is a pure function of (seed, step): epoch e visits a fixed permutation of the examples,
step t takes the t-th global batch of it, and process p takes its contiguous share of that batch.
So "data position" is just the step, and a restart resumes exactly where it stopped.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Sequence

import numpy as np

from glance_jax.train.batch import Example

logger = logging.getLogger(__name__)


def row_to_example(row: dict, image_processor) -> Example:
  """prompt_ids + response_ids with the loss on the response; images re-read from their paths."""
  prompt, response = list(row["prompt_ids"]), list(row["response_ids"])
  ids = np.asarray(prompt + response, np.int32)
  loss = np.zeros(ids.shape, bool)
  loss[len(prompt):] = True
  pixel_values = grid = None
  if row.get("images"):
    pixel_values, grid = image_processor(list(row["images"]))
  return Example(input_ids=ids, loss_mask=loss, pixel_values=pixel_values, image_grid_thw=grid,
                 example_id=str(row["id"]))


def valid_rows(rows: Sequence[dict], *, on_error: str = "skip", placeholder_ids: Sequence[int] = ()) -> list[dict]:
  """Rows usable for training (a response, image files present); bad ones reported by id and
  skipped (or raised). Images are decoded later, per batch, so a large run never holds them all.
  A response holding image/video placeholder ids (a random or broken target can emit them) would
  be read as an image run by the position code, so such rows are refused too."""
  out = []
  for row in rows:
    problem = None
    if not row.get("response_ids"):
      problem = "empty response"
    elif set(row["response_ids"]) & set(placeholder_ids):
      problem = "response contains image/video placeholder tokens"
    elif not row.get("prompt_ids"):
      problem = "empty prompt"
    else:
      missing = [p for p in row.get("images", []) if not os.path.isfile(p)]
      if missing:
        problem = f"image file not found: {missing[0]}"
    if problem is None:
      out.append(row)
    elif on_error == "raise":
      raise ValueError(f"regenerated row id {row.get('id')!r}: {problem}")
    else:
      logger.warning("skipping regenerated row id %r: %s", row.get("id"), problem)
  if not out:
    raise ValueError("no usable training examples")
  return out


@dataclasses.dataclass(frozen=True)
class DataOrder:
  num_examples: int
  global_batch: int
  seed: int

  @property
  def steps_per_epoch(self) -> int:
    return max(1, self.num_examples // self.global_batch)

  def position(self, step: int) -> dict[str, int]:
    return {"step": int(step), "epoch": int(step // self.steps_per_epoch),
            "index": int(step % self.steps_per_epoch)}

  def global_indices(self, step: int) -> np.ndarray:
    pos = self.position(step)
    perm = np.random.default_rng([self.seed, pos["epoch"]]).permutation(self.num_examples)
    if self.num_examples < self.global_batch:   # tiny runs: cycle the permutation
      perm = np.resize(perm, self.global_batch)
    i = pos["index"] * self.global_batch
    return perm[i: i + self.global_batch]

  def local_indices(self, step: int, process_index: int, process_count: int) -> np.ndarray:
    if self.global_batch % process_count:
      raise ValueError(f"batch_size {self.global_batch} is not divisible by {process_count} processes")
    share = self.global_batch // process_count
    return self.global_indices(step)[process_index * share: (process_index + 1) * share]
