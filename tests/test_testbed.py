"""The CPU testbed's build: the target's training resumes exactly, keeps its tokenizer and restarts its
learning rate; the head config takes the suite as an override; the build's flags are checked and it
runs end to end (slow). The shipped testbed: its held-out files are what its suite renders, its target
loads in transformers with our logits, really reads its images, and GLANCE with the shipped head is
lossless on it. (The suite's records: tests/test_testbed_suite.py.)"""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from glance_jax.config import tiny_config
from glance_jax.data.records import read_task_file
from glance_jax.testbed import build, evaluate, paths, probe, suites
from glance_jax.testbed import target_train as tt

TINY = dict(hidden=32, layers=2, heads=2, kv_heads=1, head_dim=16, intermediate=64, vision_depth=1,
            vision_hidden=32, num_position_embeddings=64, deepstack=(0,), tie=True)


def test_target_training_resumes_exactly(tmp_path, monkeypatch):
  """A crash mid-run, then a restart: the same final weights as an uninterrupted run."""
  cfg = dataclasses.replace(tt.TargetTrainConfig(), steps=4, batch_size=4, save_every=2)
  model_cfg = tiny_config(**TINY)
  straight = tt.train_target(tmp_path / "a", tmp_path / "wa", cfg, model_cfg=model_cfg, log_every=1)

  real = tt.make_batch

  def crash_at_step_3(step, *a, **k):
    if step == 3:
      raise RuntimeError("killed")
    return real(step, *a, **k)

  monkeypatch.setattr(tt, "make_batch", crash_at_step_3)
  with pytest.raises(RuntimeError, match="killed"):
    tt.train_target(tmp_path / "b", tmp_path / "wb", cfg, model_cfg=model_cfg, log_every=1)
  monkeypatch.setattr(tt, "make_batch", real)
  resumed = tt.train_target(tmp_path / "b", tmp_path / "wb", cfg, model_cfg=model_cfg, log_every=1)
  from glance_jax.io import index_checkpoint, load_tensors
  a, b = index_checkpoint(straight), index_checkpoint(resumed)
  assert a.keys() == b.keys()
  ta = load_tensors(a, {k: jax.ShapeDtypeStruct(e.shape, jnp.float32) for k, e in a.items()})
  tb = load_tensors(b, {k: jax.ShapeDtypeStruct(e.shape, jnp.float32) for k, e in b.items()})
  for k in ta:
    np.testing.assert_allclose(np.asarray(ta[k]), np.asarray(tb[k]), rtol=1e-6, atol=1e-7, err_msg=k)
  steps = [json.loads(line)["step"] for line in (tmp_path / "wb" / "target_metrics.jsonl").read_text().splitlines()]
  assert steps == [1, 2, 3, 4]


def test_resumed_target_keeps_its_tokenizer(tmp_path, monkeypatch):
  """The state is trained on one tokenizer's ids: a resume whose output directory went missing gets
  that tokenizer back even if the suite's text (the corpus) changed; a different one is an error.
  (The resume test's config and model: one compiled step for both.)"""
  cfg = dataclasses.replace(tt.TargetTrainConfig(), steps=4, batch_size=4, save_every=2)
  model_cfg = tiny_config(**TINY)
  out, work = tmp_path / "out", tmp_path / "work"
  real_batch = tt.make_batch

  def crash_at_step_2(step, *a, **k):
    if step == 2:
      raise RuntimeError("killed")
    return real_batch(step, *a, **k)

  def crashed_run(out_dir, work_dir):
    with monkeypatch.context() as m:
      m.setattr(tt, "make_batch", crash_at_step_2)
      with pytest.raises(RuntimeError, match="killed"):
        tt.train_target(out_dir, work_dir, cfg, model_cfg=model_cfg)

  crashed_run(out, work)                                            # state saved at step 2
  first = (out / "tokenizer.json").read_bytes()
  assert (work / "tokenizer.json").read_bytes() == first
  real = tt.suite_corpus
  monkeypatch.setattr(tt, "suite_corpus", lambda **k: real(per_task=10, **k))
  import shutil
  shutil.rmtree(out)
  tt.train_target(out, work, cfg, model_cfg=model_cfg)              # resumes at step 2
  assert (out / "tokenizer.json").read_bytes() == first
  other = tmp_path / "other"
  crashed_run(other, tmp_path / "wother")
  assert (other / "tokenizer.json").read_bytes() != first             # the changed corpus' tokenizer
  (tmp_path / "wother" / "tokenizer.json").write_bytes(first)
  with pytest.raises(ValueError, match="not the tokenizer this run's state was trained with"):
    tt.train_target(other, tmp_path / "wother", cfg, model_cfg=model_cfg)


