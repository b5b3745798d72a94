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


def stored_set_costs(table: dict) -> dict[str, dict[str, float]]:
  """The set costs a table's compiled set was chosen on (its auto_sets' t_S(w) / t_AR), keyed as
  choose_auto_set takes them: for choosing again on other rounds without timing again."""
  return {set_key(r["auto_set"]): {str(w): float(t) for w, t in r["t_over_ar"].items()}
          for r in table.get("auto_sets") or []}


def table_width_knots(table: dict, record_widths) -> dict[int, tuple]:
  """The calibration map the loop applies per width (as RoundCost.knots): the width's own fit where
  the table's calibration has one, else the pooled one, else () (raw E[A])."""
  cal = table.get("calibration") or {}
  pooled = (tuple(cal["predicted"]), tuple(cal["observed"])) if cal.get("predicted") else ()
  own = {int(w): (tuple(k["predicted"]), tuple(k["observed"])) for w, k in (cal.get("per_width") or {}).items()}
  return {int(w): own.get(int(w), pooled) for w in record_widths}


# --- the calibration rounds stored in a cost table (key 'replay'), for choosing a set elsewhere ---------

REPLAY_KEY = "replay"


def replay_payload(pred, obs, record_widths) -> dict:
  """Calibration rounds as a table's 'replay' value: {"widths": P, "predicted": [n][B][P] raw E[A],
  "observed": [n][B][P] accepted length (-1 = row done)}. The rounds are the head's (its acceptance),
  not the device's, so a table timed on another machine (bench/device_cost.py) replays them on its own
  costs to choose its compiled set."""
  return {"widths": [int(w) for w in record_widths],
          "predicted": np.round(np.asarray(pred, np.float64), 4).tolist(),
          "observed": np.rint(np.asarray(obs, np.float64)).astype(int).tolist()}


def replay_rounds(table: dict, path: str) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]] | None:
  """A table's 'replay' -> (pred [n, B, P], obs [n, B, P], widths), None when it has none; a malformed
  one is a ValueError naming the file and the key."""
  r = table.get(REPLAY_KEY)
  if r is None:
    return None
  try:
    widths = tuple(int(w) for w in r["widths"])
    pred, obs = np.asarray(r["predicted"], np.float64), np.asarray(r["observed"], np.float64)
    ok = pred.ndim == 3 and pred.shape == obs.shape and pred.shape[2] == len(widths) and pred.shape[0] > 0
  except (KeyError, TypeError, ValueError):
    ok = False
  if not ok:
    raise ValueError(f"--round-cost: {path}: key '{REPLAY_KEY}' must hold 'widths' [P] and 'predicted' / "
                     "'observed' rounds [n][B][P] of equal shape")
  return pred, obs, widths


def apply_choice(table: dict, set_costs: dict, pred, obs, record_widths, width_knots,
                 margin: float = 0.0) -> list[dict]:
  """Writes the replay's choice into `table` (auto_set, auto_plain_ar, the chosen set's t_S as its
  widths' t_over_ar, auto_sets) and returns the report rows, the chosen first. margin: take the set
  of fewest widths whose replayed tokens per AR step are within this fraction of the best's (a
  one-width set has no choice for the in-sample calibration to flatter, nor any switching, which the
  replay does not charge: see bench/device_cost.py)."""
  _, rows = choose_auto_set(set_costs, pred, obs, record_widths, width_knots)
  if margin:
    top = rows[0]["tokens_per_ar_step"]
    near = [r for r in rows if r["tokens_per_ar_step"] * (1 + margin) >= top]
    pick = min(near, key=lambda r: (len(r["auto_set"]), -r["tokens_per_ar_step"]))
    rows = [pick] + [r for r in rows if r is not pick]
  table["auto_set"] = list(rows[0]["auto_set"])
  # AR emits one token per row per AR step: a best set below that never pays at this batch
  table["auto_plain_ar"] = rows[0]["vs_ar"] < 1.0
  table["t_over_ar"].update(rows[0]["t_over_ar"])       # its widths' cost in its own loop
  table["auto_sets"] = rows
  return rows
