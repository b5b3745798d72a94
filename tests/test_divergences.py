"""glance_jax/bench/audit.py's divergence check: where an arm leaves AR, AR's own step there (prefill
and one-row decode steps, as generate(method="ar") runs them), and whether that was a float tie
(the other token is AR's runner-up within TIE_GAP) or a fault. On the shipped testbed pair, fp32."""

import jax.numpy as jnp
import numpy as np
import pytest

from glance_jax.bench import audit
from glance_jax.data.records import read_task_file
from glance_jax.decode.generate import generate
from glance_jax.qwen3_vl.inputs import Processor, prepare_inputs
from glance_jax.qwen3_vl.target import load_target
from glance_jax.testbed import paths

N = 24


@pytest.fixture(scope="module")
def ar_run():
  target = load_target(paths.TARGET, dtype=jnp.float32)
  processor = Processor.from_pretrained(str(paths.TARGET))
  rec = read_task_file(paths.task_files()[0], on_error="raise")[0]
  inputs = prepare_inputs(processor, rec.prompt, list(rec.images))
  ar = np.asarray(generate(target, inputs, method="ar", max_new_tokens=N).tokens[0])
  return target, inputs, ar


def test_ar_step_choice_is_the_token_ar_emitted(ar_run):
  """At every slot, the step's argmax is AR's token, and its top-2 gap is the teacher-forced pass's
  to float rounding (the many-row pass is another computation of the same logits)."""
  target, inputs, ar = ar_run
  tf_gap, _ = audit.teacher_forced_gaps(target, inputs, [ar])
  for at in (0, 5, len(ar) - 1):
    top, gap = audit.ar_step_choice(target, inputs, ar, at, N)
    assert top[0] == ar[at] and top[1] != ar[at] and gap >= 0
    assert gap == pytest.approx(float(tf_gap[0, at]), abs=1e-4)


def test_a_tie_is_the_runner_up_within_the_gap_and_anything_else_a_fault(ar_run):
  target, inputs, ar = ar_run
  at = 5
  top, gap = audit.ar_step_choice(target, inputs, ar, at, N)
  runner_up, wrong = ar.copy(), ar.copy()
  runner_up[at] = top[1]
  wrong[at] = next(t for t in range(target.config.text.vocab_size) if t not in top)
  check = lambda toks, tie_gap: audit.divergences(target, {"p": inputs}, {"p": ar}, {"p": toks},
                                                  max_new_tokens=N, tie_gap=tie_gap)
  [d] = check(runner_up, gap + 1.0)
  assert d == dict(id="p", at=at, ar_token=int(ar[at]), token=int(top[1]), gap=pytest.approx(gap), tie=True)
  assert check(runner_up, gap / 2)[0]["tie"] is False          # the same token, a gap too wide for a tie
  assert check(wrong, np.inf)[0]["tie"] is False                # not AR's runner-up: a fault at any gap
  assert check(ar[:at], np.inf)[0]["token"] == -1               # the other run stopped early
  assert check(ar, np.inf) == []
