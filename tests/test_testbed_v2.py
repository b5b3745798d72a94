"""Testbed suite v2 (issue 14) and suite versions: v2 records are pure functions with certain and
uncertain fields in every grounded task and open answers; chart labels sit in one patch row; one
rule keeps held-out scenes out of training; scoring is by scene; the v2 target trains; the shipped
(v1) held-out files still equal their suite's renders; a v2 build runs end to end (slow)."""

import dataclasses
import json

import numpy as np
import pytest

from glance_jax.config import tiny_config
from glance_jax.data.records import read_task_file
from glance_jax.testbed import evaluate, paths, probe, suite, suite_v2, suites
from glance_jax.testbed import target_train as tt

TINY = dict(hidden=32, layers=2, heads=2, kv_heads=1, head_dim=16, intermediate=64, vision_depth=1,
            vision_hidden=32, num_position_embeddings=64, deepstack=(0,), tie=True)


def test_render_is_pure_and_v2_streams_are_not_v1s():
  for task in suite_v2.TASKS:
    a, q, ans = suite_v2.render(task, "heldout", 3)
    b, _, ans_b = suite_v2.render(task, "heldout", 3)
    assert np.array_equal(np.asarray(a), np.asarray(b)) and ans == ans_b
    assert a.size == suite_v2.SIZES[task] and q == suite.QUESTIONS[task]
    assert suite_v2.render(task, "train", 3)[2] != ans
    assert suite.render(task, "heldout", 3)[2] != ans
  with pytest.raises(ValueError, match="unknown testbed task 'nope'"):
    suite_v2.render("nope", "train", 0)
  with pytest.raises(ValueError, match="held-out index 64 outside the reserved 0..63"):
    suite_v2.render("table", "heldout", suite_v2.HELDOUT_RESERVED)


def test_chart_labels_sit_in_one_patch_row():
  """Bars stand on y = 95; below it only the letter labels, all inside the patch row 112-127."""
  for i in range(40):
    scene, image, _ = suite_v2.record("chart", "heldout", i)
    ink = (np.asarray(image) < 250).any(-1)            # [H, W]
    assert not ink[96:112].any(), i
    rows = np.nonzero(ink[96:].any(1))[0] + 96
    assert rows.min() >= 112 and rows.max() <= 127, (i, rows)
    for col in range(6):                                # one label per bar column
      assert ink[112:, 32 * col: 32 * col + 32].any(), (i, col)


def test_every_grounded_task_mixes_certain_and_uncertain_fields():
  for task in suite_v2.GROUNDED:
    clear = [c for i in range(64) for c in suite_v2.record(task, "heldout", i)[0].clear]
    share = np.mean(clear)
    assert 0.3 < share < 0.9, (task, share)
  styles = [s for i in range(64) for s in suite_v2.record("table", "heldout", i)[0].draw["styles"]]
  assert set(styles) == set(suite_v2.STYLES)


def test_hidden_chart_heights_are_exactly_those_in_the_band():
  for i in range(64):
    scene, image, _ = suite_v2.record("chart", "heldout", i)
    band = scene.draw["band"]
    px = np.asarray(image).astype(int)
    for col, (h, pale) in enumerate(zip(scene.draw["heights"], scene.draw["pale"])):
      top = suite_v2._BASE - 10 * h
      at_top = tuple(px[top, 32 * col + 16])             # the bar's top row, mid-bar
      hidden = band is not None and band[0] <= h <= band[1]
      assert (at_top == suite_v2._BAND) == hidden, (i, col, h, band)
      assert scene.clear[col] == (not hidden and not pale)


def test_answers_are_open_where_the_suite_says():
  tables = {";" in suite_v2.render("table", "train", i)[2] for i in range(40)}
  assert tables == {True, False}                        # "; " and ", " separators both occur
  firsts = set()
  for i in range(40):
    scene, _, ans = suite_v2.record("chart", "train", i)
    firsts.add(ans.split(" is ")[0] == scene.fields[0].split(" is ")[0])
  assert firsts == {True, False}                        # left to right and right to left
  heads = {suite_v2.render("caption", "train", i)[2].split(" a")[0] for i in range(200)}
  assert len(heads) >= 8, heads


