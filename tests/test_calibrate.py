"""E[A] calibration (bench/calibrate.py): the isotonic fit, the decile report, reading the records
back from a bench JSON, and the cost table's ngram widths."""

import itertools
import types
import json

import numpy as np
import pytest

from glance_jax.bench import auto_set, calibrate
from glance_jax.decode import policies


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
  good = {"schema": policies.COST_SCHEMA, "t_over_ar": {"0": 2.0, "15": 5.0},
          "ngram_t_over_ar": {"0": 1.1, "3": 2.0}}
  path = tmp_path / "t.json"
  path.write_text(json.dumps(good))
  rc = policies.read_round_cost(path)
  assert rc.costs((0, 3), method="ngram") == (1.1, 2.0)
  with pytest.raises(ValueError, match=r"'ngram_t_over_ar' has no width \[7\]"):
    rc.costs((0, 3, 7), method="ngram")
  good["ngram_t_over_ar"] = {"3": 2.0}
  path.write_text(json.dumps(good))
  with pytest.raises(ValueError, match=r"t.json: 'ngram_t_over_ar' needs width 0"):
    policies.read_round_cost(path)
  shipped = policies.default_round_cost()
  assert shipped.costs(policies.ngram_widths(15), method="ngram") and shipped.calibration


def test_ngram_width_prefers_ar_until_proposals_pay():
  import jax.numpy as jnp
  widths, cost = (0, 3, 7, 15), (1.0, 2.0, 2.5, 4.0)
  stats = policies.ngram_prior(2, 3)
  live = jnp.array([True, True])
  k = jnp.array([15, 15])
  # no match anywhere -> AR step
  assert int(policies.ngram_width(stats, jnp.array([0, 0]), k, live, widths, cost)) == 0
  # a length-3 match whose past proposals were all accepted (q ~ 1) -> the widest width pays
  sure = stats.at[:, 2].set(jnp.array([100.0, 100.0]))
  assert int(policies.ngram_width(sure, jnp.array([3, 3]), k, live, widths, cost)) == 3
  # after a run of rejections at match length 1 the estimate drops and the row stops proposing
  s = stats
  for _ in range(5):
    s = policies.ngram_update(s, jnp.array([1, 1]), k, jnp.int32(3), jnp.array([0, 0]), live)
  assert float(s[0, 0, 0] / s[0, 0, 1]) < 0.2
  assert int(policies.ngram_width(s, jnp.array([1, 1]), k, live, widths, cost)) == 0
  # rows that are done, or rounds that verified nothing, leave the counts alone
  same = policies.ngram_update(stats, jnp.array([1, 1]), k, jnp.int32(0), jnp.array([0, 0]), live)
  np.testing.assert_array_equal(same, stats)


def test_ngram_can_pay_bounds_the_choice():
  import jax.numpy as jnp
  widths, live = (0, 3, 7, 15), jnp.array([True, True])
  stats = policies.ngram_prior(2, 3)
  assert not bool(policies.ngram_can_pay(stats, live, 15, widths, (1.0, 4.2, 4.9, 6.6)))   # q = 1/2
  assert bool(policies.ngram_can_pay(stats, live, 15, widths, (1.0, 1.1, 1.2, 1.3)))
  sure = stats.at[0, 1].set(jnp.array([50.0, 50.0]))                    # row 0, n = 2: q = 1
  assert bool(policies.ngram_can_pay(sure, live, 15, widths, (1.0, 4.2, 4.9, 6.6)))
  # at the prior counts (what generate() asks before choosing ngram's program or AR's)
  assert not policies.ngram_pays_at_prior(15, widths, (1.0, 4.2, 4.9, 6.6), 3)
  assert policies.ngram_pays_at_prior(15, widths, (1.0, 1.1, 1.2, 1.3), 3)
  assert not policies.ngram_pays_at_prior(15, widths, policies.default_round_cost(1).costs(widths, method="ngram"), 3)


