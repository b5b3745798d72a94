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
  for cond in ("correct", "mismatched", "drafter_mismatched"):
    c = res[cond]
    assert 0 <= c["accepted"] <= 15 and c["tau"] == pytest.approx(c["accepted"] + 1) and c["entropy"] > 0
  for key, cond, field in (("accepted", "mismatched", "accepted"), ("entropy", "mismatched", "entropy"),
                           ("drafter_accepted", "drafter_mismatched", "accepted")):
    ch = res["change"][key]
    assert ch["lo"] <= ch["diff"] <= ch["hi"]
    assert ch["diff"] == pytest.approx(res[cond][field] - res["correct"][field])
  assert res["drafter_mismatched"]["entropy"] == res["mismatched"]["entropy"]   # the features' own target
  assert res["change"]["entropy"]["diff"] != 0.0                          # another image changes the target
  assert res["teacher_forced_agrees"] == 1.0
  with pytest.raises(ValueError, match="at least 2 records with images"):
    run_image_swap(target, head, records[:1] + [text_only], budget=BUDGET, max_new_tokens=MAX_NEW)
  with pytest.raises(ValueError, match="target.path is None"):
    run_image_swap(dataclasses.replace(target, path=None), head, records, budget=BUDGET, max_new_tokens=MAX_NEW)


def test_drafter_swap_is_the_mismatched_drafts_walked_against_the_correct_target(setup):
  """also_verify: the drafts of the mismatched prompt's features, walked against the correct
  image's greedy choices; against the mismatched target's own choices it is the system swap, and
  against the correct prompt's drafts it is the correct condition."""
  target, head, records = setup
  processor = Processor.from_pretrained(str(target.path))
  rec, other = records[0], records[1]
  inputs = prepare_inputs(processor, rec.prompt, list(rec.images))
  other_inputs = prepare_inputs(processor, rec.prompt, list(other.images))
  traj = np.asarray(generate(target, inputs, method="ar", max_new_tokens=MAX_NEW).tokens[0])
  cor = teacher_forced_rounds(target, head, inputs, traj, budget=BUDGET, also_verify=traj)
  np.testing.assert_array_equal(cor["accepted_also"], cor["accepted"])   # verify with y == verify with g == y
  mis = teacher_forced_rounds(target, head, other_inputs, traj, budget=BUDGET)
  both = teacher_forced_rounds(target, head, other_inputs, traj, budget=BUDGET, also_verify=mis["greedy"])
  np.testing.assert_array_equal(both["accepted_also"], mis["accepted"])
  drf = teacher_forced_rounds(target, head, other_inputs, traj, budget=BUDGET, also_verify=traj)
  assert drf["accepted_also"].shape == cor["accepted"].shape
  assert not np.array_equal(mis["greedy"], traj)                          # the swap moves the target here,
  assert not np.array_equal(drf["accepted_also"], mis["accepted"])        # so the two swaps differ
  with pytest.raises(ValueError, match="also_verify"):
    teacher_forced_rounds(target, head, inputs, traj, budget=BUDGET, also_verify=traj[:-1])
