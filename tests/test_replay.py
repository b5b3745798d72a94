"""Replayed acceptance (glance_jax/bench/replay.py) at tiny size: the oracle drafter reproduces
fabricated per-round records exactly, the tokens are AR's, and an oracle off by one is caught."""

import json

import numpy as np
import pytest

from glance_jax.bench import replay
from glance_jax.decode import loop
from tests import tracing
from glance_jax.bench.random_models import long_prompt, make_head, make_target, size_config

M = 24  # new tokens per replayed run


@pytest.fixture(scope="module")
def world():
  cfg = size_config("tiny")
  target = make_target(cfg, 3)
  head = make_head(target, 3)
  p = replay.prepare(target, long_prompt(cfg, 40, seed=1))
  depth = head.config.block_size - 1
  max_length = 40 + M + 31 + depth + 4
  ref_cfg = replay.loop_config(target, head, replay.Spec("ar", "ar", 1), M + depth + 1)
  _, _, ref, _, _ = replay.run(target, head, p, ref_cfg, max_length)
  _, _, ar, acc, _ = replay.run(target, head, p, replay.loop_config(target, head, replay.Spec("ar", "ar", 1), M),
                             max_length)
  assert len(ref) == M + depth + 1 and np.array_equal(ar, ref[:M]) and (acc == 0).all()
  return dict(target=target, head=head, p=p, ref=ref, ar=ar, max_length=max_length, depth=depth,
              vocab=cfg.text.vocab_size)


def _rec(label, method, budget, auto, accepted, widths):
  return replay.Recorded(label, method, budget, auto, tuple(np.asarray(a) for a in accepted),
                         tuple(np.asarray(w) for w in widths))


RECORDS = [
    _rec("glance-15", "glance", 15, False, [[3, 0, 15, 7], [2, 5]], [[15] * 4, [15] * 2]),
    _rec("glance-auto", "glance", 31, True, [[0, 4, 9, 15], [6, 0]], [[0, 15, 31, 31], [15, 31]]),
]


def _replay(w, rec, oracle_acc=None, start=0):
  acc, wid = replay.schedule(rec, start, M)
  orc = replay.oracle_tokens(w["ref"], acc if oracle_acc is None else oracle_acc(acc), w["vocab"], w["depth"])
  cfg = replay.loop_config(w["target"], w["head"], replay.Spec(rec.label, rec.method, rec.budget, rec.auto), M)
  _, _, tokens, got_a, got_w = replay.run(w["target"], w["head"], w["p"], cfg, w["max_length"], orc,
                                       wid if rec.auto else None)
  return tokens, got_a, got_w, acc, wid


@pytest.mark.parametrize("rec", RECORDS, ids=lambda r: r.label)
def test_replay_reproduces_records(world, rec):
  tokens, got_a, got_w, acc, wid = _replay(world, rec)
  # the schedule is the recorded rounds in order, spilling into the next prompt, until M tokens
  flat = np.concatenate(rec.accepted)
  assert np.array_equal(acc, flat[: len(acc)]) and 1 + np.sum(acc[:-1] + 1) < M <= 1 + np.sum(acc + 1)
  replay.check(rec.label, tokens, got_a, got_w, world["ar"], acc, wid)   # raises on any difference
  assert np.array_equal(got_a, acc) and np.array_equal(got_w, wid)


def test_auto_replay_compiles_once(world):
  """Schedules of different lengths (prompt 0's rounds first, or prompt 1's) share one compiled loop."""
  rec = RECORDS[1]
  lengths = set()
  with tracing.traced(loop, "decode_rounds", loop.LOOP_STATIC, ("state",), n=1) as traces:
    for start in (0, 1):
      tokens, got_a, got_w, acc, wid = _replay(world, rec, start=start)
      replay.check(rec.label, tokens, got_a, got_w, world["ar"], acc, wid)
      lengths.add(len(acc))
  assert len(lengths) == 2
  assert len(traces) == 1 and traces[0]["policy"].scheduled and traces[0]["drafter"].num_nodes == 31


