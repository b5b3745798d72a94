"""At temperature > 0 GLANCE's output distribution is the target's own.

A tiny target with a 32-token vocabulary; thousands of rows of one prompt in one batch (every row
draws its own samples). The 2nd and 3rd emitted tokens (decided by the tree walk) of glance and of
AR sampling are compared with a chi-square two-sample test; a deliberately wrong walk (the root's
choice replaced by the head's top token, i.e. the first draft accepted unchecked) fails it."""

import types

import jax
import numpy as np
import pytest

from glance_jax.config import tiny_config
from glance_jax.decode import loop
from glance_jax.decode.generate import generate
from glance_jax.decode.sampling import SamplingConfig
from glance_jax.decode.verify import walk
from tests import decode_fixtures as fx

stats = pytest.importorskip("scipy.stats")

ROWS = 3000


@pytest.fixture(scope="module")
def setup():
  cfg = tiny_config(vocab_size=32, layers=2, deepstack=(0,), vision_depth=1)
  target = fx.lively_target(cfg, seed=31)
  head = fx.lively_head(target, seed=32)
  ids = np.tile(np.array([[3, 7, 1, 9, 4, 7, 1]]), (ROWS, 1))
  inputs = types.SimpleNamespace(input_ids=ids, attention_mask=np.ones_like(ids, bool),
                                 positions=np.broadcast_to(np.arange(7), (3, ROWS, 7)).copy(),
                                 rope_delta=np.zeros(ROWS, np.int32), pixel_values=None, image_grid_thw=None)
  return target, head, inputs


def _tokens(res, k):
  return np.array([t[k] for t in res.tokens])


def _same_distribution(a, b, vocab):
  table = np.stack([np.bincount(a, minlength=vocab), np.bincount(b, minlength=vocab)])
  table = table[:, table.sum(0) > 0]
  return stats.chi2_contingency(table)[1]


def _run(target, head, inputs, method, budget, seed, **kw):
  return generate(target, inputs, head=head, method=method, budget=budget, max_new_tokens=3,
                  temperature=1.0, top_k=kw.get("top_k", 0), top_p=kw.get("top_p", 1.0), seed=seed, stop_tokens=())


@pytest.mark.parametrize("sampling", [dict(), dict(top_k=8, top_p=0.9)])
def test_glance_sampling_matches_ar_sampling(setup, sampling):
  target, head, inputs = setup
  v = target.config.text.vocab_size
  ar = _run(target, head, inputs, "ar", 1, seed=1, **sampling)
  gl = _run(target, head, inputs, "glance", 15, seed=2, **sampling)
  assert np.mean(np.concatenate(gl.accepted)) > 0.05     # the tree is really used
  for k in (1, 2):
    assert len(np.unique(_tokens(ar, k))) > 3             # a real distribution, not a point mass
    assert _same_distribution(_tokens(ar, k), _tokens(gl, k), v) > 1e-3
  if sampling:  # top-k: given the same first token, at most k distinct second tokens
    first, second = _tokens(gl, 0), _tokens(gl, 1)
    assert max(len(np.unique(second[first == f])) for f in np.unique(first)) <= 8


def test_target_generate_ar_draws_from_the_same_distribution(setup):
  """Target.generate_ar at T = 1 (engine.ar_decode: what sampled regeneration writes) against the
  decode loop's AR sampling: tokens 1-3 agree in distribution; at T = 0.3 the same test tells them
  apart (so it has the power to fail)."""
  target, head, inputs = setup
  v = target.config.text.vocab_size
  ar = _run(target, head, inputs, "ar", 1, seed=1)
  hot, _ = target.generate_ar(inputs, 3, sampling=SamplingConfig(1.0), key=jax.random.key(7), stop_tokens=())
  for k in (0, 1, 2):
    assert _same_distribution(_tokens(ar, k), hot[:, k], v) > 1e-3
  cold, _ = target.generate_ar(inputs, 3, sampling=SamplingConfig(0.3), key=jax.random.key(7), stop_tokens=())
  assert _same_distribution(_tokens(ar, 1), cold[:, 1], v) < 1e-6
  with pytest.raises(ValueError, match="needs a PRNG key"):
    target.generate_ar(inputs, 3, sampling=SamplingConfig(1.0))


def test_wrong_walk_fails_the_same_test(setup, monkeypatch):
  target, head, inputs = setup
  v = target.config.text.vocab_size

  def unchecked_first_draft(tree, choice, max_depth):
    return walk(tree, choice.at[:, 0].set(tree.tokens[:, 0]), max_depth)

  ar = _run(target, head, inputs, "ar", 1, seed=1)
  monkeypatch.setattr(loop, "walk", unchecked_first_draft)
  try:
    bad = _run(target, head, inputs, "glance", 14, seed=2)   # a new budget: traced with the bad walk
  finally:
    jax.clear_caches()
  assert _same_distribution(_tokens(ar, 1), _tokens(bad, 1), v) < 1e-6


def test_bad_sampling_arguments(setup):
  target, head, inputs = setup
  with pytest.raises(ValueError, match="temperature must be >= 0"):
    generate(target, inputs, method="ar", temperature=-0.5)
  with pytest.raises(ValueError, match="top_p"):
    SamplingConfig(temperature=1.0, top_p=0.0)
