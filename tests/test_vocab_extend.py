"""glance_jax/testbed/vocab_extend.py grows the shipped target's vocabulary to one token a word:

  tokenizer  every chosen word of a suite's answers encodes to exactly one token, every answer
             decodes back to itself, old ids keep their tokens and new ids follow them, and the
             answers take fewer tokens; a non-BPE tokenizer is refused
  target     the grown target's new embedding rows are the means of their old pieces' rows, its last
             row (the head's mask id) is the old last row, its
             config's vocab_size is the table's, and on inputs of old ids (text and image) its logits
             over the old vocabulary are the shipped target's
"""

import json

import jax.numpy as jnp
import numpy as np
import pytest

from glance_jax.testbed import paths
from glance_jax.testbed import target_train as tt
from glance_jax.testbed import vocab_extend as ve
from tests import decode_fixtures as fx

SUITE = "v5c"


@pytest.fixture(scope="module")
def spec():
  return json.loads((paths.TARGET / "tokenizer.json").read_text())


@pytest.fixture(scope="module")
def corpus():
  return tt.suite_corpus(40, version=SUITE)


def test_every_word_one_token_and_every_answer_round_trips(spec, corpus):
  tok = ve._tokenizer(spec)
  words = ve.corpus_words(tok, corpus)
  assert {"Ġseems", "Ġappears", "ĠLine"} <= set(words)          # several pieces on the shipped vocabulary
  assert all(len(ve.pieces(tok, w)) > 1 and tok.decoder.decode([w]).strip().isalpha() for w in words)
  new, origin = ve.extend_tokenizer(spec, words)
  grown = ve._tokenizer(new)
  old_vocab = spec["model"]["vocab"]
  assert all(new["model"]["vocab"][t] == i for t, i in old_vocab.items())
  first = ve._next_id(spec)
  assert sorted(new["model"]["vocab"][t] for t in origin) == list(range(first, first + len(origin)))
  for w in words:
    assert len(ve.pieces(grown, w)) == 1, w
    assert "".join(origin[w]) == w and all(p in old_vocab for p in origin[w])
  for text in corpus:
    assert grown.decode(grown.encode(text).ids) == text
  before = sum(len(tok.encode(t).ids) for t in corpus)
  after = sum(len(grown.encode(t).ids) for t in corpus)
  assert after < 0.85 * before, (before, after)


def test_a_non_bpe_tokenizer_is_refused(spec):
  other = json.loads(json.dumps(spec))
  other["model"]["type"] = "WordPiece"
  with pytest.raises(ValueError, match="BPE"):
    ve.extend_tokenizer(other, ["Ġseems"])


def test_grown_target_keeps_the_old_logits(tmp_path, spec, corpus):
  from glance_jax.qwen3_vl.target import load_target
  from glance_jax.qwen3_vl.weights import state_tensors
  tok = ve._tokenizer(spec)
  words = ve.corpus_words(tok, corpus)
  report = ve.extend_target(paths.TARGET, tmp_path / "grown", words)
  old = load_target(paths.TARGET, dtype=jnp.float32)
  new = load_target(tmp_path / "grown", dtype=jnp.float32)
  v0, v1 = old.config.text.vocab_size, new.config.text.vocab_size
  assert v1 == report["vocab_size"] == v0 + report["added"] + 1 and report["added"] >= len(words)
  grown = json.loads((tmp_path / "grown" / "tokenizer.json").read_text())
  t0, t1 = state_tensors(old.params)[ve._EMBED], state_tensors(new.params)[ve._EMBED]
  np.testing.assert_array_equal(t1[:v0], t0)
  np.testing.assert_array_equal(t1[-1], t0[-1])     # the head's mask id (the last) reads as before
  old_ids = spec["model"]["vocab"]
  for w in words[:5]:
    parts = ve.pieces(tok, w)
    np.testing.assert_allclose(t1[grown["model"]["vocab"][w]], np.mean([t0[old_ids[p]] for p in parts], 0), rtol=1e-6)
  b = fx.batch(old.config, seed=2, rows=2, with_images=True)
  mask = np.asarray(b.attention_mask)
  la = np.asarray(old.prefill(b, old.init_cache(*np.asarray(b.input_ids).shape)).logits)
  lb = np.asarray(new.prefill(b, new.init_cache(*np.asarray(b.input_ids).shape)).logits)
  assert la.shape[-1] == v0 and lb.shape[-1] == v1 and np.abs(la[mask]).max() > 1.0
  np.testing.assert_allclose(lb[mask][:, :v0], la[mask], rtol=1e-5, atol=1e-5)
