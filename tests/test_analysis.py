"""glance_jax.analysis: the entropy-law MLE recovers known parameters from records simulated under
the survival model; deciles and the isotonic fit are right; paired bootstrap intervals cover the
true value at about the nominal rate; plots write PNGs."""

import itertools
import json
import math

import numpy as np
import pytest

from glance_jax.analysis import (
    analyze, bootstrap_geomean_ratio, compare_methods, copy_regime, decile_table,
    expected_accepted, fit_entropy_law, geometric_mean, isotonic_fit, paired_bootstrap_diff,
    paired_bootstrap_ratio, weighted_r2)
from glance_jax.analysis.entropy_law import _neg_loglik

L = 15


def _sigmoid(z):
  return 1.0 / (1.0 + np.exp(-z))


def simulate(b0, b1, n, rng, L=L, p_fn=None):
  """H ~ Gamma(2, 0.5); a = consecutive survivals with p = sigmoid(b0 - b1 H), capped at L."""
  H = rng.gamma(2.0, 0.5, n)
  p = _sigmoid(b0 - b1 * H) if p_fn is None else p_fn(H)
  a = np.minimum(rng.geometric(1.0 - p) - 1, L)    # geometric counts trials to the first failure
  return H, a


def direct_loglik(b0, b1, H, a, L=L):
  """The pmf written out: P(a = k) = p^k (1 - p) for k < L, p^L for k = L."""
  p = _sigmoid(b0 - b1 * H)
  return float(np.sum(np.where(a < L, a * np.log(p) + np.log1p(-p), L * np.log(p))))


# ------------------------------------------------------------------------------------ the MLE

def test_mle_recovers_known_parameters():
  H, a = simulate(2.0, 1.5, 5000, np.random.default_rng(0))
  f = fit_entropy_law(H, a, L)
  assert f.n == 5000 and f.L == L
  assert abs(f.b0 - 2.0) < 3 * f.se_b0 and abs(f.b0 - 2.0) < 0.15
  assert abs(f.b1 - 1.5) < 3 * f.se_b1 and abs(f.b1 - 1.5) < 0.15
  assert 0 < f.se_b0 < 0.1 and 0 < f.se_b1 < 0.1
  assert f.loglik == pytest.approx(direct_loglik(f.b0, f.b1, H, a), rel=1e-10)


def test_mle_is_the_maximum_and_gradient_is_exact():
  from scipy.optimize import minimize
  rng = np.random.default_rng(1)
  H, a = simulate(1.0, 0.8, 800, rng)
  f = fit_entropy_law(H, a, L)
  res = minimize(lambda b: -direct_loglik(b[0], b[1], H, a), [f.b0 + 0.3, f.b1 - 0.3],
                 method="Nelder-Mead", options={"xatol": 1e-8, "fatol": 1e-10, "maxiter": 4000})
  assert -res.fun <= f.loglik + 1e-6
  assert res.x == pytest.approx([f.b0, f.b1], abs=1e-3)
  k, c = a.astype(float), (a < L).astype(float)
  for beta in ([0.3, 0.2], [2.0, 1.5], [-1.0, -0.5]):
    beta = np.array(beta)
    nll, grad, hess = _neg_loglik(beta, H, k, c)
    assert nll == pytest.approx(-direct_loglik(beta[0], beta[1], H, a), rel=1e-12)
    eps = 1e-6
    for j in range(2):
      e = np.eye(2)[j] * eps
      fd = (_neg_loglik(beta + e, H, k, c)[0] - _neg_loglik(beta - e, H, k, c)[0]) / (2 * eps)
      assert grad[j] == pytest.approx(fd, rel=1e-5, abs=1e-4)
      fd_g = (_neg_loglik(beta + e, H, k, c)[1] - _neg_loglik(beta - e, H, k, c)[1]) / (2 * eps)
      assert hess[:, j] == pytest.approx(fd_g, rel=1e-5, abs=1e-3)