def test_one_rule_keeps_heldout_scenes_out_of_training(monkeypatch):
  for task in suite_v2.TASKS:
    reserved = suite_v2.reserved_scenes(task)
    assert len(reserved) > 0.9 * suite_v2.HELDOUT_RESERVED
    for i in range(100):
      assert suite_v2.record(task, "train", i)[0].content not in reserved
  # Reserve train draw 5's own scene: index 5 is redrawn at 5 + OFFSET, index 6 is untouched.
  scene5 = suite_v2.draw_record("chart", "train", 5)[0]
  monkeypatch.setattr(suite_v2.Stream, "reserved_scenes", lambda self, task: frozenset({scene5.content}))
  assert suite_v2.train_record("chart", 5)[2] == suite_v2.draw_record("chart", "train", 5 + suite_v2.OFFSET)[2]
  assert suite_v2.train_record("chart", 6)[2] == suite_v2.draw_record("chart", "train", 6)[2]


def test_head_prompts_are_the_targets_train_records(tmp_path):
  """The head's train prompts (write_task) and the target's batches (train_record) are one stream."""
  path = suite_v2.write_task("caption", "train", 4, tmp_path, start=2)
  recs = read_task_file(path, on_error="raise", verify_images=True)
  assert [r.answers[0] for r in recs] == [suite_v2.train_record("caption", i)[2] for i in range(2, 6)]
  assert [suite_v2.record_index(r.id) for r in recs] == [2, 3, 4, 5]


def test_score_v2():
  scene, _, ref = suite_v2.record("chart", "heldout", 0)
  rev = ", ".join(scene.fields[::-1]) + "."
  s = evaluate.score_v2("chart", rev, scene)
  assert s["all_hits"] == s["all_n"] == 6
  assert s["clear_n"] == sum(scene.clear) and s["clear_n"] + s["unclear_n"] == 6
  wrong = rev.replace(scene.fields[0], scene.fields[0][:-1] + "0")
  s = evaluate.score_v2("chart", wrong, scene)
  assert s["all_hits"] == 5 and s[("clear" if scene.clear[0] else "unclear") + "_hits"] == s[
      ("clear" if scene.clear[0] else "unclear") + "_n"] - 1
  lines = suite_v2.record("lines", "heldout", 1)[0]
  text = "\n".join(" ".join(lines.fields[3 * r: 3 * r + 3]) for r in range(4))
  assert evaluate.score_v2("lines", text, lines)["all_hits"] == 12
  cap = suite_v2.record("caption", "heldout", 0)[0]
  said = " and ".join(f"a {f}" for f in cap.fields[::-1])
  assert evaluate.score_v2("caption", f"We see {said}.", cap) == {"content": 1.0}
  pooled = evaluate.pool_scores_v2([evaluate.score_v2("chart", rev, scene), evaluate.score_v2("chart", "", scene)])
  assert pooled["fields"] == 0.5 and pooled["n_fields"] == 12


def test_version_marker(tmp_path):
  assert suites.read_version(tmp_path) == "v1"
  suites.write_version(tmp_path, "v2")
  assert suites.read_version(tmp_path) == "v2" and suites.get("v2") is suite_v2
  (tmp_path / suites.MARKER).write_text("{}")
  with pytest.raises(ValueError, match="suite.json: expected"):
    suites.read_version(tmp_path)
  with pytest.raises(ValueError, match="unknown testbed suite version 'v9'"):
    suites.get("v9")


def test_shipped_heldout_files_equal_their_suites_renders():
  """The shipped task files are what their suite version renders (v1 until testbed/ is rebuilt)."""
  s = suites.get(suites.read_version(paths.SHIPPED))
  import PIL.Image
  for task, path in zip(s.TASKS, paths.task_files()):
    recs = read_task_file(path, on_error="raise")
    for r in recs:
      i = int(r.id.rsplit("-", 1)[1])
      image, question, answer = s.render(task, "heldout", i)
      assert (r.prompt, r.answers[0]) == (question, answer), r.id
    for r in recs[:2]:
      image = s.render(task, "heldout", int(r.id.rsplit("-", 1)[1]))[0]
      assert np.array_equal(np.asarray(PIL.Image.open(r.images[0]).convert("RGB")), np.asarray(image)), r.id


