"""E[A] calibration (decode/calibrate.py): the isotonic fit, the decile report, reading the records
back from a bench JSON, and the cost table's ngram widths."""

import itertools
import json

import numpy as np
import pytest

from glance_jax.decode import budget, calibrate


def _isotonic_brute(y):
  """Least-squares non-decreasing fit by exhaustive block partitions (small n only)."""
  n, best = len(y), None
  for cuts in itertools.product([0, 1], repeat=n - 1):
    bounds = [0] + [i + 1 for i, c in enumerate(cuts) if c] + [n]
    fit = np.concatenate([np.full(b - a, np.mean(y[a:b])) for a, b in zip(bounds, bounds[1:])])
    if np.all(np.diff(fit) >= -1e-12):
      err = np.sum((fit - y) ** 2)
      if best is None or err < best[0] - 1e-12:
        best = (err, fit)
  return best[1]


@pytest.mark.parametrize("seed", range(5))
def test_pav_is_the_least_squares_monotone_fit(seed):
  rng = np.random.default_rng(seed)
  x = np.sort(rng.uniform(0, 15, 9))
  y = x * 0.5 + rng.normal(0, 3, 9)
  xs, ys = calibrate.pav(x, y)
  assert np.all(np.diff(xs) > 0) and np.all(np.diff(ys) >= 0)
  np.testing.assert_allclose(calibrate.apply((xs, ys), x)[[0, -1]], _isotonic_brute(y)[[0, -1]], atol=1e-9)
  # each knot is a pooled block's (mean x, mean y): the brute fit takes those values on the block
  fitted = _isotonic_brute(y)
  for ky in ys:
    assert np.any(np.isclose(fitted, ky))


def test_pav_pools_ties_and_violators():
  xs, ys = calibrate.pav([1, 2, 3, 4, 4], [1, 3, 2, 5, 7])
  assert xs == (1.0, 2.5, 4.0) and ys == (1.0, 2.5, 6.0)
  with pytest.raises(ValueError, match="pav needs"):
    calibrate.pav([], [])


def test_deciles_before_and_after():
  rng = np.random.default_rng(0)
  pred = rng.uniform(0, 15, 400)
  obs = 0.5 * pred + rng.normal(0, 0.5, 400)         # the raw prediction is twice too high
  knots = calibrate.pav(pred, obs)
  rows = calibrate.deciles(pred, obs, knots)
  assert len(rows) == 10 and sum(r["n"] for r in rows) == 400
  raw = np.mean([abs(r["predicted"] - r["observed"]) for r in rows])
  cal = np.mean([abs(r["calibrated"] - r["observed"]) for r in rows])
  assert cal < 0.2 < 2.0 < raw
  assert calibrate.mean_abs_error(pred, obs, knots) < calibrate.mean_abs_error(pred, obs)


def test_pairs_from_bench(tmp_path):
  pp = {"id": "a", "predicted": [[5.0, 7.0], [3.0, 4.0]], "observed": [[4, -1], [2, 3]]}
  data = {"tasks": {"t": {"methods": {"glance-auto": {"per_prompt": [pp]}}}}}
  path = tmp_path / "bench.json"
  path.write_text(json.dumps(data))
  p, o = calibrate.pairs_from_bench(str(path), "glance-auto")
  assert p.tolist() == [5.0, 3.0, 4.0] and o.tolist() == [4.0, 2.0, 3.0]
  with pytest.raises(ValueError, match="no method 'glance-63'"):
    calibrate.pairs_from_bench(str(path), "glance-63")
  del pp["predicted"]
  path.write_text(json.dumps(data))
  with pytest.raises(ValueError, match="has no 'predicted'"):
    calibrate.pairs_from_bench(str(path), "glance-auto")


def test_cost_table_ngram_widths(tmp_path):
  good = {"schema": budget.COST_SCHEMA, "t_over_ar": {"0": 2.0, "15": 5.0},
          "ngram_t_over_ar": {"0": 1.1, "3": 2.0}}
  path = tmp_path / "t.json"
  path.write_text(json.dumps(good))
  rc = budget.read_round_cost(path)
  assert rc.costs((0, 3), method="ngram") == (1.1, 2.0)
  with pytest.raises(ValueError, match=r"'ngram_t_over_ar' has no width \[7\]"):
    rc.costs((0, 3, 7), method="ngram")
  good["ngram_t_over_ar"] = {"3": 2.0}
  path.write_text(json.dumps(good))
  with pytest.raises(ValueError, match=r"t.json: 'ngram_t_over_ar' needs width 0"):
    budget.read_round_cost(path)
  shipped = budget.default_round_cost()
  assert shipped.costs(budget.ngram_widths(15), method="ngram") and shipped.calibration