def test_standard_errors_are_calibrated():
  """Across replicates the estimates scatter as the reported standard errors say."""
  rng = np.random.default_rng(2)
  fits = [fit_entropy_law(*simulate(2.0, 1.5, 1500, rng), L) for _ in range(60)]
  b0 = np.array([f.b0 for f in fits])
  b1 = np.array([f.b1 for f in fits])
  assert 0.7 < b0.std(ddof=1) / np.mean([f.se_b0 for f in fits]) < 1.4
  assert 0.7 < b1.std(ddof=1) / np.mean([f.se_b1 for f in fits]) < 1.4
  cover = np.mean([abs(f.b1 - 1.5) < 1.96 * f.se_b1 for f in fits])
  assert cover >= 0.85


def test_flat_p_gives_zero_slope():
  rng = np.random.default_rng(3)
  H, a = simulate(0, 0, 5000, rng, p_fn=lambda H: np.full_like(H, 0.7))
  f = fit_entropy_law(H, a, L)
  assert abs(f.b1) < 3 * f.se_b1
  assert abs(f.b0 - math.log(0.7 / 0.3)) < 3 * f.se_b0 + 0.05


def test_misspecified_data_gives_sane_fits():
  rng = np.random.default_rng(4)
  # a independent of H (uniform on 0..L): the slope's population value is 0
  H = rng.gamma(2.0, 0.5, 5000)
  f = fit_entropy_law(H, rng.integers(0, L + 1, 5000), L)
  assert np.isfinite([f.b0, f.b1, f.se_b0, f.se_b1]).all() and abs(f.b1) < 0.1
  # another link, p = exp(-0.8 H) -> 1 as H -> 0: the fit is still a decreasing law with the
  # right overall mean, and the lowest decile's excess over it is what copy_regime flags
  H, a = simulate(0, 0, 5000, rng, p_fn=lambda H: np.exp(-0.8 * H))
  out = analyze({"exp": (H, a)}, L)["tasks"]["exp"]
  assert out["error"] is None and out["fit"]["b1"] > 0
  assert np.average(out["model"]["bin_mean"], weights=out["deciles"]["counts"]) == pytest.approx(
      a.mean(), rel=0.1)
  assert out["model"]["r2"] > 0.6 and out["isotonic"]["r2"] > 0.95
  assert out["copy_regime"]["floor_resid_z"] > 4


def test_no_finite_mle_raises():
  rng = np.random.default_rng(5)
  H = rng.gamma(2.0, 0.5, 100)
  with pytest.raises(ValueError, match="accepted 0"):
    fit_entropy_law(H, np.zeros(100, int), L)
  with pytest.raises(ValueError, match="accepted L"):
    fit_entropy_law(H, np.full(100, L), L)
  with pytest.raises(ValueError, match="constant"):
    fit_entropy_law(np.ones(100), rng.integers(0, L + 1, 100), L)
  with pytest.raises(ValueError, match="separated"):   # low H all accept fully, high H all fail
    fit_entropy_law([0.1, 0.2, 0.3, 1.0, 2.0], [L, L, L, 0, 0], L)
  with pytest.raises(ValueError, match="separated"):   # quasi-complete: a mixed round on the edge
    fit_entropy_law([0.1, 0.5, 0.5, 2.0], [L, 3, L, 0], L)
  with pytest.raises(ValueError, match="integers"):
    fit_entropy_law(H, np.full(100, L + 1), L)
  with pytest.raises(ValueError, match="length"):
    fit_entropy_law(H, np.zeros(99, int), L)
  f = fit_entropy_law([0.1, 0.5, 1.0, 2.0], [L, 3, 5, 0], L)   # successes and failures overlap
  assert np.isfinite([f.b0, f.b1]).all()
  # analyze keeps the descriptive numbers of a task without an MLE
  out = analyze({"zeros": (H, np.zeros(100, int))}, L)["tasks"]["zeros"]
  assert out["fit"] is None and "accepted 0" in out["error"] and out["deciles"]["counts"]