def test_auto_set_keeps_only_widths_that_could_beat_an_ar_step():
  """A width stays only if a round accepting everything (1 + min(w, L) tokens) costs fewer AR steps
  than it emits; the loop builds the widest kept tree. Forced widths are added, never dropped."""
  import dataclasses
  shipped_like = policies.RoundCost({0: 5.66, 15: 9.87, 31: 13.26, 63: 19.76})
  assert shipped_like.auto_set(63, 15) == (15, 31)          # 63: 16 tokens < 19.76 AR steps
  assert shipped_like.auto_set(31, 15) == (15, 31)
  assert policies.RoundCost({0: 0.9, 15: 2.0, 31: 3.0, 63: 4.0}).auto_set(63, 15) == (0, 15, 31, 63)
  # a table where no width can pay keeps the one whose best case is best, alone
  assert policies.RoundCost({0: 2.0, 15: 40.0, 31: 50.0, 63: 60.0}).auto_set(63, 15) == (0,)
  assert policies.RoundCost({0: 50.0, 15: 20.0, 31: 50.0, 63: 60.0}).auto_set(63, 15) == (15,)
  forced = dataclasses.replace(shipped_like, force=63)
  assert forced.auto_set(63, 15) == (15, 31, 63)
  assert forced.costs((15, 31, 63)) == (policies.FORCE_COST, policies.FORCE_COST, 1.0)
  with pytest.raises(ValueError, match=r"'t_over_ar' has no width \[31\]"):
    policies.RoundCost({0: 1.0, 15: 2.0, 63: 3.0}).auto_set(63, 15)
  with pytest.raises(ValueError, match="forced width 7"):
    dataclasses.replace(shipped_like, force=7).auto_set(63, 15)


def test_per_width_calibration_maps_each_width_by_its_own_fit(tmp_path):
  """A table's calibration.per_width knots map each width's E[A] by that width's fit (the pooled map
  for widths without one); identical maps give the pooled result; bad knots name their key."""
  import jax.numpy as jnp
  pooled = {"predicted": [0.0, 20.0], "observed": [0.0, 20.0]}
  data = {"schema": policies.COST_SCHEMA, "t_over_ar": {"0": 2.0, "15": 4.0, "31": 5.0, "63": 9.0},
          "calibration": {**pooled, "per_width": {"31": {"predicted": [0.0, 20.0], "observed": [0.0, 10.0]}}}}
  path = tmp_path / "t.json"
  path.write_text(json.dumps(data))
  rc = policies.read_round_cost(path)
  knots = rc.knots((0, 15, 31))
  assert knots[1] == knots[0] == ((0.0, 20.0), (0.0, 20.0)) and knots[2] == ((0.0, 20.0), (0.0, 10.0))
  scores = jnp.log(jnp.full((1, 31), 0.5))                                # E[A](w) raw = w / 2
  ea = policies.expected_accepted(scores, (0, 15, 31), knots)
  np.testing.assert_allclose(np.asarray(ea), [[0.0, 7.5, 7.75]], rtol=1e-6)
  same = policies.expected_accepted(scores, (0, 15, 31), (knots[0],) * 3)
  np.testing.assert_allclose(np.asarray(same), np.asarray(policies.expected_accepted(scores, (0, 15, 31), knots[0])))
  # the per-width map changes the choice: raw / pooled prefer 31 at these costs, its own fit does not
  live = jnp.array([True])
  assert int(policies.best_width(scores, live, (15, 31), (4.0, 5.0), knots[0])) == 1
  assert int(policies.best_width(scores, live, (15, 31), (4.0, 5.0), knots[1:])) == 0
  data["calibration"]["per_width"]["31"] = {"predicted": [0.0, 20.0], "observed": [5.0, 1.0]}
  path.write_text(json.dumps(data))
  with pytest.raises(ValueError, match=r"t.json: 'calibration.per_width.31' must hold"):
    policies.read_round_cost(path)


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
  from glance_jax.bench.calibrate import testbed_prompts
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


