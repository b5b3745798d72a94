"""A draft vocabulary for the block head: its logits over K target tokens instead of all V.

The head drafts through the target's lm_head (decode/drafters/block.py), so every round reads the
whole [V, D] matrix a second time for its L draft rows (at 8B: 151936 x 4096 in bf16 = 1.24 GB of
a round's traffic). With a draft vocabulary the rows of the K most frequent response tokens of the
head's training rows are gathered once at load into a [K, D] matrix; the head's log-marginals are
a softmax over those K, and a token outside them is never drafted. Decoding stays lossless (the
target verifies every node over its whole vocabulary); what the vocabulary can cost is acceptance,
where the target's next token lies outside it (`coverage` says how often on the training rows).

On disk, beside a head (train.py writes it at export; `python -m glance_jax.train.token_counts`
writes it for any head from regenerated rows):

  <head dir>/token_counts.npz   counts  int64 [V]: each token's count as a supervised response
                                token of the rows (train/token_counts.py); any K is chosen at load
"""

from __future__ import annotations

import io
import os
import pathlib

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

COUNTS_FILE = "token_counts.npz"


@flax.struct.dataclass
class DraftVocab:
  """ids int32 [K]: target ids, ascending; rows [K, D]: those rows of the target's lm_head."""
  ids: jax.Array
  rows: jax.Array

  @property
  def size(self) -> int:
    return int(self.ids.shape[0])


def top_ids(counts: np.ndarray, k: int) -> np.ndarray:
  """int32 [K]: the K most frequent ids, ascending (ties, and unseen tokens, go to the lower id)."""
  counts = np.asarray(counts)
  if counts.ndim != 1 or not 0 < int(k) <= counts.shape[0]:
    raise ValueError(f"draft vocabulary size {k} must be in [1, {counts.shape[-1]}] (the target's vocabulary)")
  return np.sort(np.argsort(-counts, kind="stable")[: int(k)]).astype(np.int32)


def coverage(counts: np.ndarray, ids: np.ndarray) -> float:
  """Share of the counted tokens inside `ids`."""
  counts = np.asarray(counts)
  return float(counts[np.asarray(ids)].sum() / max(int(counts.sum()), 1))


def gather(target, ids: np.ndarray) -> DraftVocab:
  """The DraftVocab of `ids` for a loaded target (qwen3_vl.Target): its lm_head rows, gathered once
  (tied embeddings: the embedding rows), in the target's dtype and on its devices."""
  from glance_jax.static_args import merge
  model = merge(target.graphdef, target.params)
  ids = jnp.asarray(ids, jnp.int32)
  rows = jnp.take(model.lm_head_weight, ids, axis=0)
  if getattr(target, "mesh", None) is not None:   # laid out as the lm_head is: (vocab, embed) by the rules
    ids, rows = jax.device_put((ids, rows), shardings(ids.shape[0], rows.shape[1], target.mesh))
  return DraftVocab(ids=ids, rows=rows)


def shardings(k: int, d: int, mesh) -> DraftVocab:
  """The layout of a DraftVocab of K rows of width D on `mesh`: ids replicated, rows by the logical
  axes of the target's lm_head (vocab on tensor)."""
  from jax.sharding import NamedSharding, PartitionSpec as P

  from glance_jax import sharding as shd
  return DraftVocab(ids=NamedSharding(mesh, P()),
                    rows=NamedSharding(mesh, shd.logical_to_spec((shd.VOCAB, shd.EMBED), (k, d), mesh)))


def save_counts(head_dir: str | os.PathLike, counts: np.ndarray) -> pathlib.Path:
  """Writes <head_dir>/token_counts.npz atomically."""
  path = pathlib.Path(head_dir) / COUNTS_FILE
  path.parent.mkdir(parents=True, exist_ok=True)
  buf = io.BytesIO()
  np.savez(buf, counts=np.asarray(counts, np.int64))
  tmp = path.with_name(path.name + ".tmp")
  tmp.write_bytes(buf.getvalue())
  os.replace(tmp, path)
  return path


def load_counts(head_dir: str | os.PathLike, vocab_size: int) -> np.ndarray:
  """int64 [V] from <head_dir>/token_counts.npz; errors name the file and what is wrong with it."""
  path = pathlib.Path(head_dir) / COUNTS_FILE
  if not path.exists():
    raise FileNotFoundError(f"{path}: no token counts beside this head, so it has no draft vocabulary; "
                            f"write them with `python -m glance_jax.train.token_counts --head {head_dir} "
                            f"--rows <regenerated rows .jsonl>`")
  try:
    with np.load(path) as f:
      counts = np.asarray(f["counts"])
  except Exception as e:  # noqa: BLE001 - any unreadable file is reported by name
    raise ValueError(f"{path}: unreadable token counts ({type(e).__name__}: {e})") from None
  if counts.shape != (vocab_size,):
    raise ValueError(f"{path}: 'counts' has shape {counts.shape}, the target's vocabulary is ({vocab_size},)")
  return counts.astype(np.int64)
