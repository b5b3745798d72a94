"""Orbax checkpoints of the head's train state: params, optimizer state, step, PRNG key, data position.

Only glance_jax's own state is stored (the frozen target is re-read from its HF checkpoint). Orbax
writes each step into a temporary directory and renames it when complete, so a kill during a save
leaves the previous checkpoints intact. Restoring tries the newest step first; one that cannot be
read (half-written, corrupted) is skipped with a warning and the next newest is used.
"""

from __future__ import annotations

import logging
import pathlib
from typing import Any

import jax
import orbax.checkpoint as ocp

logger = logging.getLogger(__name__)


def _to_saveable(state):
  """Typed PRNG keys are stored as their raw uint32 data."""
  return state.replace(key=jax.random.key_data(state.key))


class Checkpointer:
  def __init__(self, directory: str | pathlib.Path, *, keep: int = 3):
    self.directory = pathlib.Path(directory).absolute()
    self.directory.mkdir(parents=True, exist_ok=True)
    options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True, enable_async_checkpointing=False)
    self.manager = ocp.CheckpointManager(self.directory, options=options)

  def save(self, step: int, state, meta: dict[str, Any]) -> None:
    self.manager.save(int(step), args=ocp.args.Composite(state=ocp.args.StandardSave(_to_saveable(state)),
                                                        meta=ocp.args.JsonSave(meta)))
    self.manager.wait_until_finished()

  def restore_latest(self, abstract_state):
    """(state, meta) from the newest readable checkpoint, or None when there is none.

    abstract_state: the TrainState of jax.ShapeDtypeStructs (with shardings) to restore into.
    """
    steps = sorted(self.manager.all_steps(), reverse=True)
    stale = [p.name for p in self.directory.iterdir() if "tmp" in p.name]
    if stale:
      logger.warning("%s: ignoring unfinished checkpoint writes %s", self.directory, stale)
    target = _to_saveable_abstract(abstract_state)
    for step in steps:
      try:
        out = self.manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(target),
                                                                 meta=ocp.args.JsonRestore()))
      except Exception as e:  # noqa: BLE001 - any unreadable checkpoint is skipped, newest first
        logger.warning("%s: checkpoint at step %d is unreadable (%s: %s); trying an older one",
                       self.directory, step, type(e).__name__, str(e).splitlines()[0][:200])
        continue
      state = out["state"]
      return state.replace(key=jax.random.wrap_key_data(state.key)), dict(out["meta"])
    return None

  def close(self):
    self.manager.close()


def _to_saveable_abstract(abstract_state):
  key = abstract_state.key
  data = jax.eval_shape(jax.random.key_data, key)
  sharding = getattr(key, "sharding", None)
  return abstract_state.replace(key=jax.ShapeDtypeStruct(data.shape, data.dtype, sharding=sharding))