def test_target_continues_from_another_suites_target(tmp_path):
  """init_from (v5's recipe continues v4's target): the run starts from that target's weights and
  keeps its tokenizer and config; at learning rate 0 the result is that target; a build whose
  recipe continues a version that is not built says how to build it."""
  from glance_jax.bench.random_models import make_target
  from glance_jax.testing.checkpoint import write_checkpoint
  model_cfg = tiny_config(**TINY)
  first = write_checkpoint(tmp_path / "a", model_cfg, make_target(model_cfg, 3).params,
                           min_pixels=tt.MIN_PIXELS, max_pixels=tt.MAX_PIXELS)
  more = dataclasses.replace(tt.TargetTrainConfig(), steps=2, batch_size=4, save_every=2, init_from=str(first),
                             suite_version="v5", seq_len=320, lr=0.0)   # this tokenizer spells v5 longer
  second = tt.train_target(tmp_path / "b", tmp_path / "wb", more)
  for name in ("tokenizer.json", "config.json"):
    assert (second / name).read_bytes() == (first / name).read_bytes()
  from glance_jax.io import index_checkpoint, load_tensors
  a, b = index_checkpoint(first), index_checkpoint(second)
  like = {k: jax.ShapeDtypeStruct(e.shape, jnp.float32) for k, e in a.items()}
  ta, tb = load_tensors(a, like), load_tensors(b, like)
  assert all(np.array_equal(np.asarray(ta[k]), np.asarray(tb[k])) for k in ta)
  with pytest.raises(ValueError, match="init_from .*not a target directory"):
    tt.train_target(tmp_path / "c", tmp_path / "wc", dataclasses.replace(more, init_from=str(tmp_path)))
  with pytest.raises(ValueError, match="no target to continue.*--suite v4 --stages tasks,target"):
    build.init_target("v4", str(tmp_path / "missing"))


def test_torn_state_file_is_named(tmp_path):
  (tmp_path / "target_state.npz").write_bytes(b"not a zip")
  with pytest.raises(ValueError, match="target_state.npz: unreadable training state"):
    tt.load_state(tmp_path / "target_state.npz", {"w": jnp.zeros(2)}, ())


def test_target_trains_on_its_suite_and_the_probe_reads_it(tmp_path):
  """Four steps of the target on a suite's batches (v4's: TargetTrainConfig's defaults): its tokenizer
  is trained on the suite's text and fits them; the probe lines its entropies up with the answer's tokens."""
  cfg = dataclasses.replace(tt.TargetTrainConfig(), steps=4, batch_size=4, save_every=2)   # the resume test's
  out = tt.train_target(tmp_path / "t", tmp_path / "w", cfg, model_cfg=tiny_config(**TINY), log_every=1)
  metrics = [json.loads(x) for x in (tmp_path / "w" / "target_metrics.jsonl").read_text().splitlines()]
  assert [m["step"] for m in metrics] == [1, 2, 3, 4] and all(np.isfinite(m["loss"]) for m in metrics)
  from glance_jax.qwen3_vl.inputs import Processor
  from glance_jax.qwen3_vl.target import load_target
  s = suites.get(cfg.suite_version)
  tok = Processor.from_pretrained(str(out)).tokenizer
  answer = s.train_record("table", 0)[2]
  assert tok.decode(tok.encode(answer)) == answer
  recs = probe.token_entropies(load_target(out, dtype=jnp.float32), Processor.from_pretrained(str(out)),
                               "table", [0, 1], suite=s)
  for r in recs:
    assert r["answer"] == s.render("table", "heldout", r["index"])[2]
    assert len(r["tokens"]) == len(tok.encode(r["answer"])) + 1
    assert {t["kind"] for t in r["tokens"]} == {"clear", "unclear", "other"}
    assert all(0 <= t["H"] <= np.log(512) + 1e-3 for t in r["tokens"])
  summary = probe.summarize(recs)
  assert sum(summary[k]["tokens"] for k in probe.KINDS) == sum(len(r["tokens"]) for r in recs)