def test_expected_accepted_matches_monte_carlo():
  rng = np.random.default_rng(6)
  b0, b1, n = 2.0, 1.5, 200_000
  for h in (0.0, 0.5, 1.5, 3.0):
    p = _sigmoid(b0 - b1 * h)
    a = np.minimum(rng.geometric(1 - p, n) - 1, L)
    e = float(expected_accepted(b0, b1, h, L))
    assert abs(a.mean() - e) < 4 * a.std() / math.sqrt(n) + 1e-9
    assert e == pytest.approx(p * (1 - p ** L) / (1 - p), rel=1e-12)
  assert np.shape(expected_accepted(b0, b1, 0.5, L)) == ()
  assert expected_accepted(b0, b1, np.zeros((2, 3)), L).shape == (2, 3)
  assert float(expected_accepted(60.0, 0.0, 0.0, L)) == pytest.approx(L)
  assert float(expected_accepted(-60.0, 0.0, 0.0, L)) == pytest.approx(0.0, abs=1e-20)


# ------------------------------------------------------------------------- deciles, isotonic

def test_decile_table():
  rng = np.random.default_rng(7)
  H, a = simulate(2.0, 1.5, 5000, rng)
  t = decile_table(H, a)
  assert t.counts.tolist() == [500] * 10
  assert np.all(np.diff(t.centres) > 0) and np.all(t.h_hi[:-1] <= t.h_lo[1:])
  for j in range(10):
    sel = t.bin_of == j
    assert t.mean_a[j] == pytest.approx(a[sel].mean())
    assert t.centres[j] == pytest.approx(H[sel].mean())
    assert t.sem_a[j] == pytest.approx(a[sel].std(ddof=1) / math.sqrt(sel.sum()))
  # ties: 40% of rounds at H = 0 all land in one bin, and no H value straddles two bins
  H2 = np.where(rng.random(5000) < 0.4, 0.0, H)
  t2 = decile_table(H2, a)
  assert t2.counts.sum() == 5000 and len(t2.counts) < 10
  assert t2.h_lo[0] == t2.h_hi[0] == 0.0 and t2.counts[0] == np.sum(H2 == 0)
  assert np.all(t2.h_hi[:-1] < t2.h_lo[1:])


def brute_isotonic(y, w, decreasing):
  """Minimum weighted SSE over all splits into contiguous blocks whose means are monotone."""
  n, best, best_fit = len(y), math.inf, None
  for cuts in itertools.product([0, 1], repeat=n - 1):
    bounds = [0] + [i + 1 for i, c in enumerate(cuts) if c] + [n]
    means = [np.average(y[s:e], weights=w[s:e]) for s, e in zip(bounds, bounds[1:])]
    d = np.diff(means)
    if np.any(d > 1e-12) if decreasing else np.any(d < -1e-12):
      continue
    fit = np.concatenate([np.full(e - s, m) for (s, e), m in zip(zip(bounds, bounds[1:]), means)])
    sse = float(np.sum(w * (y - fit) ** 2))
    if sse < best - 1e-12:
      best, best_fit = sse, fit
  return best_fit


def test_isotonic_matches_brute_force():
  rng = np.random.default_rng(8)
  for trial in range(200):
    n = int(rng.integers(1, 8))
    x = rng.permutation(n).astype(float)            # distinct x, shuffled input order
    y = rng.integers(0, 5, n).astype(float) if trial % 2 else rng.normal(size=n)
    w = rng.uniform(0.2, 3.0, n)
    for dec in (True, False):
      fit = isotonic_fit(x, y, w, decreasing=dec)
      order = np.argsort(x)
      assert fit[order] == pytest.approx(brute_isotonic(y[order], w[order], dec), abs=1e-9)
      d = np.diff(fit[order])
      assert np.all(d <= 1e-12) if dec else np.all(d >= -1e-12)
      r2 = weighted_r2(y, fit, w)
      assert math.isnan(r2) or -1e-12 <= r2 <= 1 + 1e-12


