"""Which widths glance-auto compiles: its policy replayed on calibration rounds (bench/calibrate.py,
module doc 3.). Pure numpy on recorded rounds; the loop's own choice is policies.best_width, and
tests/test_calibrate.py checks the replay picks what it picks, at batch 1 and at batch B.

A wider compiled set lets the policy choose a wide tree on the rounds that pay for it, but every round
of that loop builds the widest tree; replaying the choice on rounds whose accepted length is known at
every width (glance at the widest budget verifies them all) weighs the two on measured costs.
"""

from __future__ import annotations

import itertools

import numpy as np

from glance_jax.analysis.isotonic import apply


def candidate_sets(widths: tuple[int, ...]) -> list[tuple[int, ...]]:
  """Every non-empty subset of `widths`, smallest first (the compiled sets the replay compares)."""
  return [c for n in range(1, len(widths) + 1) for c in itertools.combinations(sorted(widths), n)]


def set_key(widths) -> str:
  """(15, 31) -> "15,31": a compiled set as a JSON key."""
  return ",".join(str(w) for w in widths)


def round_records(results) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
  """GenerationResults of glance at the widest budget -> (raw E[A] [n, B, P], accepted length of the
  top-w tree [n, B, P], the P recorded widths): one entry per round of each call (B = its batch; all
  calls the same B), -1 in obs where a row was done (a row is live for a prefix of the rounds)."""
  widths = tuple(results[0].record_widths) if results else ()
  batch = len(results[0].predicted or []) if results else 0
  p, o = [], []
  for res in results:
    if tuple(res.record_widths) != widths or len(res.predicted or []) != batch:
      raise ValueError(f"calibration results differ in recorded widths or batch: {res.record_widths} x "
                       f"{len(res.predicted or [])} vs {widths} x {batch}")
    r = max((len(x) for x in res.predicted), default=0)
    pr = np.zeros((r, batch, len(widths)))
    ob = np.full((r, batch, len(widths)), -1.0)
    for i, (x, y) in enumerate(zip(res.predicted, res.observed)):
      pr[: len(x), i], ob[: len(y), i] = x, y
    p.append(pr)
    o.append(ob)
  if not p:
    return np.zeros((0, batch, len(widths))), np.zeros((0, batch, len(widths))), widths
  return np.concatenate(p), np.concatenate(o), widths


def replay_policy(pred: np.ndarray, obs: np.ndarray, record_widths: tuple[int, ...], costs: dict[int, float],
                  knots: dict[int, tuple] | tuple = ()) -> dict:
  """glance-auto's choice (policies.best_width: one width per round for the whole batch) replayed on
  recorded rounds, for the compiled set `costs` (width -> t_S(w) / t_AR at this batch; width 0 = an
  AR step after the draft, no draft rows). pred / obs [n, B, P] (or [n, P] for batch 1; obs -1 =
  row done). knots: width -> (predicted, observed) calibration (or one pair for every width; () = raw).
  -> tokens per AR step (all rows' tokens over the rounds' cost), and the share of rounds per width."""
  pred, obs = np.asarray(pred, np.float64), np.asarray(obs, np.float64)
  if pred.ndim == 2:
    pred, obs = pred[:, None], obs[:, None]
  widths = sorted(costs)
  if any(w and w not in record_widths for w in widths):
    raise ValueError(f"widths {widths} are not all recorded ({record_widths})")
  live = np.all(obs >= 0, axis=2)                                         # [n, B]
  keep = live.any(axis=1)
  pred, obs, live = pred[keep], obs[keep], live[keep]
  n, b = live.shape
  ea, got = np.zeros((n, b, len(widths))), np.zeros((n, b, len(widths)))
  for j, w in enumerate(widths):
    if w:
      col = record_widths.index(w)
      k = knots.get(w, ()) if isinstance(knots, dict) else knots
      ea[..., j] = apply(k, pred[..., col]) if k else pred[..., col]
      got[..., j] = obs[..., col]
  t = np.asarray([costs[w] for w in widths], np.float64)
  want = np.sum(np.where(live[..., None], 1.0 + ea, 0.0), axis=1)        # [n, nw]: the batch's expected tokens
  pick = np.argmax(want / t[None], axis=1)                                # first on ties, as jnp.argmax
  earned = np.sum(np.where(live, 1.0 + got[np.arange(n), :, pick], 0.0), axis=1)   # [n]
  tokens, cost = float(np.sum(earned)), float(np.sum(t[pick]))
  return {"tokens_per_ar_step": tokens / cost if cost else 0.0, "vs_ar": tokens / cost / b if cost else 0.0,
          "rounds": int(n),
          "tokens_per_round": tokens / max(n, 1),
          "share": {str(w): float(np.mean(pick == j)) if n else 0.0 for j, w in enumerate(widths)}}


def choose_auto_set(set_costs: dict[str, dict[str, float]], pred, obs, record_widths, knots) -> tuple:
  """-> (the compiled set with the most replayed tokens per AR step, one report row per set, best
  first). set_costs: set_key -> {str(w): t_S(w)} (measure_costs' set_t_over_ar)."""
  rows = []
  for key, c in set_costs.items():
    costs = {int(w): float(t) for w, t in c.items()}
    rows.append({"auto_set": sorted(costs), "t_over_ar": {str(w): costs[w] for w in sorted(costs)},
                 **replay_policy(pred, obs, record_widths, costs, knots)})
  if not rows:
    raise ValueError("no compiled sets to choose from")
  rows.sort(key=lambda r: (-r["tokens_per_ar_step"], len(r["auto_set"]), r["auto_set"]))
  return tuple(rows[0]["auto_set"]), rows
