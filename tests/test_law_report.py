"""Entropy-law reporting on records simulated where the truth is known: the pooled entry and the
common-slope fit recover the shared law (and the common slope is not fooled by task-to-task
differences that bias a naive pooled slope); law_checks passes a law, fails a flat p and calls a
narrow H "not spread"; slope_difference detects a steeper task; the markdown tables are complete."""

import json
import math

import numpy as np
import pytest

from glance_jax.analysis import (
    analyze, decile_markdown, fit_common_slope, fit_entropy_law, law_checks, slope_difference,
    summary_markdown)

L = 15


def simulate(b0, b1, n, rng, H=None, shape=2.0, scale=0.5):
  """a = consecutive survivals with p = sigmoid(b0 - b1 H), capped at L; H ~ Gamma unless given."""
  H = rng.gamma(shape, scale, n) if H is None else H
  p = 1.0 / (1.0 + np.exp(-(b0 - b1 * H)))
  return H, np.minimum(rng.geometric(1.0 - p) - 1, L)


def test_pooled_entry_recovers_a_shared_law():
  rng = np.random.default_rng(0)
  recs = {"low": simulate(2.5, 1.2, 3000, rng, shape=1.0, scale=0.3),
          "high": simulate(2.5, 1.2, 3000, rng, shape=4.0, scale=0.5)}
  an = analyze(recs, L, pooled=True)
  json.dumps(an, allow_nan=False)
  pooled = an["pooled"]
  assert pooled["n"] == 6000 and pooled["tasks"] == ["low", "high"]
  f = pooled["fit"]
  assert abs(f["b1"] - 1.2) < 3 * f["se_b1"] and abs(f["b0"] - 2.5) < 3 * f["se_b0"]
  assert pooled["model"]["r2"] > 0.95 and pooled["isotonic"]["r2"] > 0.95
  both = fit_entropy_law(np.concatenate([recs["low"][0], recs["high"][0]]),
                         np.concatenate([recs["low"][1], recs["high"][1]]), L)
  assert f["b1"] == pytest.approx(both.b1)
  assert "pooled" not in analyze(recs, L)           # off by default: analyze's old output


def test_common_slope_is_unbiased_where_naive_pooling_is_not():
  """Tasks with the same slope but different intercepts, the low-H task also accepting more: the
  naive pooled slope comes out steeper, the common slope recovers b1 (and each intercept)."""
  rng = np.random.default_rng(1)
  fits = []
  for rep in range(20):
    recs = {"grounded": simulate(3.5, 1.0, 1500, rng, shape=1.0, scale=0.3),
            "open": simulate(1.0, 1.0, 1500, rng, shape=4.0, scale=0.5)}
    fits.append((fit_common_slope(recs, L), analyze(recs, L, pooled=True)["pooled"]["fit"]))
  common = np.array([c.b1 for c, _ in fits])
  naive = np.array([p["b1"] for _, p in fits])
  se = np.mean([c.se_b1 for c, _ in fits])
  assert abs(common.mean() - 1.0) < 3 * se / math.sqrt(len(fits)) + 0.02
  assert 0.6 < common.std(ddof=1) / se < 1.5                        # the se is calibrated
  assert naive.mean() > 1.3                                          # the bias it avoids
  c = fits[0][0]
  assert abs(c.b0["grounded"] - 3.5) < 4 * c.se_b0["grounded"] and abs(c.b0["open"] - 1.0) < 4 * c.se_b0["open"]
  with pytest.raises(ValueError, match="task 'full': every round accepted 15"):
    fit_common_slope({"full": (np.linspace(0, 1, 10), np.full(10, L)), "x": recs["open"]}, L)


def test_law_checks_verdicts():
  rng = np.random.default_rng(2)
  law = analyze({"law": simulate(2.0, 1.5, 3000, rng)}, L)["tasks"]["law"]
  c = law_checks(law)
  assert c["spreads"] and c["slope_positive"] and c["monotone"] and c["passes"] is True
  assert c["z_b1"] == pytest.approx(law["fit"]["b1"] / law["fit"]["se_b1"])
  assert c["cap_exp_b0"] == pytest.approx(math.exp(law["fit"]["b0"]))
  assert c["floor_mean"] == law["deciles"]["mean_a"][0]
  H = rng.gamma(2.0, 0.5, 3000)
  flat = analyze({"flat": simulate(1.0, 0.0, 3000, rng, H=H)}, L)["tasks"]["flat"]
  c = law_checks(flat)
  assert c["spreads"] and not c["slope_positive"] and c["passes"] is False
  narrow = analyze({"narrow": simulate(2.0, 1.5, 3000, rng, H=rng.uniform(0, 0.1, 3000))}, L)["tasks"]["narrow"]
  assert law_checks(narrow)["spreads"] is False and law_checks(narrow)["passes"] is None


def test_slope_difference_detects_the_steeper_task():
  rng = np.random.default_rng(3)
  an = analyze({"steep": simulate(3.0, 2.5, 3000, rng), "shallow": simulate(3.0, 1.0, 3000, rng),
                "same": simulate(3.0, 1.0, 3000, rng)}, L)["tasks"]
  d = slope_difference(an["steep"], an["shallow"])
  assert d["diff"] == pytest.approx(an["steep"]["fit"]["b1"] - an["shallow"]["fit"]["b1"])
  assert d["z"] > 5 and abs(d["diff"] - 1.5) < 3 * d["se"]
  assert abs(slope_difference(an["same"], an["shallow"])["z"]) < 3.5
  assert math.isnan(slope_difference({"fit": None}, an["same"])["z"])


def test_markdown_tables():
  rng = np.random.default_rng(4)
  an = analyze({"a": simulate(2.0, 1.5, 800, rng), "b": simulate(1.0, 1.0, 800, rng),
                "all15": (rng.gamma(2, 0.5, 50), np.full(50, L))}, L, pooled=True)
  md = summary_markdown(an)
  rows = [r for r in md.splitlines() if r.startswith("| ") and not r.startswith("| task")]
  assert [r.split(" | ")[0][2:] for r in rows] == ["a", "b", "all15", "all tasks (pooled)"]
  assert "no fit: every round accepted L = 15" in md and "Common slope over tasks: no fit" in md
  dm = decile_markdown(an["tasks"]["a"])
  assert len(dm.strip().splitlines()) == 2 + len(an["tasks"]["a"]["deciles"]["centres"])
