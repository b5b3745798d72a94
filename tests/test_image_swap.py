"""glance_jax/bench/image_swap.py: the teacher-forced accepted length a_t is what real GLANCE
decoding records at its rounds' roots, and the image test's report (tiny random target + head)."""

import dataclasses

import numpy as np
import pytest

from glance_jax.bench.image_swap import run_image_swap, teacher_forced_rounds
from glance_jax.data.records import PromptRecord
from glance_jax.data.synthetic import read_synthetic
from glance_jax.decode.generate import generate
from glance_jax.qwen3_vl.inputs import Processor, prepare_inputs
from glance_jax.qwen3_vl.target import load_target
from glance_jax.testing.checkpoint import make_tiny_checkpoint
from tests.decode_fixtures import lively_head

BUDGET = 63
MAX_NEW = 32


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
  root = tmp_path_factory.mktemp("swap")
  target = load_target(make_tiny_checkpoint(root / "ckpt", seed=5), dtype=np.float32)
  head = lively_head(target, seed=6, num_layers=2)
  records = list(read_synthetic(root, "train"))
  return target, head, records


def test_teacher_forced_accepted_length_equals_real_decoding(setup):
  target, head, records = setup
  processor = Processor.from_pretrained(str(target.path))
  nonzero = 0
  for rec in records[:2]:
    inputs = prepare_inputs(processor, rec.prompt, list(rec.images))
    traj = np.asarray(generate(target, inputs, method="ar", max_new_tokens=MAX_NEW).tokens[0])
    real = generate(target, inputs, head=head, method="glance", budget=BUDGET, max_new_tokens=MAX_NEW)
    np.testing.assert_array_equal(real.tokens[0], traj)                  # lossless: the same trajectory
    tf = teacher_forced_rounds(target, head, inputs, traj, budget=BUDGET)
    n = len(traj)
    assert tf["accepted"].shape == tf["entropy"].shape == (n - 1,)
    np.testing.assert_array_equal(tf["greedy"], traj)                    # the teacher-forced argmax is y
    t = 0
    for a_real, h_real in zip(real.accepted[0], real.root_entropy[0]):
      if t < n - 1:  # a real round may accept past the trajectory's end; a_t stops there
        assert tf["accepted"][t] == min(int(a_real), n - 1 - t), (rec.id, t, a_real)
        np.testing.assert_allclose(tf["entropy"][t], h_real, rtol=1e-4, atol=1e-4)
        nonzero += int(a_real > 0)
      t += int(a_real) + 1
  assert nonzero >= 2                                                     # not a vacuous all-zero comparison


def test_image_swap_report(setup):
  target, head, records = setup
  text_only = PromptRecord(id="no-image", task="synthetic", split="train", prompt="Say hi.", images=())
  records = records[:4]                                                   # one image each (the pair record aside)
  res = run_image_swap(target, head, records + [text_only], budget=BUDGET, max_new_tokens=MAX_NEW, seed=1)
  assert res["records"] == len(records) and res["skipped_no_image"] == 1
  assert res["budget"] == BUDGET and res["max_new_tokens"] == MAX_NEW and res["seed"] == 1
  assert res["positions"] == sum(r["positions"] for r in res["per_record"]) > 0
  assert {r["id"] for r in res["per_record"]} == {r.id for r in records}
  assert all(r["mismatched_with"] != r["id"] for r in res["per_record"])
  for cond in ("correct", "mismatched"):
    c = res[cond]
    assert 0 <= c["accepted"] <= 15 and c["tau"] == pytest.approx(c["accepted"] + 1) and c["entropy"] > 0
  for key in ("accepted", "entropy"):
    ch = res["change"][key]
    assert ch["lo"] <= ch["diff"] <= ch["hi"]
    assert ch["diff"] == pytest.approx(res["mismatched"][key] - res["correct"][key])
  assert res["change"]["entropy"]["diff"] != 0.0                          # another image changes the target
  assert res["teacher_forced_agrees"] == 1.0
  with pytest.raises(ValueError, match="at least 2 records with images"):
    run_image_swap(target, head, records[:1] + [text_only], budget=BUDGET, max_new_tokens=MAX_NEW)
  with pytest.raises(ValueError, match="target.path is None"):
    run_image_swap(dataclasses.replace(target, path=None), head, records, budget=BUDGET, max_new_tokens=MAX_NEW)