def test_ngram_width_prefers_ar_until_proposals_pay():
  import jax.numpy as jnp
  widths, cost = (0, 3, 7, 15), (1.0, 2.0, 2.5, 4.0)
  stats = budget.ngram_prior(2, 3)
  live = jnp.array([True, True])
  k = jnp.array([15, 15])
  # no match anywhere -> AR step
  assert int(budget.ngram_width(stats, jnp.array([0, 0]), k, live, widths, cost)) == 0
  # a length-3 match whose past proposals were all accepted (q ~ 1) -> the widest width pays
  sure = stats.at[:, 2].set(jnp.array([100.0, 100.0]))
  assert int(budget.ngram_width(sure, jnp.array([3, 3]), k, live, widths, cost)) == 3
  # after a run of rejections at match length 1 the estimate drops and the row stops proposing
  s = stats
  for _ in range(5):
    s = budget.ngram_update(s, jnp.array([1, 1]), k, jnp.int32(3), jnp.array([0, 0]), live)
  assert float(s[0, 0, 0] / s[0, 0, 1]) < 0.2
  assert int(budget.ngram_width(s, jnp.array([1, 1]), k, live, widths, cost)) == 0
  # rows that are done, or rounds that verified nothing, leave the counts alone
  same = budget.ngram_update(stats, jnp.array([1, 1]), k, jnp.int32(0), jnp.array([0, 0]), live)
  np.testing.assert_array_equal(same, stats)


def test_ngram_can_pay_bounds_the_choice():
  import jax.numpy as jnp
  widths, live = (0, 3, 7, 15), jnp.array([True, True])
  stats = budget.ngram_prior(2, 3)
  assert not bool(budget.ngram_can_pay(stats, live, 15, widths, (1.0, 4.2, 4.9, 6.6)))   # q = 1/2
  assert bool(budget.ngram_can_pay(stats, live, 15, widths, (1.0, 1.1, 1.2, 1.3)))
  sure = stats.at[0, 1].set(jnp.array([50.0, 50.0]))                    # row 0, n = 2: q = 1
  assert bool(budget.ngram_can_pay(sure, live, 15, widths, (1.0, 4.2, 4.9, 6.6)))


def test_auto_set_keeps_only_widths_that_could_beat_an_ar_step():
  """A width stays only if a round accepting everything (1 + min(w, L) tokens) costs fewer AR steps
  than it emits; the loop builds the widest kept tree. Forced widths are added, never dropped."""
  import dataclasses
  shipped_like = budget.RoundCost({0: 5.66, 15: 9.87, 31: 13.26, 63: 19.76})
  assert shipped_like.auto_set(63, 15) == (15, 31)          # 63: 16 tokens < 19.76 AR steps
  assert shipped_like.auto_set(31, 15) == (15, 31)
  assert budget.RoundCost({0: 0.9, 15: 2.0, 31: 3.0, 63: 4.0}).auto_set(63, 15) == (0, 15, 31, 63)
  # a table where no width can pay keeps the one whose best case is best, alone
  assert budget.RoundCost({0: 2.0, 15: 40.0, 31: 50.0, 63: 60.0}).auto_set(63, 15) == (0,)
  assert budget.RoundCost({0: 50.0, 15: 20.0, 31: 50.0, 63: 60.0}).auto_set(63, 15) == (15,)
  forced = dataclasses.replace(shipped_like, force=63)
  assert forced.auto_set(63, 15) == (15, 31, 63)
  assert forced.costs((15, 31, 63)) == (budget.FORCE_COST, budget.FORCE_COST, 1.0)
  with pytest.raises(ValueError, match=r"'t_over_ar' has no width \[31\]"):
    budget.RoundCost({0: 1.0, 15: 2.0, 63: 3.0}).auto_set(63, 15)
  with pytest.raises(ValueError, match="forced width 7"):
    dataclasses.replace(shipped_like, force=7).auto_set(63, 15)