def test_replayed_choice_is_the_loops_choice():
  """replay_policy picks, per recorded round, the width policies.best_width picks from the same scores
  (batch 1, calibrated E[A]), and earns that width's recorded accepted length."""
  import jax.numpy as jnp
  rng = np.random.default_rng(0)
  widths, costs = (0, 15, 31, 63), {0: 1.5, 15: 3.0, 31: 4.0, 63: 6.0}
  knots = {15: ((0.0, 15.0), (0.0, 12.0)), 31: ((0.0, 31.0), (0.0, 20.0)), 63: ((0.0, 63.0), (0.0, 30.0))}
  scores = np.sort(rng.uniform(-1.0, 0.0, (200, 63)), axis=1)[:, ::-1] * rng.uniform(0.01, 6.0, (200, 1))
  raw = np.asarray(policies.expected_accepted(jnp.asarray(scores, jnp.float32), (15, 31, 63)))
  obs = rng.integers(0, 16, (200, 3)).astype(float)
  got = auto_set.replay_policy(raw, obs, (15, 31, 63), costs, knots)
  calib = tuple(knots.get(w, ()) for w in widths)
  want = [int(policies.best_width(jnp.asarray(s[None], jnp.float32), jnp.array([True]), widths,
                                tuple(costs[w] for w in widths), calib)) for s in scores]
  share = {str(w): float(np.mean(np.asarray(want) == j)) for j, w in enumerate(widths)}
  assert got["share"] == pytest.approx(share) and len(set(want)) >= 2, share
  tok = sum(1.0 + (obs[i, (15, 31, 63).index(widths[j])] if widths[j] else 0.0) for i, j in enumerate(want))
  cost = sum(costs[widths[j]] for j in want)
  assert got["tokens_per_ar_step"] == pytest.approx(tok / cost)


def test_choose_auto_set_weighs_a_wider_tree_against_its_cost():
  """The wider tree pays only where its extra acceptance covers what every round pays to build it."""
  pred = np.array([[9.0, 12.0, 14.0]] * 10)
  obs = np.array([[9.0, 12.0, 14.0]] * 10)                               # 31 adds 3 tokens a round
  cheap = {"15": {"15": 8.0}, "31": {"31": 9.0}, "15,31": {"15": 8.5, "31": 9.5}}
  best, rows = auto_set.choose_auto_set(cheap, pred, obs, (15, 31, 63), ())
  assert best == (31,) and rows[0]["tokens_per_ar_step"] == pytest.approx(13 / 9)
  dear = {"15": {"15": 8.0}, "31": {"31": 14.0}, "15,31": {"15": 9.0, "31": 14.5}}
  best, rows = auto_set.choose_auto_set(dear, pred, obs, (15, 31, 63), ())
  assert best == (15,) and [r["auto_set"] for r in rows][0] == [15]
  assert auto_set.candidate_sets((15, 31)) == [(15,), (31,), (15, 31)]


def test_table_auto_set_is_what_glance_auto_compiles(tmp_path):
  data = {"schema": policies.COST_SCHEMA, "t_over_ar": {"0": 5.0, "15": 9.0, "31": 12.0, "63": 19.0},
          "auto_set": [15]}
  path = tmp_path / "t.json"
  path.write_text(json.dumps(data))
  rc = policies.read_round_cost(path)
  assert rc.auto_set(63, 15) == (15,) and rc.auto_set(31, 15) == (15,)
  import dataclasses
  assert dataclasses.replace(rc, force=31).auto_set(63, 15) == (15, 31)
  data["auto_set"] = [31, 63]
  path.write_text(json.dumps(data))
  assert policies.read_round_cost(path).auto_set(31, 15) == (31,)         # what the budget allows of it
  with pytest.warns(UserWarning, match=r"'auto_set' \[31, 63\] has no width that budget 15 allows"):
    assert policies.read_round_cost(path).auto_set(15, 15) == (15,)        # the paying rule at budget 15
  for bad in ([15, 7], [31, 15], "15"):
    data["auto_set"] = bad
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"t.json: key 'auto_set' must be an increasing list"):
      policies.read_round_cost(path)