def test_off_by_one_oracle_is_caught(world):
  rec = RECORDS[0]
  tokens, got_a, got_w, acc, wid = _replay(world, rec, lambda a: np.minimum(a + 1, world["depth"]))
  assert np.array_equal(tokens, world["ar"])                            # lossless whatever the draft
  assert not np.array_equal(got_a, acc)
  with pytest.raises(replay.ReplayMismatch, match="accepted lengths"):
    replay.check(rec.label, tokens, got_a, got_w, world["ar"], acc, wid)
  with pytest.raises(replay.ReplayMismatch, match="tokens differ"):
    replay.check(rec.label, tokens[::-1], acc, wid, world["ar"], acc, wid)


def test_read_records(tmp_path):
  pp = lambda a, w: {"id": "x", "accepted": a, "widths": w}  # noqa: E731
  good = {"tasks": {"t": {"methods": {
      "ar": {"method": "ar", "budget": 1, "per_prompt": [pp([0, 0], [0, 0])]},
      "glance-auto": {"method": "glance", "budget": 63, "auto": True, "per_prompt": [pp([3, 15], [15, 63])]}}}}}
  path = tmp_path / "bench.json"
  path.write_text(json.dumps(good))
  recs = replay.read_records(str(path))
  assert list(recs["t"]) == ["glance-auto"] and recs["t"]["glance-auto"].auto
  assert recs["t"]["glance-auto"].tau == pytest.approx(10.0)
  good["tasks"]["t"]["methods"]["glance-auto"]["per_prompt"] = [pp([16], [15])]
  path.write_text(json.dumps(good))
  with pytest.raises(ValueError, match=r"tasks\.t\.methods\.glance-auto\.per_prompt\[0\]"):
    replay.read_records(str(path))
  with pytest.raises(ValueError, match="glance-7"):
    replay.read_records(str(tmp_path / "bench.json"), ["glance-7"])


def test_predicted_and_cli_errors(tmp_path, capsys):
  from benchmarks import replay as cli
  cost = {0: 2.0, 15: 4.0, 63: 8.0}
  assert cli.predicted(np.array([3, 15]), np.array([15, 63]), cost) == pytest.approx(20 / 12)
  assert cli.predicted(np.array([3]), np.array([31]), cost) is None         # no t(31) in the table
  with pytest.raises(SystemExit):
    cli.main(["--bench", str(tmp_path / "missing.json")])
  assert "missing.json" in capsys.readouterr().err
  path = tmp_path / "bench.json"
  path.write_text(json.dumps({"tasks": {"t": {"methods": {"glance-15": {
      "method": "glance", "budget": 15, "per_prompt": [{"accepted": [3], "widths": [15]}]}}}}}))
  with pytest.raises(SystemExit):
    cli.main(["--bench", str(path), "--methods", "glance-15", "--tasks", "chart"])
  assert "--tasks: ['chart'] not in" in capsys.readouterr().err


def test_cli_smoke_tiny(tmp_path):
  """The whole benchmark at tiny size on a fabricated bench JSON: every run checked, a report written."""
  from benchmarks import replay as cli
  pp = lambda a, w: {"accepted": a, "widths": w}  # noqa: E731
  bench = {"tasks": {"t": {"methods": {
      "glance-15": {"method": "glance", "budget": 15, "per_prompt": [pp([4, 0, 15], [15] * 3)]},
      "glance-auto": {"method": "glance", "budget": 31, "auto": True, "per_prompt": [pp([2, 0, 9], [15, 0, 31])]}}}}}
  (tmp_path / "bench.json").write_text(json.dumps(bench))
  rep = cli.main(["--bench", str(tmp_path / "bench.json"), "--methods", "glance-15,glance-auto", "--size", "tiny",
                  "--prompts", "1", "--repeats", "1", "--context", "40", "--max-new-tokens", "20",
                  "--round-cost", "none", "--json", str(tmp_path / "r.json")])
  rows = json.loads((tmp_path / "r.json").read_text())["tasks"]["t"]
  assert set(rows) == {"ar", "glance-15", "glance-auto"} and rep["label"] == "replayed acceptance"
  # 20 tokens: auto runs its prompt's rounds twice (1 + 3 + 1 + 10 = 15 < 20), glance-15 once (1 + 5 + 1 + 16)
  assert rows["glance-auto"]["widths"] == {"0": 2, "15": 2, "31": 2} and rows["glance-auto"]["rounds"] == 6
  assert rows["glance-15"]["rounds"] == 3 and rows["glance-15"]["checked_runs"] == 1
  assert rows["glance-15"]["speedup"] > 0 and rows["glance-15"]["predicted_speedup"] is None