def test_per_width_calibration_maps_each_width_by_its_own_fit(tmp_path):
  """A table's calibration.per_width knots map each width's E[A] by that width's fit (the pooled map
  for widths without one); identical maps give the pooled result; bad knots name their key."""
  import jax.numpy as jnp
  pooled = {"predicted": [0.0, 20.0], "observed": [0.0, 20.0]}
  data = {"schema": budget.COST_SCHEMA, "t_over_ar": {"0": 2.0, "15": 4.0, "31": 5.0, "63": 9.0},
          "calibration": {**pooled, "per_width": {"31": {"predicted": [0.0, 20.0], "observed": [0.0, 10.0]}}}}
  path = tmp_path / "t.json"
  path.write_text(json.dumps(data))
  rc = budget.read_round_cost(path)
  knots = rc.knots((0, 15, 31))
  assert knots[1] == knots[0] == ((0.0, 20.0), (0.0, 20.0)) and knots[2] == ((0.0, 20.0), (0.0, 10.0))
  scores = jnp.log(jnp.full((1, 31), 0.5))                                # E[A](w) raw = w / 2
  ea = budget.expected_accepted(scores, (0, 15, 31), knots)
  np.testing.assert_allclose(np.asarray(ea), [[0.0, 7.5, 7.75]], rtol=1e-6)
  same = budget.expected_accepted(scores, (0, 15, 31), (knots[0],) * 3)
  np.testing.assert_allclose(np.asarray(same), np.asarray(budget.expected_accepted(scores, (0, 15, 31), knots[0])))
  # the per-width map changes the choice: raw / pooled prefer 31 at these costs, its own fit does not
  live = jnp.array([True])
  assert int(budget.best_width(scores, live, (15, 31), (4.0, 5.0), knots[0])) == 1
  assert int(budget.best_width(scores, live, (15, 31), (4.0, 5.0), knots[1:])) == 0
  data["calibration"]["per_width"]["31"] = {"predicted": [0.0, 20.0], "observed": [5.0, 1.0]}
  path.write_text(json.dumps(data))
  with pytest.raises(ValueError, match=r"t.json: 'calibration.per_width.31' must hold"):
    budget.read_round_cost(path)


def test_fit_per_width_uses_only_that_widths_verified_rounds():
  import types
  pred = np.array([[3.0, 5.0], [6.0, 9.0], [8.0, 12.0]])
  obs = np.array([[2, 4], [5, -1], [7, 9]])                              # -1: width 31 not verified
  res = [types.SimpleNamespace(predicted=[pred], observed=[obs], record_widths=(15, 31))]
  p15, o15 = calibrate.pairs_from_results(res, 15)
  p31, o31 = calibrate.pairs_from_results(res, 31)
  np.testing.assert_array_equal(p15, [3.0, 6.0, 8.0]) and np.testing.assert_array_equal(o15, [2, 5, 7])
  np.testing.assert_array_equal(p31, [5.0, 12.0]) and np.testing.assert_array_equal(o31, [4, 9])
  fits = calibrate.fit_per_width(res)
  assert fits["31"]["rounds"] == 2 and fits["31"]["observed"] == [4.0, 9.0]
  assert fits["15"]["predicted"] == [3.0, 6.0, 8.0]


def test_calibration_train_prompts_come_from_the_shipped_suite(tmp_path):
  """The calibration split renders train records from the suite the shipped testbed was built with
  (v2 since issue 14), past the records the head was trained on."""
  from glance_jax.data.records import read_task_file
  from glance_jax.decode.calibrate import testbed_prompts
  from glance_jax.qwen3_vl.inputs import Processor
  from glance_jax.testbed import paths, suites
  from glance_jax.testbed.build import TRAIN_PER_TASK
  s = suites.get(suites.read_version(paths.SHIPPED))
  prompts = testbed_prompts("train", 1, Processor.from_pretrained(str(paths.TARGET)), str(tmp_path))
  assert len(prompts) == len(s.TASKS)
  for task in s.TASKS:
    (rec,) = read_task_file(tmp_path / f"{task}_train.jsonl", on_error="raise")
    image, question, answer = s.render(task, "train", 2 * TRAIN_PER_TASK)
    assert (rec.prompt, rec.answers[0]) == (question, answer), task
