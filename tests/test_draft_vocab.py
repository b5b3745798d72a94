"""The block head's draft vocabulary (head/draft_vocab.py): marginals over K gathered lm_head rows,
tokens mapped back to target ids, decoding still lossless.

A tiny random target (V = 512) and a random head; the vocabulary is the K most frequent tokens of the
target's own greedy answers (as the training rows' counts would give)."""

import numpy as np
import pytest

from glance_jax.bench.engine import generate
from glance_jax.decode import methods
from glance_jax.decode.drafters import block
from glance_jax.head import Head
from glance_jax.head import draft_vocab as dv
from tests import decode_fixtures as fx

MAX_NEW = 37
K = 96


@pytest.fixture(scope="module")
def setup():
  target, head, batches = fx.sixty_prompts()
  refs = [target.generate_greedy(b, MAX_NEW, stop_tokens=())[0] for b in batches]
  counts = np.bincount(np.concatenate([r[r >= 0] for r in refs]), minlength=target.config.text.vocab_size)
  return target, head, batches, refs, counts


def _rows(toks):
  return [list(r[r >= 0]) for r in toks]


def _with_counts(head, counts):
  import dataclasses
  return dataclasses.replace(head, token_counts=counts)


def test_top_ids_coverage_and_errors():
  counts = np.array([5, 0, 9, 9, 1, 0])
  assert list(dv.top_ids(counts, 3)) == [0, 2, 3]          # ascending; ties to the lower id
  assert list(dv.top_ids(counts, 5)) == [0, 1, 2, 3, 4]    # unseen tokens fill by id
  assert dv.coverage(counts, dv.top_ids(counts, 3)) == pytest.approx(23 / 24)
  with pytest.raises(ValueError, match=r"draft vocabulary size 7 must be in \[1, 6\]"):
    dv.top_ids(counts, 7)


def test_full_vocabulary_is_the_head_without_one(setup):
  """K = V with every id: the same marginals path through gathered rows gives the same tokens and
  the same acceptances as the head drafting over the target's lm_head."""
  target, head, batches, refs, counts = setup
  full = _with_counts(head, counts).with_draft_vocab(target, target.config.text.vocab_size)
  for b in batches[:2]:
    a = generate(target, b, head=head, method="glance", budget=31, max_new_tokens=MAX_NEW, stop_tokens=())
    c = generate(target, b, head=full, method="glance", budget=31, max_new_tokens=MAX_NEW, stop_tokens=())
    assert [list(t) for t in a.tokens] == [list(t) for t in c.tokens]
    assert all(np.array_equal(x, y) for x, y in zip(a.accepted, c.accepted))


@pytest.mark.parametrize("method,budget", [("chain", 15), ("glance", 15), ("glance", 63)])
def test_lossless_and_only_vocabulary_tokens_drafted(setup, method, budget):
  target, head, batches, refs, counts = setup
  small = _with_counts(head, counts).with_draft_vocab(target, K)
  ids = set(np.asarray(small.draft_vocab.ids).tolist())
  assert small.draft_coverage > 0.5 and len(ids) == K
  accepted, full = [], []
  for i, (b, ref) in enumerate(zip(batches, refs)):
    res = generate(target, b, head=small, method=method, budget=budget, max_new_tokens=MAX_NEW, stop_tokens=())
    assert [list(t) for t in res.tokens] == _rows(ref), (method, budget)
    accepted.append(np.concatenate(res.accepted))
    if i < 3:
      full.append(np.concatenate(generate(target, b, head=head, method=method, budget=budget,
                                          max_new_tokens=MAX_NEW, stop_tokens=()).accepted))
  # mapped drafts are accepted (the ids are right), more often than the random head's over all V:
  # restricted to the tokens the target emits, a random head guesses better
  assert np.mean(np.concatenate(accepted)) > max(0.005, np.mean(np.concatenate(full)))
  # the drafter's own proposal: every valid node's token is in the vocabulary
  plan = methods.plan(target, method, head=small, budget=budget)
  assert plan.drafter.draft_vocab == K
  log_q = np.log(np.full((1, 15, K), 1.0 / K, np.float32)) + np.random.default_rng(0).normal(size=(1, 15, K))
  prop = plan.drafter.target_ids(plan.params, plan.drafter.tree(np.asarray(log_q - np.log(np.exp(log_q).sum(-1, keepdims=True)), np.float32)))
  toks = np.asarray(prop.tree.tokens)[np.asarray(prop.tree.valid)]
  assert set(toks.tolist()) <= ids and len(set(toks.tolist())) > 1


def test_marginals_are_the_full_ones_renormalised(setup):
  """After the prompt, log q over the vocabulary == log_softmax of the full log q at its ids."""
  import jax
  import jax.numpy as jnp
  from glance_jax.decode import loop
  from glance_jax.static_args import merge
  target, head, batches, refs, counts = setup
  small = _with_counts(head, counts).with_draft_vocab(target, K)
  b = batches[1]
  out = []
  for h in (head, small):
    plan = methods.plan(target, "glance", head=h, budget=15)
    st = loop.prefill(target.jit_graphdef, target.flat_params, plan.drafter, plan.params, plan.policy,
                      target.prompt(b), jnp.asarray(b.rope_delta, jnp.int32), jnp.asarray([-1], jnp.int32),
                      jax.random.key(0), cfg=loop.LoopConfig(max_new_tokens=8), max_length=64)
    log_q, _ = plan.drafter.marginals(plan.params, merge(target.graphdef, target.params), st.drafter, st)
    out.append(np.asarray(log_q))
  assert out[0].shape[-1] == target.config.text.vocab_size and out[1].shape[-1] == K
  want = jax.nn.log_softmax(out[0][..., np.asarray(small.draft_vocab.ids)], axis=-1)
  np.testing.assert_allclose(out[1], np.asarray(want), atol=1e-5)


def test_samples_like_ar_at_temperature_one():
  from glance_jax.config import tiny_config
  cfg = tiny_config(vocab_size=32, layers=2, deepstack=(0,), vision_depth=1)
  target = fx.lively_target(cfg, seed=31)
  head = _with_counts(fx.lively_head(target, seed=32), np.arange(32)[::-1].copy())
  fx.assert_samples_like_ar(target, block.build(target, head.with_draft_vocab(target, 20), 15), vocab=32)


def test_counts_beside_the_head_load_and_errors(setup, tmp_path):
  target, head, batches, refs, counts = setup
  from glance_jax.head import save_head
  save_head(tmp_path / "h", head.config, head.params)
  loaded = Head.load(tmp_path / "h", target=target)
  assert loaded.token_counts is None
  with pytest.raises(ValueError, match="no token counts"):
    loaded.with_draft_vocab(target, K)
  with pytest.raises(FileNotFoundError, match=r"h/token_counts.npz: no token counts beside this head"):
    dv.load_counts(tmp_path / "h", 512)
  dv.save_counts(tmp_path / "h", counts)
  loaded = Head.load(tmp_path / "h", target=target)
  np.testing.assert_array_equal(loaded.token_counts, counts)
  dv.save_counts(tmp_path / "h", counts[:100])
  with pytest.raises(ValueError, match=r"token_counts.npz: 'counts' has shape \(100,\), the target's vocabulary is \(512,\)"):
    Head.load(tmp_path / "h", target=target)
  (tmp_path / "h" / dv.COUNTS_FILE).write_bytes(b"not an npz")
  with pytest.raises(ValueError, match="token_counts.npz: unreadable token counts"):
    Head.load(tmp_path / "h", target=target)
