"""Calibrated node scores for the block head's tree: acceptance by (depth, rank, parent on the
head's top-1 path or not), fitted on held-out rounds, in place of the product of marginals.

GLANCE ranks a prefix by the product of the head's per-depth marginals, which are in effect
conditioned on the head's own top-1 path: once an off-path sibling is accepted, the next depth's
marginal is right far less often than on the path (vllm PR #42910: ~22% against 65-84% on DDTree).
A calibration table measures that instead of assuming it:

  spine[d, r]  P(the rank-r token at depth d + 1 is the target's | its parent was accepted and lies
               on the head's top-1 path)   (the root is on it)
  off[d, r]    the same for a parent off that path

for ranks r < R (rank R - 1 pools every rank >= R - 1). A node's score is the sum of the log table
entries along its path; tree.build_tree_beam(calibration=...) returns the exact top N under it,
with the head's top-K tokens per depth. The tree no longer reads the marginals' values, only their
ranks: a static shape per (spine, off) table, the first thing to beat before a parent-conditioned
correction (issue 25).

Fitted by bench/tree_calibration.py from teacher-forced rounds (the rank of the target's own token
at every depth of every anchor); stored beside the head as tree_calibration.json.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib

import numpy as np

FILE = "tree_calibration.json"
SCHEMA = "glance-tree-calibration/1"


@dataclasses.dataclass(frozen=True, eq=False)
class TreeCalibration:
  """log P(accept | parent accepted) tables, float32 [L, R] each (values <= 0); counts [2, L, R]
  (hits per cell: spine, off) and n [2, L] (parents seen per depth; [2, L, R] by bin).

  edges None: the R columns are ranks (rank R - 1 pooling the rest). edges float [R - 1] ascending
  in (0, 1): the columns are bins of the node's own marginal q (bin b holds edges[b-1] <= q <
  edges[b]), so the score keeps what each round's marginals say and recalibrates it, per depth and
  per parent on / off the top-1 path."""
  spine: np.ndarray
  off: np.ndarray
  counts: np.ndarray | None = None
  n: np.ndarray | None = None
  edges: np.ndarray | None = None

  @property
  def depth(self) -> int:
    return int(self.spine.shape[0])

  @property
  def ranks(self) -> int:
    return int(self.spine.shape[1])

  def tables(self, k: int) -> tuple:
    """What the drafter's params hold: rank tables (spine, off) float32 [L, K] for a builder keeping
    K ranks a depth (ranks >= R take R - 1's), or with edges (spine [L, R], off [L, R], edges)."""
    if self.edges is not None:
      return self.spine.astype(np.float32), self.off.astype(np.float32), np.asarray(self.edges, np.float32)
    idx = np.minimum(np.arange(int(k)), self.ranks - 1)
    return self.spine[:, idx].astype(np.float32), self.off[:, idx].astype(np.float32)


def increments(top_lq, tables):
  """The builder's per-node score increments for one round: top_lq [L, K] (the head's sorted
  log-marginals a depth) and the drafter's tables -> (spine, off) [L, K]."""
  import jax.numpy as jnp
  if len(tables) == 2:
    return tables
  spine, off, edges = tables
  b = jnp.searchsorted(edges, jnp.exp(top_lq), side="right")            # [L, K] bin of each node's q
  return jnp.take_along_axis(spine, b, axis=1), jnp.take_along_axis(off, b, axis=1)


DEFAULT_EDGES = (0.01, 0.03, 0.1, 0.2, 0.35, 0.5, 0.7, 0.9)


def accepted_parents(ranks: np.ndarray, k: int):
  """(t, d, side, rank) for every depth d whose parent a tree of K ranks a depth could hold and
  accept at root t: every earlier depth's target token ranked below K; side 0 when all of them
  ranked 0 (the parent on the head's top-1 path), else 1. A root ends at its first rank -1 (the
  answer's end) or after its first rank >= K (no tree holds that token, nor anything below it)."""
  for t in range(ranks.shape[0]):
    on = True
    for d in range(ranks.shape[1]):
      r = int(ranks[t, d])
      if r < 0:
        break
      yield t, d, 0 if on else 1, r
      if r >= k:
        break
      on = on and r == 0


def fit_marginal(ranks: np.ndarray, ybin: np.ndarray, hist: np.ndarray, edges=DEFAULT_EDGES, *,
                 k: int = 63, prior: float = 0.5) -> TreeCalibration:
  """Bins of the node's own marginal: ranks int [T, L] as in fit(); ybin int [T, L] the bin of the
  target token's q; hist int [T, L, R] how many of the head's top-K tokens at (t, d) fall in each
  bin (the candidates a tree could hold). Per (side, depth, bin): P = (hits + prior) / (candidates
  + 2 prior), hits counted where the target's token ranked below K."""
  ranks, ybin, hist = np.asarray(ranks), np.asarray(ybin), np.asarray(hist)
  t_, depth = ranks.shape
  nb = len(edges) + 1
  hits = np.zeros((2, depth, nb))
  cand = np.zeros((2, depth, nb))
  for t, d, side, r in accepted_parents(ranks, k):
    cand[side, d] += hist[t, d]
    if r < k:
      hits[side, d, int(ybin[t, d])] += 1
  den = cand + 2 * prior
  p = np.divide(hits + prior, den, out=np.full(hits.shape, 0.5), where=den > 0)   # never seen: 1/2
  log_p = np.log(np.clip(p, 1e-6, 1.0)).astype(np.float32)
  return TreeCalibration(spine=log_p[0], off=log_p[1], counts=hits.astype(np.int64), n=cand.astype(np.int64),
                         edges=np.asarray(edges, np.float32))


def fit(ranks: np.ndarray, *, max_rank: int = 8, k: int = 63, prior: float = 0.5) -> TreeCalibration:
  """ranks int [T, L]: at anchor t, the rank of the target's own token at depth d + 1 in the head's
  marginal (0 = the head's top token; -1 where the trajectory ended). Depth d's parent counts as
  accepted when every earlier depth's token ranked below K (it could be in the tree), and as on the
  spine when all of them ranked 0. Per cell, P = (hits / width + prior) / (parents + 2 prior):
  width 1 but for the pooled last rank bin (ranks R - 1 .. K - 1, each taking an equal share); a
  token ranked >= K counts as a parent with no hit (no tree holds it)."""
  ranks = np.asarray(ranks)
  t_, depth = ranks.shape
  r_ = int(max_rank)
  counts = np.zeros((2, depth, r_))
  n = np.zeros((2, depth))
  for _, d, side, r in accepted_parents(ranks, k):
    n[side, d] += 1
    if r < k:
      counts[side, d, min(r, r_ - 1)] += 1
  width = np.ones(r_)
  width[-1] = max(1, int(k) - (r_ - 1))
  den = np.broadcast_to(n[..., None] + 2 * prior, counts.shape)
  p = np.divide(counts / width + prior, den, out=np.full(counts.shape, 0.5), where=den > 0)  # never seen: 1/2
  log_p = np.log(np.clip(p, 1e-6, 1.0)).astype(np.float32)
  return TreeCalibration(spine=log_p[0], off=log_p[1], counts=counts.astype(np.int64), n=n.astype(np.int64))


def save(head_dir: str | os.PathLike, calib: TreeCalibration, meta: dict | None = None) -> pathlib.Path:
  path = pathlib.Path(head_dir) / FILE
  data = {"schema": SCHEMA, "spine": calib.spine.tolist(), "off": calib.off.tolist(),
          "edges": None if calib.edges is None else [float(x) for x in calib.edges],
          "counts": None if calib.counts is None else calib.counts.tolist(),
          "n": None if calib.n is None else calib.n.tolist(), "meta": meta or {}}
  tmp = path.with_name(path.name + ".tmp")
  tmp.write_text(json.dumps(data))
  os.replace(tmp, path)
  return path


def load(head_dir: str | os.PathLike, depth: int) -> TreeCalibration:
  """Reads <head_dir>/tree_calibration.json; every problem names the file and the key."""
  path = pathlib.Path(head_dir) / FILE
  try:
    data = json.loads(path.read_text())
  except (OSError, json.JSONDecodeError) as e:
    raise ValueError(f"{path}: unreadable tree calibration ({type(e).__name__}: {e})") from None
  if not isinstance(data, dict) or data.get("schema") != SCHEMA:
    raise ValueError(f"{path}: key 'schema' must be {SCHEMA!r}")
  tabs = []
  for key in ("spine", "off"):
    a = np.asarray(data.get(key), np.float32)
    if a.ndim != 2 or a.shape[0] != depth or not np.all(a <= 0):
      raise ValueError(f"{path}: key {key!r} must be [{depth}, R] log-probabilities (<= 0), got shape {a.shape}")
    tabs.append(a)
  if tabs[0].shape != tabs[1].shape:
    raise ValueError(f"{path}: 'spine' {tabs[0].shape} and 'off' {tabs[1].shape} differ")
  edges = data.get("edges")
  if edges is not None:
    edges = np.asarray(edges, np.float32)
    if edges.ndim != 1 or len(edges) + 1 != tabs[0].shape[1] or np.any(np.diff(edges) <= 0) or not (
        0 < edges.min() and edges.max() < 1):
      raise ValueError(f"{path}: key 'edges' must be {tabs[0].shape[1] - 1} ascending values in (0, 1)")
  return TreeCalibration(*tabs, counts=np.asarray(data["counts"]) if data.get("counts") else None,
                         n=np.asarray(data["n"]) if data.get("n") else None, edges=edges)
