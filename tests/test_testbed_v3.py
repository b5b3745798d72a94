"""Testbed suite v3: v2's grounded records seed for seed, a caption whose unclear shapes are faint
or hidden (uncertain over article, colour and kind), mentioned in reading order without forks
other than the phrasing; scored mention by mention; the target's restarted learning rate. Suite v4:
v3's caption with 3-4 shapes and their cells, about twice as long."""

import numpy as np
import optax
import pytest

from glance_jax.testbed import evaluate, probe, suite_v2, suite_v3, suites
from glance_jax.testbed import target_train as tt


def test_grounded_records_are_v2s_and_captions_are_new():
  assert suites.get("v3") is suite_v3 and suite_v3.TASKS == suite_v2.TASKS
  for task in suite_v2.GROUNDED:
    for split, i in (("heldout", 7), ("train", 123)):
      a, b = suite_v2.render(task, split, i), suite_v3.render(task, split, i)
      assert a[1:] == b[1:] and np.array_equal(np.asarray(a[0]), np.asarray(b[0])), (task, split)
  a, q, ans = suite_v3.render("caption", "heldout", 3)
  b, _, ans_b = suite_v3.render("caption", "heldout", 3)
  assert np.array_equal(np.asarray(a), np.asarray(b)) and ans == ans_b      # pure
  assert ans != suite_v2.render("caption", "heldout", 3)[2]
  with pytest.raises(ValueError, match="held-out index 64 outside"):
    suite_v3.render("caption", "heldout", 64)


def test_captions_mention_in_reading_order_with_unclear_shapes():
  styles, phrasings = [], set()
  for i in range(64):
    scene, image, ans = suite_v3.record("caption", "heldout", i)
    d = scene.draw
    assert d["cells"] == sorted(d["cells"])
    names = [m for m in evaluate._MENTION.findall(ans)]
    assert [" ".join(m) for m in names] == list(scene.fields), ans                   # reading order
    assert ", and" not in ans                                                          # no Oxford comma
    assert scene.clear == tuple(s == "clear" for s in d["styles"])
    styles += d["styles"]
    phrasings.add(ans.split(" a")[0])
    px = np.asarray(image).astype(int)
    for cell, color, style, pad in zip(d["cells"], d["colors"], d["styles"], d["pads"]):
      x, y = 64 * (cell % 2), 64 * (cell // 2)
      centre = px[y + 40, x + 32]                     # below any sliver: the patch when hidden
      if style in ("hidden", "obscured"):
        assert tuple(centre) == suite_v3._PATCH, (i, cell)
      elif style == "faint" and not np.array_equal(centre, [255, 255, 255]):
        assert centre.min() > min(suite_v3.COLORS[color]) + 60, (i, cell, centre)     # pale
  assert set(styles) == set(suite_v3.CAPTION_STYLES)
  assert 0.3 < np.mean([s == "clear" for s in styles]) < 0.7
  assert len(phrasings) >= 5


def test_train_stream_excludes_heldout_scenes():
  reserved = suite_v3.reserved_scenes("caption")
  assert len(reserved) > 0.9 * suite_v3.HELDOUT_RESERVED
  assert all(suite_v3.record("caption", "train", i)[0].content not in reserved for i in range(100))


def test_score_v3_caption_mention_by_mention():
  scene = next(sc for sc in (suite_v3.record("caption", "heldout", i)[0] for i in range(64))
               if len(scene_fields := sc.fields) == 3 and len(set(scene_fields)) == 3 and not all(sc.clear))
  said = lambda fields: "There is " + ", ".join(f"a {f}" for f in fields) + "."  # noqa: E731
  s = evaluate.score_v2("caption", said(scene.fields), scene)
  assert s["content"] == 1.0 and s["all_hits"] == 3 and s["clear_n"] == sum(scene.clear)
  s = evaluate.score_v2("caption", said(scene.fields[::-1]), scene)
  assert s["content"] == 1.0 and s["all_hits"] == 1                       # right shapes, wrong order
  pooled = evaluate.pool_scores_v2([evaluate.score_v2("caption", said(scene.fields), scene),
                                    evaluate.score_v2("caption", "Nothing.", scene)])
  assert pooled["content"] == 0.5 and pooled["fields"] == 0.5 and pooled["n_fields"] == 6
  # v2 captions (order sampled) keep the content score alone
  v2 = suite_v2.record("caption", "heldout", 0)[0]
  assert set(evaluate.score_v2("caption", "x", v2)) == {"content"}
  kinds = probe.char_kinds(scene, said(scene.fields))
  assert {kinds[said(scene.fields).index(f)] for f, c in zip(scene.fields, scene.clear) if not c} == {"unclear"}


def test_restarted_learning_rate():
  lr = tt.learning_rate(tt.TargetTrainConfig(steps=300, warmup=10, lr=2e-3, restart_at=200, restart_lr=1e-3))
  assert float(lr(10)) == pytest.approx(2e-3) and float(lr(199)) == pytest.approx(1e-4, rel=0.05)
  assert float(lr(200)) == 0.0 and float(lr(210)) == pytest.approx(1e-3) and float(lr(299)) < 1e-4
  plain = tt.learning_rate(tt.TargetTrainConfig(steps=300, warmup=10, lr=2e-3))
  assert float(plain(150)) == pytest.approx(float(optax.warmup_cosine_decay_schedule(0, 2e-3, 10, 300, 1e-4)(150)))
  with pytest.raises(ValueError, match="restart_at 300 must be in"):
    tt.make_optimizer(tt.TargetTrainConfig(steps=300, restart_at=300))


def test_v3_build_spec_and_head_config():
  import dataclasses
  from glance_jax.testbed import build
  from glance_jax.train.config import load_config
  spec = build.BUILDS["v3"]
  cfg = dataclasses.replace(tt.TargetTrainConfig(), suite_version=spec.version, **dict(spec.target))
  lr = tt.learning_rate(cfg)
  assert cfg.restart_at == 10000 and float(lr(10000)) == 0.0 and float(lr(10100)) == pytest.approx(cfg.restart_lr)
  head = load_config(str(spec.head_config))
  assert head.task_files[-1].endswith("runs/testbed_v3/data/caption_train.jsonl")
  assert head.steps == load_config(str(build.BUILDS["v2"].head_config)).steps     # v2's recipe


def test_v4_caption_is_v3s_longer_with_cells():
  from glance_jax.testbed import suite_v4
  assert suites.get("v4") is suite_v4
  for task in suite_v2.GROUNDED:
    assert suite_v4.render(task, "heldout", 5)[2] == suite_v2.render(task, "heldout", 5)[2]
  lengths = []
  for i in range(40):
    scene, _, ans = suite_v4.record("caption", "heldout", i)
    assert 3 <= len(scene.fields) <= 4 and scene.draw["cells"] == sorted(scene.draw["cells"])
    for f, cell in zip(scene.fields, scene.draw["cells"]):
      assert f"{f} in cell {cell + 1}" in ans, ans
    assert [" ".join(m) for m in evaluate._MENTION.findall(ans)] == list(scene.fields)
    lengths.append(len(ans))
  assert np.mean(lengths) > 1.8 * np.mean([len(suite_v3.render("caption", "heldout", i)[2]) for i in range(40)])
  assert suite_v4.train_record("caption", 3)[2] == suite_v4.render("caption", "train", 3)[2]