def test_measure_costs_times_each_compiled_set_in_its_own_loop():
  """Each width of each candidate set runs forced in the set's own loop (its tree, its widths)."""
  from glance_jax.bench.random_models import long_prompt, make_head, make_target, size_config
  from glance_jax.bench.runner import signature
  from glance_jax.decode import generate as gen_lib
  from glance_jax.decode import loop
  from tests import tracing
  cfg = size_config("tiny")
  target = make_target(cfg, 3)
  head = make_head(target, 3)
  inputs = long_prompt(cfg, 24, seed=1)
  p = types.SimpleNamespace(inputs=inputs, signature=signature(inputs))
  base = policies.RoundCost({0: 5.66, 15: 9.87, 31: 13.26, 63: 19.76})
  with tracing.traced(gen_lib, "decode_rounds", loop.LOOP_STATIC, ("state",)) as traces:
    out = calibrate.measure_costs(target, head, [p], reps=1, max_new_tokens=6, base=base,
                                  sets=[(15, 31)], only_sets=True, log=lambda *_: None)
  assert set(out["set_t_over_ar"]) == {"15,31"} and set(out["set_t_over_ar"]["15,31"]) == {"15", "31"}
  assert all(t > 0 for c in out["set_t_over_ar"].values() for t in c.values())
  auto = {(t["drafter"].num_nodes, t["policy"].widths) for t in traces if isinstance(t["policy"], policies.Auto)}
  assert auto == {(31, (15, 31))}   # both widths forced in the set's own loop