def test_restarted_learning_rate():
  lr = tt.learning_rate(tt.TargetTrainConfig(steps=300, warmup=10, lr=2e-3, restart_at=200, restart_lr=1e-3))
  assert float(lr(10)) == pytest.approx(2e-3) and float(lr(199)) == pytest.approx(1e-4, rel=0.05)
  assert float(lr(200)) == 0.0 and float(lr(210)) == pytest.approx(1e-3) and float(lr(299)) < 1e-4
  plain = tt.learning_rate(tt.TargetTrainConfig(steps=300, warmup=10, lr=2e-3))
  assert float(plain(150)) == pytest.approx(float(optax.warmup_cosine_decay_schedule(0, 2e-3, 10, 300, 1e-4)(150)))
  with pytest.raises(ValueError, match="restart_at 300 must be in"):
    tt.make_optimizer(tt.TargetTrainConfig(steps=300, restart_at=300))


def test_build_recipe_and_head_config_with_the_suite_override():
  from glance_jax.train.config import load_config
  v4 = suites.get("v4")      # v4's recipe restarts its learning rate; v5's continues v4's target
  cfg = dataclasses.replace(tt.TargetTrainConfig(), suite_version="v4", **v4.TARGET_TRAIN)
  lr = tt.learning_rate(cfg)
  assert cfg.restart_at == 12000 and float(lr(12000)) == 0.0 and float(lr(12100)) == pytest.approx(cfg.restart_lr)
  s = suites.get(suites.DEFAULT)
  assert s.TARGET_TRAIN.get("init_from") in (None, *suites.VERSIONS)
  out, workdir = build.default_dirs(suites.DEFAULT)
  assert out == paths.SHIPPED
  head = load_config(build.HEAD_CONFIG)
  assert head == load_config(build.HEAD_CONFIG, [f"suite={suites.DEFAULT}"])
  assert head.target == str(paths.SHIPPED / "target") and head.workdir == str(workdir / "head_run")
  assert head.task_files == tuple(str(workdir / "data" / f"{t}_train.jsonl") for t in s.TASKS)
  assert load_config(build.HEAD_CONFIG, ["steps=7", "suite=v4"]).steps == 7
  with pytest.raises(ValueError, match="unknown testbed suite version 'v0'"):
    load_config(build.HEAD_CONFIG, ["suite=v0"])
  with pytest.raises(ValueError, match="unknown config key 'suit'.*get_config takes suite"):
    load_config(build.HEAD_CONFIG, ["suit=v4"])


def test_build_flags_are_checked(tmp_path, capsys):
  with pytest.raises(SystemExit):
    build.main(["--heldout", "65", "--workdir", str(tmp_path / "w")])
  assert "--heldout 65: a suite reserves only 64" in capsys.readouterr().err
  with pytest.raises(SystemExit):
    build.main(["--out", str(tmp_path / "tb"), "--stages", "eval", "suite=v4"])
  assert "suite= is set by --suite" in capsys.readouterr().err
  (tmp_path / "tb").mkdir()
  (tmp_path / "tb" / "eval.json").write_text("{}")
  with pytest.raises(SystemExit):
    build.main(["--out", str(tmp_path / "tb"), "--stages", "eval", "--workdir", str(tmp_path / "w")])
  assert "suite.json: not found" in capsys.readouterr().err
  (tmp_path / "tb" / suites.MARKER).write_text('{"suite_version": "v1"}')
  with pytest.raises(SystemExit):
    build.main(["--out", str(tmp_path / "tb"), "--stages", "eval", "--workdir", str(tmp_path / "w")])
  assert "unknown testbed suite version 'v1'" in capsys.readouterr().err


