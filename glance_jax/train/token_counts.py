"""How often each token is a supervised response token of regenerated rows: the draft vocabularies
of both heads are the K most frequent (EAGLE-3's: train/eagle3_train.py; the block head's:
head/draft_vocab.py).

  python -m glance_jax.train.token_counts --head DIR --rows regen/*.jsonl   # token_counts.npz beside a head
"""

from __future__ import annotations

import argparse
import pathlib
from typing import Sequence

import numpy as np


def response_counts(rows: Sequence[dict], vocab_size: int, *, seq_len: int | None = None,
                    exclude: Sequence[int] = ()) -> np.ndarray:
  """int64 [V]: each token's count among the rows' response tokens, as batch.collate masks them for
  the loss: cut where prompt + response passes seq_len (None: not cut), `exclude` (the image and
  video placeholders) and ids outside [0, V) left out."""
  counts = np.zeros(vocab_size, np.int64)
  drop = np.asarray(list(exclude), np.int64)
  for row in rows:
    resp = np.asarray(row["response_ids"], np.int64)
    if seq_len is not None:
      resp = resp[: max(0, seq_len - len(row["prompt_ids"]))]
    resp = resp[~np.isin(resp, drop) & (resp >= 0) & (resp < vocab_size)]
    counts += np.bincount(resp, minlength=vocab_size)
  return counts


def target_response_counts(rows: Sequence[dict], target_cfg, *, seq_len: int, truncate: bool = True) -> np.ndarray:
  """response_counts as a training run over `target_cfg` (a Qwen3VLConfig) masks its rows: cut at
  seq_len when truncating, the target's image and video placeholders excluded."""
  return response_counts(rows, target_cfg.text.vocab_size, seq_len=seq_len if truncate else None,
                         exclude=(target_cfg.image_token_id, target_cfg.video_token_id))


def main(argv=None) -> pathlib.Path:
  p = argparse.ArgumentParser(description="Write token_counts.npz beside a block head, from regenerated "
                                          "rows (train/regenerate.py), so it can decode with --draft-vocab K.")
  p.add_argument("--head", required=True, help="the head's directory (config.json gives the vocabulary size)")
  p.add_argument("--rows", nargs="+", required=True, help="regenerated rows (.jsonl) the head was trained on")
  p.add_argument("--seq-len", type=int, default=None, help="count only tokens inside this row length (as training cut them)")
  args = p.parse_args(argv)
  from glance_jax.head.checkpoint import read_head_config
  from glance_jax.head.draft_vocab import coverage, save_counts, top_ids
  from glance_jax.train.regenerate import read_regenerated
  cfg = read_head_config(args.head)
  rows = [r for path in args.rows for r in read_regenerated(path)]
  counts = response_counts(rows, cfg.vocab_size, seq_len=args.seq_len)
  out = save_counts(args.head, counts)
  for k in (64, 256, 1024, 4096, 32000):
    if k < cfg.vocab_size:
      print(f"K = {k}: coverage {coverage(counts, top_ids(counts, k)):.4f}")
  print(f"wrote {out} ({len(rows)} rows, {int(counts.sum())} tokens)")
  return out


if __name__ == "__main__":
  main()
