"""Fits the block head's calibrated node scores (head/tree_calibration.py) on held-out prompts.

  python -m glance_jax.bench.tree_calibration --model T --head H TASK.jsonl ... [--limit 16] [--out FILE]

Per prompt: the target's greedy answer y (its own stop tokens, at most --max-new-tokens), one
teacher-forced pass of the target over [prompt; y] (bench/image_swap.teacher_forced), and for every
root y_t the head's marginals over its block, packed like training's (train/objective.packed_hidden):
ranks[t, d] = the rank of y_{t+d+1} (the target's own next token) in the head's marginal at depth
d + 1. With the correct image and the target's own trajectory, those are exactly the ranks a decode
round rooted at y_t meets (the image test checks the same positions against generate()). The
fitted tables go beside the head as tree_calibration.json (default), with what they were fitted on.
"""

from __future__ import annotations

import argparse
import functools
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

from glance_jax.bench.image_swap import ANCHORS_PER_PASS, teacher_forced
from glance_jax.static_args import merge
from glance_jax.train.batch import TrainBatch
from glance_jax.train.objective import packed_hidden


def trajectory_ranks(target, head, inputs, y, *, edges=None, k: int = 63):
  """int [n - 1, L]: at each root y_t (t < n - 1), the rank of y_{t+d+1} in the head's depth-(d+1)
  marginal; -1 past the end of y. With `edges` (q-bin edges), also (ybin [n - 1, L]: the bin of that
  token's q, hist [n - 1, L, R]: how many of the head's top-k tokens fall in each bin)."""
  y = np.asarray(y, np.int32)
  n, depth = len(y), head.config.block_size - 1
  edges_j = jnp.asarray(edges if edges is not None else [0.5], jnp.float32)   # unused without edges
  nb = edges_j.shape[0] + 1
  if n < 2:
    empty = np.zeros((0, depth), np.int32)
    return empty if edges is None else (empty, empty, np.zeros((0, depth, nb), np.int32))
  _, _, feats, ids, pos, p = teacher_forced(target, head, inputs, y)
  t = np.arange(n - 1)
  j = t[:, None] + 1 + np.arange(depth)[None]                               # slot of depth d + 1
  labels = np.where(j < n, y[np.minimum(j, n - 1)], -1).astype(np.int32)    # [n-1, L]
  out = np.full((n - 1, depth), -1, np.int32)
  ybin = np.zeros((n - 1, depth), np.int32)
  hist = np.zeros((n - 1, depth, nb), np.int32)
  hc = head.config
  for s in range(0, n - 1, ANCHORS_PER_PASS):
    m = min(ANCHORS_PER_PASS, n - 1 - s)
    anchors = np.zeros((1, ANCHORS_PER_PASS), np.int32)
    anchors[0, :m] = p + t[s:s + m]
    lab = np.full((ANCHORS_PER_PASS, depth), -1, np.int32)
    lab[:m] = labels[s:s + m]
    r, yb, hi = _ranks(target.jit_graphdef, target.flat_params, head.jit_graphdef, head.flat_params, feats, ids,
                       pos, jnp.asarray(anchors), jnp.asarray(np.arange(ANCHORS_PER_PASS)[None] < m), jnp.asarray(lab),
                       edges_j, block_size=hc.block_size, mask_token_id=hc.mask_token_id,
                       top_k=min(int(k), target.config.text.vocab_size))
    out[s:s + m], ybin[s:s + m], hist[s:s + m] = (np.asarray(x)[:m] for x in (r, yb, hi))
  return out if edges is None else (out, ybin, hist)


@functools.partial(jax.jit, static_argnames=("tgd", "hgd", "block_size", "mask_token_id", "top_k"))
def _ranks(tgd, tparams, hgd, hparams, feats, ids, positions, anchors, anchor_valid, labels, edges, *,
           block_size: int, mask_token_id: int, top_k: int):
  """-> (rank int32 [A, L]: of labels[a, d] in the head's log q at anchor a, depth d + 1, -1 where the
  label is -1, counting the tokens the head scores strictly higher; the bin of the label's q by
  `edges`; [A, L, R] the bins of the head's top_k tokens)."""
  target, head = merge(tgd, tparams), merge(hgd, hparams)
  ones = jnp.ones(ids.shape, bool)
  batch = TrainBatch(input_ids=ids, loss_mask=ones, attention_mask=ones, positions=positions)
  hidden = packed_hidden(head, target.embed_weight, feats, batch, anchors, anchor_valid, block_size=block_size,
                         mask_token_id=mask_token_id)
  a = anchors.shape[1]
  logits = target.logits(hidden.reshape(a, block_size, -1)[:, 1:])          # [A, L, V]
  mine = jnp.take_along_axis(logits, jnp.maximum(labels, 0)[..., None], axis=-1)
  rank = jnp.sum(logits > mine, axis=-1).astype(jnp.int32)
  probs = jax.nn.softmax(logits, axis=-1)
  ybin = jnp.searchsorted(edges, jnp.take_along_axis(probs, jnp.maximum(labels, 0)[..., None], axis=-1)[..., 0],
                          side="right").astype(jnp.int32)
  top = jax.lax.top_k(probs, top_k)[0]                                      # [A, L, K]
  nb = edges.shape[0] + 1
  hist = jnp.sum(jax.nn.one_hot(jnp.searchsorted(edges, top, side="right"), nb, dtype=jnp.int32), axis=2)
  return jnp.where(labels >= 0, rank, -1), ybin, hist