def test_isotonic_ties_and_scipy():
  # tied x share one value (pooled first)
  fit = isotonic_fit([0, 1, 1, 2], [3.0, 1.0, 2.0, 0.5], [1, 1, 1, 1])
  assert fit[1] == fit[2] == pytest.approx(1.5) and fit[0] == 3.0 and fit[3] == 0.5
  assert weighted_r2([2.0, 2.0], [2.0, 2.0]) == 1.0
  scipy_iso = getattr(pytest.importorskip("scipy.optimize"), "isotonic_regression", None)
  if scipy_iso is None:
    pytest.skip("scipy.optimize.isotonic_regression needs scipy >= 1.12")
  rng = np.random.default_rng(9)
  y, w = rng.normal(size=50), rng.uniform(0.5, 2, 50)
  ref = scipy_iso(y, weights=w, increasing=False).x
  assert isotonic_fit(np.arange(50), y, w) == pytest.approx(ref, abs=1e-10)


# ------------------------------------------------------------------ copy regime, the report

def test_copy_regime_and_analyze():
  rng = np.random.default_rng(10)
  records = {"law": simulate(2.0, 1.5, 3000, rng), "steep": simulate(3.0, 2.5, 3000, rng)}
  an = analyze(records, L)
  json.dumps(an, allow_nan=False)
  assert an["L"] == L and set(an["tasks"]) == {"law", "steep"}
  t = an["tasks"]["law"]
  f = fit_entropy_law(*records["law"], L)
  c = copy_regime(f, decile_table(*records["law"]), L)
  assert c == pytest.approx(t["copy_regime"])
  p0 = _sigmoid(f.b0)
  assert c["cap_exp_b0"] == pytest.approx(math.exp(f.b0))
  assert c["cap_L"] == pytest.approx(math.exp(f.b0) * (1 - p0 ** L))
  assert c["cap_L"] <= min(c["cap_exp_b0"], L)
  assert c["floor_over_cap_L"] == pytest.approx(c["floor_mean"] / c["cap_L"])
  assert c["floor_mean"] == pytest.approx(t["deciles"]["mean_a"][0])
  # under the law itself the floor sits at the model's prediction, below its cap
  assert abs(c["floor_resid_z"]) < 4 and c["floor_over_cap_L"] < 1
  assert 0 <= t["isotonic"]["r2"] <= 1 and t["model"]["r2"] > 0.95


# ------------------------------------------------------------------------------- bootstrap

def test_bootstrap_point_values():
  b, m = np.array([2.0, 4.0, 6.0]), np.array([1.0, 1.0, 2.0])
  point, lo, hi = paired_bootstrap_ratio(b, m, n_boot=200)
  assert point == pytest.approx(3.0) and lo <= point <= hi
  assert paired_bootstrap_diff(b, m, n_boot=200)[0] == pytest.approx(8 / 3)
  assert geometric_mean([1.0, 4.0]) == pytest.approx(2.0)
  with pytest.raises(ValueError):
    geometric_mean([1.0, 0.0])
  cmp = compare_methods({"ar": b, "ngram": b / 1.5, "glance": m}, "glance", n_boot=200)
  assert cmp["vs_base"]["other"] == "ar" and cmp["vs_base"]["speedup"] == pytest.approx(3.0)
  assert cmp["vs_best_other"]["other"] == "ngram"
  assert cmp["vs_best_other"]["speedup"] == pytest.approx(2.0)


def _coverage_bounds(nominal, reps):
  """Loose binomial band around the nominal rate (the percentile bootstrap runs a bit short)."""
  sd = math.sqrt(nominal * (1 - nominal) / reps)
  return nominal - 4.5 * sd, min(1.0, nominal + 3 * sd)