def test_v2_target_trains_on_its_suite(tmp_path):
  """Two steps of the target on v2 batches: its tokenizer is trained on v2 text and fits them."""
  cfg = dataclasses.replace(tt.TargetTrainConfig(), steps=2, batch_size=4, save_every=1, suite_version="v2")
  out = tt.train_target(tmp_path / "t", tmp_path / "w", cfg, model_cfg=tiny_config(**TINY), log_every=1)
  metrics = [json.loads(x) for x in (tmp_path / "w" / "target_metrics.jsonl").read_text().splitlines()]
  assert [m["step"] for m in metrics] == [1, 2] and all(np.isfinite(m["loss"]) for m in metrics)
  from glance_jax.qwen3_vl.inputs import Processor
  tok = Processor.from_pretrained(str(out)).tokenizer
  answer = suite_v2.train_record("table", 0)[2]
  assert tok.decode(tok.encode(answer)) == answer
  # the probe lines its entropies up with the answer's tokens
  import jax.numpy as jnp
  from glance_jax.qwen3_vl.target import load_target
  recs = probe.token_entropies(load_target(out, dtype=jnp.float32), Processor.from_pretrained(str(out)),
                               "table", [0, 1])
  for r in recs:
    assert r["answer"] == suite_v2.render("table", "heldout", r["index"])[2]
    assert len(r["tokens"]) == len(tok.encode(r["answer"])) + 1
    assert {t["kind"] for t in r["tokens"]} == {"clear", "unclear", "other"}
    assert all(0 <= t["H"] <= np.log(512) + 1e-3 for t in r["tokens"])
  summary = probe.summarize(recs)
  assert sum(summary[k]["tokens"] for k in probe.KINDS) == sum(len(r["tokens"]) for r in recs)


def test_probe_char_kinds():
  scene, _, answer = suite_v2.record("chart", "heldout", 0)
  kinds = probe.char_kinds(scene, answer)
  for field, clear in zip(scene.fields, scene.clear):
    i = answer.index(field)
    assert set(kinds[i: i + len(field)]) == {"clear" if clear else "unclear"}
  assert kinds[answer.index(",")] == "other" and kinds[-1] == "other"


@pytest.mark.slow
def test_v2_build_runs_end_to_end(tmp_path):
  """The one-command build at smoke scale (the full architecture, 4 target and 4 head steps; about
  1.5 min on 2 shared cores); test_v2_target_trains_on_its_suite covers the target part quickly."""
  from glance_jax.testbed import build
  out = tmp_path / "testbed"
  args = ["--suite", "v2", "--out", str(out), "--workdir", str(tmp_path / "work"), "--heldout", "2",
          "--train-prompts", "8", "--target-steps", "4", "steps=4", "save_every=2", "regen_batch_size=8"]
  build.main(args)
  assert suites.read_version(out) == "v2"
  report = json.loads((out / "eval.json").read_text())
  assert set(report) == set(suite_v2.TASKS) and report["chart"]["n_fields"] == 12
  assert (out / "head" / "config.json").is_file() and (out / "target" / "model.safetensors").is_file()
  with pytest.raises(SystemExit):  # v1 stages refuse a v2 directory
    build.main(["--suite", "v1", "--out", str(out), "--stages", "eval"])


def test_build_flags_are_checked(tmp_path, capsys):
  from glance_jax.testbed import build
  with pytest.raises(SystemExit):
    build.main(["--suite", "v2", "--heldout", "65", "--workdir", str(tmp_path / "w")])
  assert "--heldout 65: suite v2 reserves only 64" in capsys.readouterr().err
  suites.write_version(tmp_path / "tb", "v2")
  with pytest.raises(SystemExit):
    build.main(["--suite", "v1", "--out", str(tmp_path / "tb"), "--stages", "eval", "--workdir", str(tmp_path / "w")])
  assert "holds a v2 testbed" in capsys.readouterr().err