def collect(target, head, processor, records, *, max_new_tokens: int, edges=None, k: int = 63, progress=print):
  """ranks [rounds, L] over every record's greedy trajectory (with edges: (ranks, ybin, hist))."""
  from glance_jax.qwen3_vl.inputs import prepare_inputs
  out = []
  for i, rec in enumerate(records):
    inputs = prepare_inputs(processor, rec.prompt, list(rec.images) or None)
    toks, n = target.generate_greedy(inputs, max_new_tokens)
    r = trajectory_ranks(target, head, inputs, toks[0, : n[0]], edges=edges, k=k)
    out.append(r if edges is not None else (r,))
    if progress and (i + 1) % 8 == 0:
      progress(f"tree calibration: {i + 1}/{len(records)} prompts")
  parts = [np.concatenate(x) for x in zip(*out)]
  return parts[0] if edges is None else tuple(parts)


def main(argv=None) -> dict:
  from glance_jax.bench.tasks import load_tasks
  from glance_jax.head import Head
  from glance_jax.head import tree_calibration as tc
  from glance_jax.qwen3_vl.inputs import Processor
  from glance_jax.qwen3_vl.target import load_target
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("task_files", nargs="+", help="held-out task files (JSONL records) the head never trained on")
  p.add_argument("--model", required=True)
  p.add_argument("--head", required=True)
  p.add_argument("--limit", type=int, default=16, help="prompts per task")
  p.add_argument("--skip", type=int, default=0, help="leave each task's first N records out (e.g. the ones a "
                 "benchmark reads: fit and measure on different prompts)")
  p.add_argument("--max-new-tokens", type=int, default=224)
  p.add_argument("--by", choices=("marginal", "rank"), default="marginal",
                 help="score columns: bins of each node's own marginal q (keeps each round's confidence), or its rank")
  p.add_argument("--max-rank", type=int, default=8, help="--by rank: rank bins R (the last pools every rank >= R - 1)")
  p.add_argument("--budget", type=int, default=63, help="the tree width the tables are fitted for (K = its ranks)")
  p.add_argument("--out", default=None, help=f"default: <head>/{tc.FILE}")
  args = p.parse_args(argv)
  t0 = time.perf_counter()
  target = load_target(args.model, dtype=jnp.float32)
  head = Head.load(args.head, target=target)
  processor = Processor.from_pretrained(str(target.path))
  tasks, errors = load_tasks(args.task_files, args.skip + args.limit)
  for e in errors:
    print(e["message"])
  records = [r for t in tasks for r in t.records[args.skip:]]
  k = min(args.budget, head.config.vocab_size)
  if args.by == "rank":
    ranks = collect(target, head, processor, records, max_new_tokens=args.max_new_tokens)
    calib = tc.fit(ranks, max_rank=args.max_rank, k=k)
  else:
    ranks, ybin, hist = collect(target, head, processor, records, max_new_tokens=args.max_new_tokens,
                                edges=tc.DEFAULT_EDGES, k=k)
    calib = tc.fit_marginal(ranks, ybin, hist, tc.DEFAULT_EDGES, k=k)
  meta = {"model": args.model, "head": args.head, "task_files": args.task_files, "limit": args.limit, "skip": args.skip,
          "prompts": len(records), "rounds": int(ranks.shape[0]), "max_new_tokens": args.max_new_tokens,
          "budget": args.budget, "by": args.by}
  out = pathlib.Path(args.out).parent if args.out else pathlib.Path(args.head)
  path = tc.save(out, calib, meta)
  if args.out and pathlib.Path(args.out).name != tc.FILE:
    path = pathlib.Path(path).replace(args.out)
  p_spine, p_off = np.exp(calib.spine), np.exp(calib.off)
  print(f"{len(records)} prompts, {ranks.shape[0]} roots, {time.perf_counter() - t0:.0f} s -> {path}")
  take = range(3) if calib.edges is None else range(calib.ranks - 3, calib.ranks)
  lo, hi = (0.0, *map(float, calib.edges if calib.edges is not None else ())), (*map(float, calib.edges if calib.edges is not None else ()), 1.0)
  cols = "rank 0 / 1 / 2" if calib.edges is None else "q in " + " / ".join(f"[{lo[b]:.2f}, {hi[b]:.2f})" for b in take)
  print(f"P(accept | parent accepted), {cols}, at depths 1, 2, 4, 8: on the top-1 path "
        + " ; ".join(" / ".join(f"{p_spine[d, r]:.2f}" for r in take) for d in (0, 1, 3, 7) if d < calib.depth)
        + "  | off it " + " ; ".join(" / ".join(f"{p_off[d, r]:.2f}" for r in take) for d in (1, 3, 7) if d < calib.depth))
  return {"path": str(path), **meta}


if __name__ == "__main__":
  main()
