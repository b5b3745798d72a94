"""The entropy law: how the accepted length of a round falls with the target's entropy at its root.

Records: one per decode round, H = the target's entropy (nats) at the round's root and a = the
accepted length (0..L, L = the draft depth; GenerationResult.root_entropy / .accepted).

Model (survival with horizon L). At each depth l = 1..L the draft token survives verification
independently with the same probability p = sigmoid(b0 - b1 H); a counts the consecutive survivals
and stops at L:  P(a = k) = p^k (1 - p) for k < L,  P(a = L) = p^L,  E[a | H] = sum_{l=1..L} p^l.
The log-likelihood of a round is a log p + [a < L] log(1 - p): a binomial logistic regression with
a successes and [a < L] failures, so it is concave in (b0, b1) and the MLE is unique when it exists.
It exists exactly when H is not constant and the successes and failures overlap in H (no threshold
puts every round with a > 0 on one side and every round with a < L on the other); otherwise
fit_entropy_law raises ValueError rather than return a fit running off to infinity.

End of the answer (right censoring). A round whose accepted run reaches the end of the generation
(the stop token drafted and accepted, or max_new_tokens reached) did not fail: a counts survivals
only, with no failure, like a = L: log-likelihood a log p. `end_censoring` finds those rounds from a
row's emitted token count and its accepted lengths; with short answers (the testbed's captions are
~13 tokens, one block) they are many, and counting them as failures makes the rounds that start
late in an answer look bad whatever their entropy.

Descriptive side, free of the model: mean a per entropy decile and its isotonic (non-increasing)
fit; the isotonic R^2 says how much of the decile-to-decile variation a monotone law can explain.
With censored rounds the mean a of a bin is biased low, so the bins' survival rates p_j (survivals
/ (survivals + failures) in the bin, the MLE of p with one free p per bin) give the bins' E[a] =
sum_{l=1..L} p_j^l instead, and the isotonic fit, the law R^2 and the floor use those.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from glance_jax.analysis.isotonic import isotonic_fit


def _log_sigmoid(z: np.ndarray) -> np.ndarray:
  """log sigmoid(z) = -log(1 + e^-z), exact for large |z| (no 1 - p cancellation)."""
  return -np.logaddexp(0.0, -z)


def _flat(x: Any) -> Any:
  if isinstance(x, (list, tuple)) and x and np.ndim(x[0]) > 0:
    return np.concatenate([np.ravel(v) for v in x])
  return x


def _as_records(H: Any, a: Any, L: int) -> tuple[np.ndarray, np.ndarray]:
  """Flatten (arrays or lists of per-row arrays) and check: finite H, integer a in [0, L]."""
  H, a = _flat(H), _flat(a)
  H = np.asarray(H, dtype=np.float64).ravel()
  a_f = np.asarray(a, dtype=np.float64).ravel()
  if int(L) != L or L < 1:
    raise ValueError(f"L must be a positive integer, got {L}")
  if H.shape != a_f.shape:
    raise ValueError(f"H and a differ in length: {H.size} vs {a_f.size}")
  if H.size == 0:
    raise ValueError("no records")
  if not np.all(np.isfinite(H)):
    raise ValueError("H has non-finite values")
  if np.any(a_f != np.round(a_f)) or np.any(a_f < 0) or np.any(a_f > L):
    raise ValueError(f"a must be integers in [0, {L}]")
  return H, a_f.astype(np.int64)


def _as_censored(censored: Any, n: int) -> np.ndarray:
  """bool [n]: the rounds whose accepted run reached the end of the generation (none if None)."""
  if censored is None:
    return np.zeros(n, bool)
  c = np.asarray(_flat(censored), dtype=bool).ravel()
  if c.size != n:
    raise ValueError(f"censored has {c.size} entries for {n} rounds")
  return c


def end_censoring(accepted: Any, n_tokens: int) -> tuple[np.ndarray, np.ndarray]:
  """One row's rounds -> (a, censored): a with its last round cut to the tokens it emitted, and
  whether that round's run reached the end of the generation (right-censored, no failure seen).

  The prefill emits one token and round r emits a_r + 1 (its accepted draft tokens and the
  target's bonus), except that the last round stops at the first stop token or at max_new_tokens.
  When it emitted fewer than a + 1 tokens, every one of them was an accepted draft token (the stop
  among them), so the draft had not failed yet: a = the tokens emitted, censored. When it emitted
  all a + 1, its bonus (maybe the stop token) is where the draft failed: an ordinary round."""
  a = np.asarray(accepted, dtype=np.int64).ravel().copy()
  censored = np.zeros(a.size, bool)
  if a.size:
    last = int(n_tokens) - 1 - int(np.sum(a[:-1] + 1))
    if not 0 <= last <= a[-1] + 1:
      raise ValueError(f"{n_tokens} tokens cannot come from a prefill token and rounds accepting {a.tolist()}")
    if last < a[-1] + 1:
      a[-1], censored[-1] = last, True
  return a, censored


@dataclasses.dataclass(frozen=True)
class EntropyLawFit:
  """MLE of logit p = b0 - b1 H; standard errors from the inverse observed information."""
  b0: float
  b1: float
  se_b0: float
  se_b1: float
  loglik: float
  n: int
  L: int = 15
  cov_b0_b1: float = 0.0

  def expected(self, H: Any) -> np.ndarray:
    return expected_accepted(self.b0, self.b1, H, self.L)

  def to_dict(self) -> dict[str, float | int]:
    return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


def expected_accepted(b0: float, b1: float, H: Any, L: int) -> np.ndarray:
  """E[a | H] = sum_{l=1..L} p^l with p = sigmoid(b0 - b1 H); same shape as H (0-d for a scalar).

  Summed term by term in log space (p^l = exp(l log p)) so p -> 1 gives L, not 0/0."""
  H = np.asarray(H, dtype=np.float64)
  log_p = _log_sigmoid(b0 - b1 * H)[..., None]
  return np.exp(np.arange(1, int(L) + 1) * log_p).sum(-1)


def _neg_loglik(beta: np.ndarray, x: np.ndarray, k: np.ndarray, c: np.ndarray
                ) -> tuple[float, np.ndarray, np.ndarray]:
  """-loglik, its gradient and Hessian in beta = (b0, b1) for z = b0 - b1 x.

  dl/dz = k (1 - p) - c p and d2l/dz2 = -(k + c) p (1 - p), with p and 1 - p from log-sigmoids."""
  z = beta[0] - beta[1] * x
  lp, lq = _log_sigmoid(z), _log_sigmoid(-z)
  p, q = np.exp(lp), np.exp(lq)
  ll = float(np.sum(k * lp + c * lq))
  g = k * q - c * p
  w = (k + c) * p * q
  grad = np.array([g.sum(), -(g * x).sum()])
  hess = -np.array([[w.sum(), -(w * x).sum()], [-(w * x).sum(), (w * x * x).sum()]])
  return -ll, -grad, -hess


def fit_entropy_law(H: Any, a: Any, L: int, censored: Any = None) -> EntropyLawFit:
  """Maximum-likelihood (b0, b1) of the survival model; see the module docstring. censored (bool
  per round, optional): rounds that reached the end of the generation (end_censoring), no failure.

  The optimiser (scipy trust-exact, analytic gradient and Hessian) works on standardised H for
  conditioning; the log-likelihood, its Hessian and the standard errors are then taken at the MLE
  in the original (b0, b1). Raises ValueError when no finite MLE exists: every a = 0 (p -> 0),
  every a = L (p -> 1), H constant (b1 not identifiable), or the rounds with a > 0 and those with
  a < L separated in H (b1 -> +-inf)."""
  from scipy.optimize import minimize

  H, a = _as_records(H, a, L)
  k = a.astype(np.float64)                 # survivals (successes)
  c = ((a < L) & ~_as_censored(censored, a.size)).astype(np.float64)   # the failure that ended it
  if np.all(a == 0):
    raise ValueError("every round accepted 0: p -> 0 and b0 -> -inf, no finite MLE")
  if np.all(a == L):
    raise ValueError(f"every round accepted L = {L}: p -> 1 and b0 -> +inf, no finite MLE")
  if not c.any():
    raise ValueError(f"every round accepted L = {L} or reached the end of its answer: p -> 1 and "
                     f"b0 -> +inf, no finite MLE")
  if np.ptp(H) == 0:
    raise ValueError("H is constant: b1 is not identifiable (only sigmoid(b0 - b1 H) is)")
  h_succ, h_fail = H[a > 0], H[c > 0]
  if h_succ.max() <= h_fail.min() or h_succ.min() >= h_fail.max():
    raise ValueError("rounds with a > 0 and rounds that failed are separated in H: "
                     "b1 -> +-inf, no finite MLE")

  mu, s = float(H.mean()), float(H.std())
  x = (H - mu) / s
  p_pool = k.sum() / (k.sum() + c.sum())
  start = np.array([math.log(p_pool / (1 - p_pool)), 0.0])
  res = minimize(lambda b: _neg_loglik(b, x, k, c)[:2], start, jac=True,
                 hess=lambda b: _neg_loglik(b, x, k, c)[2], method="trust-exact",
                 options={"gtol": 1e-9, "maxiter": 500})
  c0, c1 = res.x                          # z = c0 - c1 (H - mu) / s
  b = np.array([c0 + c1 * mu / s, c1 / s])
  nll, grad, info = _neg_loglik(b, H, k, c)
  if not np.all(np.isfinite(b)) or np.abs(grad).max() > 1e-4 * max(1.0, H.size):
    raise ValueError(f"MLE did not converge: {res.message}")
  cov = np.linalg.inv(info)               # -Hessian of loglik = observed information
  return EntropyLawFit(b0=float(b[0]), b1=float(b[1]), se_b0=float(math.sqrt(cov[0, 0])),
                       se_b1=float(math.sqrt(cov[1, 1])), loglik=float(-nll), n=int(H.size),
                       L=int(L), cov_b0_b1=float(cov[0, 1]))


@dataclasses.dataclass(frozen=True)
class DecileTable:
  """Per entropy bin (ascending H): mean H (centre), mean a, its standard error, count, H range."""
  centres: np.ndarray
  mean_a: np.ndarray
  sem_a: np.ndarray
  counts: np.ndarray
  h_lo: np.ndarray
  h_hi: np.ndarray
  bin_of: np.ndarray      # per record: its bin index (into the arrays above)

  def to_dict(self) -> dict[str, list]:
    return {f.name: getattr(self, f.name).tolist() for f in dataclasses.fields(self)
            if f.name != "bin_of"}


def decile_table(H: Any, a: Any, n_bins: int = 10) -> DecileTable:
  """Mean accepted length per entropy quantile bin (ascending H).

  Bin j holds the records whose H first occurs at sorted position in [j n / n_bins,
  (j + 1) n / n_bins): equal H always share a bin (that of their first position), so a tied mass
  never straddles two bins, and a mass of ties at the bottom (e.g. many H = 0 rounds in a copy
  regime) that fills at least one bin is a bin of its own, not mixed with higher entropies. Bins
  left empty by ties are dropped, so fewer than n_bins may come back."""
  H = np.asarray(H, dtype=np.float64).ravel()
  a = np.asarray(a, dtype=np.float64).ravel()
  if H.shape != a.shape or H.size == 0:
    raise ValueError("H and a must be non-empty and of equal length")
  if n_bins < 1:
    raise ValueError(f"n_bins must be >= 1, got {n_bins}")
  first_rank = np.searchsorted(np.sort(H), H, side="left")
  raw = first_rank * n_bins // H.size
  used, bin_of = np.unique(raw, return_inverse=True)
  m = used.size
  counts = np.bincount(bin_of, minlength=m)
  mean_a = np.bincount(bin_of, a, m) / counts
  var_a = np.bincount(bin_of, (a - mean_a[bin_of]) ** 2, m) / np.maximum(counts - 1, 1)
  lo = np.full(m, np.inf)
  hi = np.full(m, -np.inf)
  np.minimum.at(lo, bin_of, H)
  np.maximum.at(hi, bin_of, H)
  return DecileTable(centres=np.bincount(bin_of, H, m) / counts, mean_a=mean_a,
                     sem_a=np.sqrt(var_a / counts), counts=counts, h_lo=lo, h_hi=hi,
                     bin_of=bin_of)


def weighted_r2(y: Any, fitted: Any, weights: Any = None) -> float:
  """1 - sum w (y - f)^2 / sum w (y - ybar_w)^2. For an isotonic fit this lies in [0, 1] (it is a
  projection onto a cone holding the constants); for another curve it can be negative. Constant y:
  1.0 if the fit is exact, else nan."""
  y = np.asarray(y, dtype=np.float64).ravel()
  f = np.asarray(fitted, dtype=np.float64).ravel()
  w = np.ones_like(y) if weights is None else np.asarray(weights, dtype=np.float64).ravel()
  ybar = np.sum(w * y) / np.sum(w)
  ss_res = float(np.sum(w * (y - f) ** 2))
  ss_tot = float(np.sum(w * (y - ybar) ** 2))
  if ss_tot <= 1e-24 * max(1.0, float(np.sum(w * y * y))):
    return 1.0 if ss_res <= 1e-20 * max(1.0, float(np.sum(w * y * y))) else math.nan
  return 1.0 - ss_res / ss_tot


def copy_regime(fit: EntropyLawFit, table: DecileTable, L: int) -> dict[str, float]:
  """The law's cap against the lowest-entropy bin's mean accepted length (the copy-regime test).

  Definitions (p0 = sigmoid(b0), the survival probability at H = 0):
    cap_exp_b0     = e^{b0} = p0 / (1 - p0) = sum_{l>=1} p0^l: the odds at H = 0, i.e. the expected
                     accepted length at zero entropy with an unlimited horizon (the paper's cap);
    se_cap_exp_b0  = e^{b0} se_b0 (delta method);
    cap_L          = E[a | H = 0] = sum_{l=1..L} p0^l = e^{b0} (1 - p0^L) <= min(e^{b0}, L): the
                     ceiling the model itself implies at horizon L;
    floor_mean     = the mean a in the lowest-entropy bin (table row 0), floor_h its mean H,
                     floor_sem its standard error;
    model_at_floor = E[a | H = floor_h], what the law predicts there;
    floor_over_cap = floor_mean / cap_exp_b0,  floor_over_cap_L = floor_mean / cap_L
                     (> 1: the lowest decile beats the law's ceiling, a separate copy regime);
    floor_resid_z  = (floor_mean - model_at_floor) / floor_sem (nan when floor_sem = 0).
  """
  p0 = 1.0 / (1.0 + math.exp(-fit.b0))
  cap = math.exp(fit.b0)
  cap_l = float(expected_accepted(fit.b0, fit.b1, 0.0, L))
  floor_mean, floor_h, floor_sem = (float(table.mean_a[0]), float(table.centres[0]),
                                    float(table.sem_a[0]))
  model_floor = float(expected_accepted(fit.b0, fit.b1, floor_h, L))
  return {
      "p0": p0, "cap_exp_b0": cap, "se_cap_exp_b0": cap * fit.se_b0, "cap_L": cap_l,
      "floor_mean": floor_mean, "floor_h": floor_h, "floor_sem": floor_sem,
      "model_at_floor": model_floor,
      "floor_over_cap": floor_mean / cap, "floor_over_cap_L": floor_mean / cap_l,
      "floor_resid_z": (floor_mean - model_floor) / floor_sem if floor_sem > 0 else math.nan,
  }


def pool_records(results: Iterable[Any]) -> tuple[np.ndarray, np.ndarray]:
  """(H, a) pooled over GenerationResult-like objects (lists .root_entropy and .accepted)."""
  hs: list[np.ndarray] = []
  as_: list[np.ndarray] = []
  for r in results:
    hs.extend(np.ravel(h) for h in r.root_entropy)
    as_.extend(np.ravel(x) for x in r.accepted)
  if not hs:
    return np.zeros(0), np.zeros(0, dtype=np.int64)
  return np.concatenate(hs).astype(np.float64), np.concatenate(as_).astype(np.int64)


def _clean(v: Any) -> Any:
  """JSON-safe: numpy scalars/arrays to Python, non-finite floats to None."""
  if isinstance(v, Mapping):
    return {str(k): _clean(x) for k, x in v.items()}
  if isinstance(v, np.ndarray):
    return _clean(v.tolist())
  if isinstance(v, (list, tuple)):
    return [_clean(x) for x in v]
  if isinstance(v, (np.integer, bool, np.bool_)):
    return v.item() if isinstance(v, np.generic) else v
  if isinstance(v, (float, np.floating)):
    return float(v) if math.isfinite(v) else None
  return v


def survival_table(table: DecileTable, a: np.ndarray, censored: np.ndarray, L: int) -> dict[str, np.ndarray]:
  """Per bin of `table`: censored rounds, the survival rate p_j = survivals / (survivals +
  failures) and E[a] at it, sum_{l=1..L} p_j^l (the bin's mean accepted length had no answer
  ended; equal to nothing simpler when no round is censored, so used only when some are)."""
  m = table.counts.size
  k = np.bincount(table.bin_of, a.astype(np.float64), m)
  c = np.bincount(table.bin_of, ((a < L) & ~censored).astype(np.float64), m)
  p = np.where(k + c > 0, k / np.maximum(k + c, 1e-300), 0.0)
  e = np.array([np.sum(pj ** np.arange(1, L + 1)) for pj in p])
  return {"censored": np.bincount(table.bin_of, censored.astype(np.float64), m).astype(np.int64),
          "survival_p": p, "survival_a": e}


def _binned_target(table: DecileTable, a: np.ndarray, censored: np.ndarray, L: int) -> tuple[np.ndarray, dict | None]:
  """What the isotonic fit and the law R^2 fit per bin: the mean a, or with censored rounds the
  bins' E[a] at their survival rates (then also survival_table's dict)."""
  if not censored.any():
    return table.mean_a, None
  surv = survival_table(table, a, censored, L)
  return surv["survival_a"], surv


def isotonic_r2(H: Any, a: Any, censored: Any, L: int, n_bins: int = 10) -> float:
  """analyze()'s per-task isotonic R^2 alone (no MLE): the decile table's non-increasing fit."""
  H, a = _as_records(H, a, L)
  censored = _as_censored(censored, a.size)
  table = decile_table(H, a, n_bins)
  y, _ = _binned_target(table, a, censored, L)
  return weighted_r2(y, isotonic_fit(table.centres, y, table.counts, decreasing=True), table.counts)


def bootstrap_isotonic_r2(rows: Sequence[tuple[Any, Any, Any]], L: int, n_bins: int = 10, *,
                          n_boot: int = 1000, alpha: float = 0.05, seed: int = 0) -> tuple[float, float]:
  """Percentile interval of isotonic_r2 over the rows (prompts) resampled with replacement: rows[i] =
  one prompt's (H, a, censored) per round. The rounds of one answer share its forks, so prompts,
  not rounds, are the independent draws. Resamples that leave one distinct H are skipped."""
  if len(rows) < 2:
    raise ValueError(f"a bootstrap over prompts needs >= 2 rows, got {len(rows)}")
  rng = np.random.default_rng(seed)
  cols = [[np.asarray(r[i]).ravel() for r in rows] for i in range(3)]
  vals = []
  for _ in range(n_boot):
    pick = rng.integers(0, len(rows), len(rows))
    H, a, c = (np.concatenate([col[j] for j in pick]) for col in cols)
    if np.unique(H).size > 1:
      vals.append(isotonic_r2(H, a, c.astype(bool), L, n_bins))
  lo, hi = np.nanpercentile(vals, [100 * alpha / 2, 100 * (1 - alpha / 2)])
  return float(lo), float(hi)


def _task_entry(H: np.ndarray, a: np.ndarray, L: int, n_bins: int, censored: np.ndarray) -> dict[str, Any]:
  """One entry of analyze(): H, a already checked by _as_records. With censored rounds, the bins'
  E[a] at their survival rates (survival_table) stand in for their mean a in the isotonic fit,
  the law R^2 and the floor ("target": which one was used)."""
  table = decile_table(H, a, n_bins)
  deciles = table.to_dict()
  y, surv = _binned_target(table, a, censored, L)
  if surv is not None:
    deciles.update(surv)
    table = dataclasses.replace(table, mean_a=y)       # the floor of copy_regime
  iso = isotonic_fit(table.centres, y, table.counts, decreasing=True)
  out: dict[str, Any] = {
      "n": int(H.size), "mean_a": float(a.mean()), "mean_H": float(H.mean()),
      "n_censored": int(censored.sum()), "target": "survival_a" if censored.any() else "mean_a",
      "deciles": deciles,
      "isotonic": {"fitted": iso, "r2": weighted_r2(y, iso, table.counts)},
      "fit": None, "model": None, "copy_regime": None, "error": None,
  }
  try:
    fit = fit_entropy_law(H, a, L, censored)
  except ValueError as e:
    out["error"] = str(e)
  else:
    pred = fit.expected(H)
    bin_mean = np.bincount(table.bin_of, pred, table.counts.size) / table.counts
    out["fit"] = fit.to_dict()
    out["model"] = {"bin_mean": bin_mean, "r2": weighted_r2(y, bin_mean, table.counts)}
    out["copy_regime"] = copy_regime(fit, table, L)
  return out


def _unpack(records: Sequence[Any], L: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """(H, a) or (H, a, censored) -> checked arrays, censored all False when absent."""
  H, a = _as_records(records[0], records[1], L)
  return H, a, _as_censored(records[2] if len(records) > 2 else None, a.size)


def analyze(records_by_task: Mapping[str, Sequence[Any]], L: int, n_bins: int = 10, *,
            pooled: bool = False) -> dict[str, Any]:
  """Per task: the fit, the decile table, its isotonic fit and R^2, the model's per-bin mean and
  R^2 against the decile means ("law R^2"), and the copy-regime numbers. JSON-serialisable
  (nan/inf -> None).

  records_by_task maps a task name to (H, a) or (H, a, censored) (end_censoring), each an array or
  a list of per-row arrays. A task
  whose MLE does not exist keeps its descriptive numbers, with "fit": None and the reason in
  "error", instead of failing the whole report. pooled=True adds "pooled": the same entry for
  every task's rounds together (the entropy range one task alone rarely spans), plus
  "common_slope": fit_common_slope's shared b1 with one intercept per task (a dict, or
  {"error": ...}), which task-to-task differences in mean acceptance cannot bias."""
  checked = {str(name): _unpack(recs, L) for name, recs in records_by_task.items()}
  result: dict[str, Any] = {"L": int(L), "n_bins": int(n_bins),
                            "tasks": {name: _task_entry(H, a, L, n_bins, cens)
                                      for name, (H, a, cens) in checked.items()}}
  if pooled and checked:
    H, a, cens = (np.concatenate([r[i] for r in checked.values()]) for i in range(3))
    result["pooled"] = {**_task_entry(H, a, L, n_bins, cens), "tasks": list(checked)}
    try:
      result["common_slope"] = fit_common_slope(checked, L).to_dict()
    except ValueError as e:
      result["common_slope"] = {"error": str(e)}
  return _clean(result)


@dataclasses.dataclass(frozen=True)
class CommonSlopeFit:
  """logit p = b0[task] - b1 H: one slope shared by every task, one intercept per task (MLE)."""
  b0: dict[str, float]
  se_b0: dict[str, float]
  b1: float
  se_b1: float
  loglik: float
  n: int
  L: int

  def to_dict(self) -> dict[str, Any]:
    return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


def fit_common_slope(records_by_task: Mapping[str, Sequence[Any]], L: int) -> CommonSlopeFit:
  """(H, a) or (H, a, censored) per task -> the survival model with a shared slope and per-task
  intercepts, by Newton's method on the
  concave log-likelihood (the same binomial form as fit_entropy_law's, design [one-hot task, -H]).

  Pooling tasks into one fit_entropy_law conflates the law within tasks with differences between
  them (a task with low H and long acceptance everywhere steepens the pooled slope); this fit
  estimates the within-task slope. Raises ValueError when a task accepted 0 or L in every round,
  when fewer than 2 records, or when Newton does not converge (e.g. separation)."""
  names, xs, ks, cs, groups = [], [], [], [], []
  for j, (name, recs) in enumerate(records_by_task.items()):
    H, a, cens = _unpack(recs, L)
    if np.all(a == 0) or np.all(a == L):
      raise ValueError(f"task {name!r}: every round accepted {int(a[0])}: its intercept has no finite MLE")
    names.append(str(name))
    xs.append(H)
    ks.append(a.astype(np.float64))
    cs.append(((a < L) & ~cens).astype(np.float64))
    groups.append(np.full(H.size, j))
  H, k, c, g = (np.concatenate(v) for v in (xs, ks, cs, groups))
  if np.ptp(H) == 0:
    raise ValueError("H is constant: b1 is not identifiable")
  mu, sd = float(H.mean()), float(H.std())
  X = np.concatenate([np.eye(len(names))[g], -((H - mu) / sd)[:, None]], 1)   # [n, T + 1]
  beta = np.zeros(X.shape[1])
  for _ in range(100):
    z = X @ beta
    lp, lq = _log_sigmoid(z), _log_sigmoid(-z)
    p, q = np.exp(lp), np.exp(lq)
    grad = X.T @ (k * q - c * p)
    info = X.T @ (X * ((k + c) * p * q)[:, None])
    step = np.linalg.solve(info + 1e-12 * np.eye(len(beta)), grad)
    beta = beta + step
    if np.abs(step).max() < 1e-10:
      break
  else:
    raise ValueError("common-slope MLE did not converge (tasks separated in H?)")
  # back to the original H: z = c_t - c1 (H - mu) / sd = (c_t + c1 mu / sd) - (c1 / sd) H
  T = len(names)
  J = np.eye(T + 1)
  J[:T, T] = mu / sd
  J[T, T] = 1.0 / sd
  b = J @ beta
  z = X @ beta
  lp, lq = _log_sigmoid(z), _log_sigmoid(-z)
  info = X.T @ (X * ((k + c) * np.exp(lp) * np.exp(lq))[:, None])
  cov = J @ np.linalg.inv(info) @ J.T
  se = np.sqrt(np.diag(cov))
  if not np.all(np.isfinite(b)) or not np.all(np.isfinite(se)):
    raise ValueError("common-slope MLE is not finite (tasks separated in H?)")
  return CommonSlopeFit(b0=dict(zip(names, b[:T].tolist())), se_b0=dict(zip(names, se[:T].tolist())),
                        b1=float(b[T]), se_b1=float(se[T]), loglik=float(np.sum(k * lp + c * lq)),
                        n=int(H.size), L=int(L))