@pytest.mark.slow
def test_build_runs_end_to_end(tmp_path):
  """The one-command build at smoke scale (the full architecture, 4 target and 4 head steps; about
  1.5 min on 2 shared cores); test_target_trains_on_its_suite_and_the_probe_reads_it covers the
  target part quickly."""
  out = tmp_path / "testbed"
  # The default suite continues another suite's target, which a clean checkout lacks: the shipped
  # target (the same shapes) stands in for it.
  build.main(["--out", str(out), "--workdir", str(tmp_path / "work"), "--heldout", "2", "--train-prompts", "8",
              "--target-steps", "4", "--init-target", str(paths.TARGET),
              "--draft-steps", "4", "--parent", "steps=4", "--parent", "save_every=2",
              "--eagle3", "steps=4", "--eagle3", "save_every=2",
              "steps=4", "save_every=2", "regen_batch_size=8"])
  assert suites.read_version(out) == suites.DEFAULT
  report = json.loads((out / "eval.json").read_text())
  s = suites.get(suites.DEFAULT)
  assert set(report) == set(s.TASKS) and report["chart"]["n_fields"] == 12
  assert (out / "head" / "config.json").is_file() and (out / "target" / "model.safetensors").is_file()
  assert (out / "eagle3" / "config.json").is_file() and (out / "eagle3" / "model.safetensors").is_file()


# --- the shipped testbed ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def shipped():
  assert paths.available(), f"the shipped testbed is missing under {paths.SHIPPED}"
  from glance_jax.head import Head
  from glance_jax.qwen3_vl.inputs import Processor
  from glance_jax.qwen3_vl.target import load_target
  target = load_target(paths.TARGET, dtype=jnp.float32)
  processor = Processor.from_pretrained(str(paths.TARGET))
  head = Head.load(paths.HEAD, target=target)
  records = {t: read_task_file(f, on_error="raise") for t, f in zip(paths.suite().TASKS, paths.task_files())}
  return target, processor, head, records


def test_shipped_heldout_files_are_what_their_suite_renders():
  """testbed/ ships the default suite version, and every held-out record (prompt, answer, PNG) is
  what that version's code renders."""
  import PIL.Image
  assert suites.read_version(paths.SHIPPED) == suites.DEFAULT
  s = paths.suite()
  for task, path in zip(s.TASKS, paths.task_files()):
    recs = read_task_file(path, on_error="raise")
    assert [s.record_index(r.id) for r in recs] == list(range(build.HELDOUT_PER_TASK)), task
    for r in recs:
      image, question, answer = s.render(task, "heldout", s.record_index(r.id))
      assert (r.prompt, r.answers[0]) == (question, answer), r.id
      assert np.array_equal(np.asarray(PIL.Image.open(r.images[0]).convert("RGB")), np.asarray(image)), r.id


def _fields_read(task, answers, recs) -> float:
  """Share of the clear fields (what the image shows for sure) the answers got right."""
  s = paths.suite()
  scenes = [s.record(task, "heldout", s.record_index(r.id))[0] for r in recs]
  return evaluate.pool_scores([evaluate.score(task, s.reading(a), sc) for a, sc in zip(answers, scenes)])["fields_clear"]


def test_shipped_target_logits_equal_transformers(shipped):
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  from glance_jax.qwen3_vl.inputs import prepare_inputs
  target, processor, _, records = shipped
  hf = transformers.Qwen3VLForConditionalGeneration.from_pretrained(paths.TARGET, dtype=torch.float32).eval()
  for task in paths.suite().TASKS:
    rec = records[task][0]
    inp = prepare_inputs(processor, rec.prompt, list(rec.images))
    ids = torch.from_numpy(np.asarray(inp.input_ids, np.int64))
    with torch.no_grad():
      ref = hf(input_ids=ids, attention_mask=torch.ones_like(ids),
               mm_token_type_ids=(ids == target.config.image_token_id).long(),
               pixel_values=torch.from_numpy(inp.pixel_values),
               image_grid_thw=torch.from_numpy(np.asarray(inp.image_grid_thw, np.int64))).logits.numpy()[0]
    got = np.asarray(target.prefill(inp, target.init_cache(1, ids.shape[1] + 8)).logits[0])
    assert np.abs(got - ref).max() <= 1e-4 * max(1.0, np.abs(ref).max()), task


def test_shipped_target_reads_its_images(shipped):
  """Held-out grounded questions answered right with the right image, wrong with another one."""
  target, processor, _, records = shipped
  for task in paths.suite().GROUNDED:
    recs = records[task][:4]
    right = evaluate.greedy_answers(target, processor, recs)
    swapped = [dataclasses.replace(r, images=recs[(i + 1) % len(recs)].images) for i, r in enumerate(recs)]
    wrong = evaluate.greedy_answers(target, processor, swapped)
    acc, acc_swapped = _fields_read(task, right, recs), _fields_read(task, wrong, recs)
    # chance is ~1/9 per chart field (a height), ~1/1200 per table row
    assert acc >= 0.4 and acc_swapped < acc - 0.25, (task, acc, acc_swapped, right, wrong)