def test_bootstrap_ratio_coverage():
  rng = np.random.default_rng(11)
  reps, hits = 200, 0
  for r in range(reps):
    base = rng.lognormal(4.0, 0.6, 100)                 # prompt difficulty shared by both
    method = base / 2.5 * rng.gamma(10.0, 0.1, 100)     # true ratio of mean times: 2.5
    _, lo, hi = paired_bootstrap_ratio(base, method, n_boot=400, seed=r)
    hits += lo <= 2.5 <= hi
  lo_b, hi_b = _coverage_bounds(0.95, reps)
  assert lo_b <= hits / reps <= hi_b, hits / reps


def test_bootstrap_diff_coverage():
  rng = np.random.default_rng(12)
  reps, hits = 200, 0
  for r in range(reps):
    x = rng.lognormal(1.0, 0.5, 80)
    y = x - 0.3 + (rng.exponential(1.0, 80) - 1.0)      # E[x - y] = 0.3, skewed noise
    _, lo, hi = paired_bootstrap_diff(x, y, n_boot=400, seed=r)
    hits += lo <= 0.3 <= hi
  lo_b, hi_b = _coverage_bounds(0.95, reps)
  assert lo_b <= hits / reps <= hi_b, hits / reps


def test_bootstrap_geomean_coverage():
  rng = np.random.default_rng(13)
  true = {"a": 2.0, "b": 3.0, "c": 1.5}
  g = geometric_mean(list(true.values()))
  reps, hits = 150, 0
  for r in range(reps):
    pairs = {}
    for t, s in true.items():
      base = rng.lognormal(3.0, 0.5, 60)
      pairs[t] = (base, base / s * rng.gamma(8.0, 1 / 8.0, 60))
    point, lo, hi = bootstrap_geomean_ratio(pairs, n_boot=300, seed=r)
    assert lo <= point <= hi
    hits += lo <= g <= hi
  lo_b, hi_b = _coverage_bounds(0.95, reps)
  assert lo_b <= hits / reps <= hi_b, hits / reps


# ----------------------------------------------------------------------------------- plots

def test_plots_write_pngs(tmp_path):
  pytest.importorskip("matplotlib")
  from glance_jax.analysis import plot_cap_vs_floor, plot_deciles, plot_speedup_vs_budget
  rng = np.random.default_rng(14)
  an = analyze({"law": simulate(2.0, 1.5, 2000, rng), "steep": simulate(3.0, 2.5, 2000, rng),
                "zeros": (rng.gamma(2.0, 0.5, 50), np.zeros(50, int))}, L)
  rows = [{"task": t, "N": n, "speedup": s * math.log2(n), "lo": s * math.log2(n) - 0.1,
           "hi": s * math.log2(n) + 0.1} for t, s in (("a", 0.5), ("geomean", 0.6))
          for n in (15, 31, 63)]
  paths = [plot_deciles(an, tmp_path / "deciles.png"),
           plot_deciles(an, tmp_path / "deciles_idx.png", x="decile"),
           plot_cap_vs_floor(an, tmp_path / "cap.png"),
           plot_speedup_vs_budget(rows, tmp_path / "sub" / "speedup.png")]
  for p in paths:
    data = p.read_bytes()
    assert len(data) > 1000 and data[:8] == b"\x89PNG\r\n\x1a\n"


def test_end_censoring_cuts_the_round_that_reached_the_end():
  from glance_jax.analysis import end_censoring
  a, c = end_censoring([3, 15, 4], 1 + 4 + 16 + 5)          # every round emitted a + 1: none cut
  assert a.tolist() == [3, 15, 4] and not c.any()
  a, c = end_censoring([3, 15, 4], 1 + 4 + 16 + 3)          # the last stopped after 3 accepted tokens
  assert a.tolist() == [3, 15, 3] and c.tolist() == [False, False, True]
  a, c = end_censoring([], 1)
  assert a.size == 0 and c.size == 0
  with pytest.raises(ValueError, match="30 tokens cannot come from"):
    end_censoring([3, 4], 30)