def test_replayed_choice_at_batch_sums_the_live_rows():
  """At batch B the policy picks one width per round from the live rows' summed expected tokens
  (policies.best_width over [B] rows); the replay does the same and earns every live row's tokens."""
  import jax.numpy as jnp
  rng = np.random.default_rng(1)
  widths, costs = (0, 15, 31), {0: 2.0, 15: 4.0, 31: 5.5}
  n, b = 60, 3
  scores = np.sort(rng.uniform(-1.0, 0.0, (n, b, 31)), axis=2)[..., ::-1] * rng.uniform(0.01, 6.0, (n, b, 1))
  raw = np.asarray(policies.expected_accepted(jnp.asarray(scores.reshape(n * b, 31), jnp.float32), (15, 31)))
  raw = raw.reshape(n, b, 2)
  obs = rng.integers(0, 16, (n, b, 2)).astype(float)
  obs[40:, 2] = -1                                                        # row 2 done after round 40
  got = auto_set.replay_policy(raw, obs, (15, 31), costs)
  want, tok, cost = [], 0.0, 0.0
  for r in range(n):
    live = obs[r, :, 0] >= 0
    j = int(policies.best_width(jnp.asarray(scores[r], jnp.float32), jnp.asarray(live), widths,
                              tuple(costs[w] for w in widths)))
    want.append(j)
    tok += sum(1.0 + (obs[r, i, widths[j] // 16] if widths[j] else 0.0) for i in range(b) if live[i])
    cost += costs[widths[j]]
  assert got["share"] == pytest.approx({str(w): want.count(j) / n for j, w in enumerate(widths)})
  assert got["tokens_per_ar_step"] == pytest.approx(tok / cost)
  # round_records keeps the batch's rows side by side, -1 once a row is done
  res = types.SimpleNamespace(record_widths=(15, 31), predicted=[raw[:, 0], raw[:40, 2]],
                              observed=[obs[:, 0], obs[:40, 2]])
  p, o, rw = auto_set.round_records([res])
  assert p.shape == (n, 2, 2) and rw == (15, 31) and (o[40:, 1] == -1).all() and (o[:40, 1] >= 0).all()


def test_table_auto_plain_ar_is_a_boolean(tmp_path):
  data = {"schema": policies.COST_SCHEMA, "t_over_ar": {"0": 5.0, "15": 9.0, "31": 12.0, "63": 19.0},
          "auto_set": [15], "auto_plain_ar": True}
  path = tmp_path / "t.json"
  path.write_text(json.dumps(data))
  assert policies.read_round_cost(path).plain_ar is True
  data["auto_plain_ar"] = "yes"
  path.write_text(json.dumps(data))
  with pytest.raises(ValueError, match=r"t.json: key 'auto_plain_ar' must be true or false"):
    policies.read_round_cost(path)


def test_table_auto_pause_is_a_boolean_off_by_default(tmp_path):
  data = {"schema": policies.COST_SCHEMA, "t_over_ar": {"0": 5.0, "15": 9.0, "31": 12.0, "63": 19.0}}
  path = tmp_path / "t.json"
  path.write_text(json.dumps(data))
  assert policies.read_round_cost(path).pause is False
  data["auto_pause"] = True
  path.write_text(json.dumps(data))
  assert policies.read_round_cost(path).pause is True
  data["auto_pause"] = 1
  path.write_text(json.dumps(data))
  with pytest.raises(ValueError, match=r"t.json: key 'auto_pause' must be true or false"):
    policies.read_round_cost(path)


def test_builtin_tables_by_batch():
  """A call at batch B reads the built-in table measured at the largest batch <= B (1, 2, 4, 8); all
  ship in the wheel (pyproject package-data)."""
  import tomllib
  from pathlib import Path
  one, two, four, eight = (policies.default_round_cost(b) for b in (1, 2, 4, 8))
  assert [t.meta["batch"] for t in (one, two, four, eight)] == [1, 2, 4, 8]
  assert policies.default_round_cost(3) is two and policies.default_round_cost(7) is four
  assert policies.default_round_cost(32) is eight and policies.default_round_cost(0) is one
  # measured on the testbed's in-cache target (compute-bound CPU): no width beats AR at any batch
  assert one.plain_ar and two.plain_ar and four.plain_ar and eight.plain_ar
  data = tomllib.loads((Path(policies.__file__).resolve().parents[3] / "pyproject.toml").read_text())
  assert "*.json" in data["tool"]["setuptools"]["package-data"]["glance_jax.decode.policies"]


def test_replay_rounds_round_trip_and_a_bad_one_names_the_key(tmp_path):
  """A table's 'replay' (the head's calibration rounds) reads back as written, on one line; a malformed
  one is an error naming the file and the key; the built-in batch-1 table carries the testbed head's."""
  pred = np.array([[[2.5, 3.25, 4.0]], [[1.0, 1.5, 2.0]]])
  obs = np.array([[[2.0, 3.0, 5.0]], [[-1.0, -1.0, -1.0]]])
  table = {"schema": policies.COST_SCHEMA, "t_over_ar": {"0": 1.5, "15": 3.0},
           auto_set.REPLAY_KEY: auto_set.replay_payload(pred, obs, (15, 31, 63))}
  calibrate.write_table(tmp_path / "t.json", table)
  text = (tmp_path / "t.json").read_text()
  assert text.count("\n") < 12 and json.loads(text)["t_over_ar"] == table["t_over_ar"]
  p, o, w = auto_set.replay_rounds(json.loads(text), "t.json")
  assert w == (15, 31, 63) and np.array_equal(p, pred) and np.array_equal(o, obs)
  assert auto_set.replay_rounds({"schema": "x"}, "t.json") is None
  for bad in ({"widths": [15], "predicted": [[[1.0]]], "observed": [[[1.0, 2.0]]]}, {"widths": [15]},
              {"widths": [15, 31], "predicted": [[[1.0]]], "observed": [[[1.0]]]}):
    with pytest.raises(ValueError, match=r"t.json: key 'replay' must hold"):
      auto_set.replay_rounds({auto_set.REPLAY_KEY: bad}, "t.json")
  builtin = json.loads(policies.DEFAULT_TABLE.read_text())
  bp, bo, bw = auto_set.replay_rounds(builtin, str(policies.DEFAULT_TABLE))
  assert bw == (15, 31, 63) and bp.shape[1] == 1 and len(bp) >= 100 and bo.max() <= 15


def test_apply_choice_writes_the_replays_best_set_into_the_table():
  pred = obs = np.array([[[9.0, 12.0, 14.0]]] * 10)
  table = {"t_over_ar": {"0": 1.5, "15": 7.0, "31": 8.0, "63": 12.0}}
  rows = auto_set.apply_choice(table, {"15": {"15": 8.0}, "31": {"31": 9.0}, "15,31": {"15": 8.5, "31": 9.5}},
                               pred, obs, (15, 31, 63), ())
  assert table["auto_set"] == [31] and table["t_over_ar"]["31"] == 9.0 and table["auto_sets"] == rows
  assert table["auto_plain_ar"] is False and rows[0]["vs_ar"] == pytest.approx(13 / 9)
  # within the margin, the set of fewer widths (no in-sample choice to flatter, no switching)
  near = {"15": {"15": 8.0}, "31": {"31": 10.5}, "15,31": {"15": 8.3, "31": 10.2}}   # 1.25, 1.24, 1.27
  rows = auto_set.apply_choice(table, near, pred, obs, (15, 31, 63), (), margin=0.05)
  assert table["auto_set"] == [15] and rows[0]["auto_set"] == [15] and len(rows) == 3
  assert max(r["tokens_per_ar_step"] for r in rows) == pytest.approx(13 / 10.2)
  far = {"15": {"15": 8.0}, "31": {"31": 12.0}, "15,31": {"15": 8.1, "31": 9.0}}      # 1.25, 1.08, 1.44
  auto_set.apply_choice(table, far, pred, obs, (15, 31, 63), (), margin=0.05)
  assert table["auto_set"] == [15, 31]


def test_each_builtin_table_compiles_what_its_own_rounds_choose():
  """A built-in table's compiled set (auto_set, auto_plain_ar) is what the policy, replayed on the
  calibration rounds stored beside it at its stored set costs, chooses: a refit that keeps an earlier
  head's set (the batch-1 table once kept [15] where its own rounds earned 0.74 tokens per AR step)
  fails here."""
  import copy
  import pathlib
  for b in (1, 2, 4, 8):
    rc = policies.default_round_cost(b)
    table = json.loads(pathlib.Path(rc.path).read_text())
    pred, obs, rw = auto_set.replay_rounds(table, rc.path)
    assert pred.shape[1] == b and table["meta"]["batch"] == b
    again = copy.deepcopy(table)
    auto_set.apply_choice(again, auto_set.stored_set_costs(table), pred, obs, rw, auto_set.table_width_knots(table, rw))
    assert (again["auto_set"], again["auto_plain_ar"]) == (table["auto_set"], table.get("auto_plain_ar", False)), b


def test_stored_set_costs_and_width_knots_read_a_table():
  table = {"auto_sets": [{"auto_set": [15], "t_over_ar": {"15": 6.5}},
                         {"auto_set": [15, 31], "t_over_ar": {"15": 8.0, "31": 11.0}}],
           "calibration": {"predicted": [1.0, 5.0], "observed": [1.5, 4.0],
                           "per_width": {"31": {"predicted": [2.0], "observed": [3.0]}}}}
  assert auto_set.stored_set_costs(table) == {"15": {"15": 6.5}, "15,31": {"15": 8.0, "31": 11.0}}
  assert auto_set.table_width_knots(table, (15, 31)) == {15: ((1.0, 5.0), (1.5, 4.0)), 31: ((2.0,), (3.0,))}
  assert auto_set.stored_set_costs({}) == {}