def test_glance_is_lossless_on_the_testbed_and_grounded_rounds_start_surer(shipped):
  """Lossless on held-out prompts of every task, whole answers, at N = 63; the grounded tasks' rounds
  start at lower target entropy than the open task's (the paper's finding, on this testbed); every
  task accepts in the paper's range. (v5's caption still accepts more than the grounded tasks, where
  the paper's captioning accepts least: docs/testbed.md, not asserted.) The pair widened as the
  memory regime widens it (x2 here: the same code path as x8) decodes the same tokens with the same
  accepted blocks: a cost regime that keeps the trained acceptance."""
  from glance_jax.decode.generate import generate
  from glance_jax.qwen3_vl.inputs import prepare_inputs
  from glance_jax.testbed import regimes
  target, processor, head, records = shipped
  with pytest.MonkeyPatch.context() as m:
    m.setitem(regimes.WIDTH, "memory", 2)
    wide, wide_head = regimes.widen_pair(target, head, "memory")
  assert wide.config.text.hidden_size == 2 * target.config.text.hidden_size
  tau, entropy = {}, {}
  n = paths.suite().ANSWER_TOKENS            # whole answers
  for task in paths.suite().TASKS:
    recs = records[task][:4]
    inputs = prepare_inputs(processor, [r.prompt for r in recs], [list(r.images) for r in recs])
    ar = generate(target, inputs, method="ar", max_new_tokens=n)
    gl = generate(target, inputs, head=head, method="glance", budget=63, max_new_tokens=n)
    for a, g in zip(ar.tokens, gl.tokens):
      np.testing.assert_array_equal(a, g)
    tau[task], entropy[task] = gl.tau, float(np.mean(np.concatenate(gl.root_entropy)))
    if task == "table":
      gw = generate(wide, inputs, head=wide_head, method="glance", budget=63, max_new_tokens=n)
      for a, g, x, y in zip(gl.tokens, gw.tokens, gl.accepted, gw.accepted):
        np.testing.assert_array_equal(a, g)
        np.testing.assert_array_equal(x, y)
  for task in paths.suite().GROUNDED:
    assert entropy[task] < entropy["caption"], (tau, entropy)
  assert min(tau.values()) > 2.5, tau


def test_decode_py_without_arguments_runs_the_testbed():
  from glance_jax.testbed.demo import run_demo
  lines = []
  rows = run_demo(prompts_per_task=1, repeats=1, max_new_tokens=24, regime="compute", print_fn=lines.append)
  assert [r["task"] for r in rows] == list(paths.suite().TASKS)
  assert all(r["same_as_ar"] for r in rows)
  assert any("speedup" in line for line in lines)
  # the shipped head carries a parent correction, so the demo runs its parent-conditioned tree
  assert {r["scores"] for r in rows} == {"parent-conditioned tree"}
  assert "parent-conditioned tree" in lines[0]


def test_shipped_rivals_are_lossless_and_accept(shipped):
  """The rivals shipped beside the GLANCE head (eagle3/: EAGLE-3 trained on the head's rows; draft/:
  the two-model draft) load for the shipped target, emit AR's tokens on a held-out prompt of every
  task, and accept more than one token a round (they were trained on this target's answers)."""
  from glance_jax.decode.generate import generate
  from glance_jax.eagle3 import load_eagle3
  from glance_jax.qwen3_vl.inputs import prepare_inputs
  from glance_jax.qwen3_vl.target import load_target
  target, processor, _, records = shipped
  e3 = load_eagle3(paths.rival("eagle3"), target.config, dtype=target.dtype)
  draft = load_target(paths.rival("draft"), dtype=target.dtype)
  n = paths.suite().ANSWER_TOKENS
  for task in paths.suite().TASKS:
    rec = records[task][1]
    inputs = prepare_inputs(processor, rec.prompt, list(rec.images))
    ar = generate(target, inputs, method="ar", max_new_tokens=n)
    for method, head in (("eagle3", e3), ("eagle3-chain", e3), ("two-model", draft)):
      res = generate(target, inputs, head=head, method=method, max_new_tokens=n)
      np.testing.assert_array_equal(res.tokens[0], ar.tokens[0])
      assert res.tau > 1.5, (task, method, res.tau)