def _censored_law(b0, b1, n, rng):
  """Rounds under the law whose answer ends after r more tokens; r is short where H is low (rounds
  late in an answer start at certain words), so counting the ends as failures flattens the law."""
  H = rng.gamma(2.0, 0.5, n)
  p = 1.0 / (1.0 + np.exp(-(b0 - b1 * H)))
  g = np.minimum(rng.geometric(1.0 - p) - 1, L)                # survivals had the answer gone on
  r = np.where(H < np.median(H), rng.integers(0, 6, n), L)      # tokens left in the answer
  return H, np.minimum(g, r), (g >= r) & (r < L)


def test_censored_fit_recovers_the_law_that_naive_failures_hide():
  rng = np.random.default_rng(3)
  H, a, cens = _censored_law(2.0, 1.5, 6000, rng)
  f = fit_entropy_law(H, a, L, censored=cens)
  assert abs(f.b1 - 1.5) < 4 * f.se_b1 and abs(f.b0 - 2.0) < 4 * f.se_b0
  naive = fit_entropy_law(H, a, L)
  assert naive.b1 < 1.5 - 4 * naive.se_b1                      # the bias the censoring removes
  out = analyze({"t": (H, a, cens)}, L)["tasks"]["t"]
  assert out["target"] == "survival_a" and out["n_censored"] == int(cens.sum())
  d = out["deciles"]
  assert len(d["survival_a"]) == len(d["mean_a"]) and sum(d["censored"]) == int(cens.sum())
  assert d["survival_a"][0] > d["mean_a"][0]                    # the low-H bins lose their ends
  assert out["isotonic"]["r2"] >= 0.8 and out["fit"]["b1"] == pytest.approx(f.b1)
  with pytest.raises(ValueError, match="censored has 3 entries"):
    fit_entropy_law(H, a, L, censored=[True, False, True])
  plain = analyze({"t": (H, a)}, L)["tasks"]["t"]
  assert plain["target"] == "mean_a" and "survival_a" not in plain["deciles"]


def test_isotonic_r2_alone_and_its_interval_over_prompts():
  """isotonic_r2 is analyze's figure (with and without censoring); its bootstrap interval over
  prompts holds the point, narrows with more prompts, and moves with the law's strength: a law that
  holds gives an interval near 1, a flat p (no law) one far below it."""
  from glance_jax.analysis import bootstrap_isotonic_r2, isotonic_r2
  rng = np.random.default_rng(5)
  H, a, cens = _censored_law(2.0, 1.5, 3000, rng)
  assert isotonic_r2(H, a, cens, L) == pytest.approx(analyze({"t": (H, a, cens)}, L)["tasks"]["t"]["isotonic"]["r2"])
  assert isotonic_r2(H, a, None, L) == pytest.approx(analyze({"t": (H, a)}, L)["tasks"]["t"]["isotonic"]["r2"])

  def prompts(n, p_fn=None):
    rows = []
    for _ in range(n):
      h, x = simulate(2.0, 1.5, 12, rng, p_fn=p_fn)
      rows.append((h, x, np.zeros(x.size, bool)))
    return rows

  rows = prompts(64)
  point = isotonic_r2(*(np.concatenate([r[i] for r in rows]) for i in range(3)), L)
  lo, hi = bootstrap_isotonic_r2(rows, L, n_boot=300)
  assert lo <= point <= hi and hi - lo < 0.3 and lo > 0.5
  lo4, hi4 = bootstrap_isotonic_r2(rows * 4, L, n_boot=300)          # four times the prompts
  assert hi4 - lo4 < hi - lo
  flat_lo, flat_hi = bootstrap_isotonic_r2(prompts(64, p_fn=lambda h: np.full(h.shape, 0.8)), L, n_boot=300)
  assert flat_hi < lo
  with pytest.raises(ValueError, match=">= 2 rows"):
    bootstrap_isotonic_r2(rows[:1], L)
