"""A word-level vocabulary for a trained testbed target: one token a word, learned by continuation.

The shipped testbed's 512-token vocabulary (trained on v4's text) spells most suite words in 2-8
pieces ("Ġsee m s", "S h a p e"). That is what keeps three of issue 23's must-shows out of reach
(docs/testbed.md "Suite v5c"): a round's root lands inside a word whose rest its first piece fixes
(no entropy for the law to read), and a head with its context zeroed drafts those rests for free
(the caption's zeroed tau 1.37 with or without its subject). The paper's target has one token for
nearly every word. Retraining a target from scratch on a new tokenizer costs the ~14000 steps that
taught v4's to read; this instead grows the trained one:

  tokenizer  for each word (a pre-token of the target's own pre-tokenizer, e.g. "Ġseems") that is
             more than one piece, BPE merges appended after the existing ones chain its pieces left
             to right into one token ("Ġsee"+"m", then "Ġseem"+"s"). Appended merges rank last, so
             text the existing merges fully tokenized before still reaches the same pieces first;
             every word is checked to encode to exactly one token afterwards.
  target     the embedding table (tied with lm_head in the testbed) gains one row per new token,
             the mean of its pieces' rows, and a last row for the head's mask id (a copy of the old
             last row, which no text encodes to); config.json's vocab_size follows. Old rows are
             untouched, so on any input of old ids the old logits are exactly the old model's
             (tests/test_vocab_extend.py); the new rows are a starting point for the continuation
             that teaches the target to say the words whole.

  python -m glance_jax.testbed.vocab_extend --target testbed/target --suite v5c --out DIR
"""

from __future__ import annotations

import argparse
import collections
import json
import pathlib
import shutil
from typing import Iterable, Sequence

import numpy as np

_EMBED = "model.language_model.embed_tokens.weight"


def _tokenizer(spec: dict):
  from tokenizers import Tokenizer
  return Tokenizer.from_str(json.dumps(spec))


def pre_tokens(tok, text: str) -> list[str]:
  """The byte-level pre-tokens of `text` ("Ġseems", ".", "Ċ"...) under the tokenizer's pre-tokenizer."""
  return [p for p, _ in tok.pre_tokenizer.pre_tokenize_str(tok.normalizer.normalize_str(text)
                                                          if tok.normalizer else text)]


def pieces(tok, word: str) -> list[str]:
  """The tokens the BPE model splits one pre-token into."""
  return [t.value for t in tok.model.tokenize(word)]


def corpus_words(tok, texts: Iterable[str], min_count: int = 1, letters_only: bool = True) -> list[str]:
  """The pre-tokens of `texts` that are more than one piece, most frequent first (ties by text), each
  seen at least `min_count` times; with letters_only, only words (a letter run with at most a
  leading space), not punctuation runs or digits."""
  counts = collections.Counter(p for t in texts for p in pre_tokens(tok, t))
  # byte-level strings map bytes to letters ("\n" is "Ċ"), so a word is judged by its decoded text
  keep = [w for w, n in counts.items() if n >= min_count and len(pieces(tok, w)) > 1
          and (not letters_only or tok.decoder.decode([w]).lstrip(" ").isalpha())]
  return sorted(keep, key=lambda w: (-counts[w], w))


def _next_id(spec: dict) -> int:
  ids = list(spec["model"]["vocab"].values()) + [a["id"] for a in spec.get("added_tokens", [])]
  return max(ids) + 1


def extend_tokenizer(spec: dict, words: Sequence[str], passes: int = 4) -> tuple[dict, dict[str, list[str]]]:
  """(tokenizer.json dict with merges making each word one token, {new token: the old pieces it
  stands for}). `words` are pre-tokens (corpus_words). Raises ValueError naming the words that
  still are several tokens after `passes` rounds (a merge of a later word splitting an earlier
  one's chain, which a further pass mends)."""
  spec = json.loads(json.dumps(spec))            # a copy
  model = spec["model"]
  if model.get("type") != "BPE":
    raise ValueError(f"tokenizer model is {model.get('type')!r}; vocab_extend grows a BPE vocabulary")
  vocab, merges = model["vocab"], model["merges"]
  as_pairs = bool(merges) and isinstance(merges[0], list)
  old = tok = _tokenizer(spec)                    # tok: always the spec as extended so far
  next_id = _next_id(spec)
  origin: dict[str, list[str]] = {}
  todo = list(dict.fromkeys(words))
  for _ in range(passes):
    for word in todo:
      cur = pieces(tok, word)
      if len(cur) == 1:
        continue
      acc = cur[0]
      for p in cur[1:]:
        new = acc + p
        merges.append([acc, p] if as_pairs else f"{acc} {p}")
        if new not in vocab:
          vocab[new], next_id = next_id, next_id + 1
          origin[new] = pieces(old, new)
        acc = new
      tok = _tokenizer(spec)
    todo = [w for w in words if len(pieces(tok, w)) > 1]
    if not todo:
      return spec, origin
  raise ValueError(f"vocab_extend: {len(todo)} word(s) still split after {passes} passes: {todo[:10]}")


def extend_embeddings(table: np.ndarray, origin: dict[str, list[str]], old_vocab: dict[str, int],
                      new_vocab: dict[str, int]) -> np.ndarray:
  """[V, D] -> [V', D]: old rows as they were, each new token's row the mean of its old pieces' rows,
  and one row more, last, a copy of the old last row: a small vocabulary's GLANCE head takes its
  mask token to be the last id (HeadConfig.for_target), so the grown target's last id keeps the
  embedding the head was trained to read as "masked" rather than becoming a word."""
  size = max(max(new_vocab.values()) + 1, table.shape[0])
  out = np.zeros((size + 1, table.shape[1]), table.dtype)
  out[: table.shape[0]] = table
  for token, parts in origin.items():
    out[new_vocab[token]] = np.mean([table[old_vocab[p]] for p in parts], axis=0).astype(table.dtype)
  out[size] = table[-1]
  return out


def extend_target(src: str | pathlib.Path, dst: str | pathlib.Path, words: Sequence[str]) -> dict:
  """Writes the target at `src` with its vocabulary grown by `words` to `dst` (HF layout, fp32
  weights); returns {"added": new tokens, "vocab_size": V', "words": len(words)}."""
  import dataclasses

  import jax.numpy as jnp

  from glance_jax.io import save_tensors, write_json
  from glance_jax.qwen3_vl.target import load_target
  from glance_jax.qwen3_vl.weights import state_tensors
  from glance_jax.testbed import target_train as tt
  src, dst = pathlib.Path(src), pathlib.Path(dst)
  spec = json.loads((src / "tokenizer.json").read_text())
  new_spec, origin = extend_tokenizer(spec, words)
  target = load_target(src, dtype=jnp.float32)
  if not target.config.tie_word_embeddings:
    raise ValueError(f"{src / 'config.json'}: untied lm_head; vocab_extend grows a tied table only")
  tensors = state_tensors(target.params)
  old_vocab = {**spec["model"]["vocab"], **{a["content"]: a["id"] for a in spec.get("added_tokens", [])}}
  table = extend_embeddings(tensors[_EMBED], origin, old_vocab, new_spec["model"]["vocab"])
  tensors[_EMBED] = table
  cfg = dataclasses.replace(target.config, text=dataclasses.replace(target.config.text, vocab_size=table.shape[0]))
  dst.mkdir(parents=True, exist_ok=True)
  save_tensors(dst, tensors)
  write_json(dst / "config.json", cfg.to_hf_dict())
  (dst / "tokenizer.json").write_text(json.dumps(new_spec, ensure_ascii=False, indent=2) + "\n")
  for name in tt._SIDE_FILES:
    if name not in ("config.json", "tokenizer.json") and (src / name).is_file():
      shutil.copyfile(src / name, dst / name)
  return {"added": len(origin), "vocab_size": int(table.shape[0]), "words": len(words)}


def main(argv=None) -> None:
  ap = argparse.ArgumentParser(prog="python -m glance_jax.testbed.vocab_extend", description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--target", required=True, help="the trained target directory (HF layout) to grow")
  ap.add_argument("--suite", required=True, help="the suite whose train answers give the words")
  ap.add_argument("--out", required=True, help="where the grown target goes")
  ap.add_argument("--per-task", type=int, default=400, help="train answers a task read for words")
  ap.add_argument("--min-count", type=int, default=1, help="a word's fewest occurrences to get a token")
  args = ap.parse_args(argv)
  from glance_jax.testbed.target_train import suite_corpus
  src = pathlib.Path(args.target)
  if not (src / "tokenizer.json").is_file():
    ap.error(f"--target {src}: no tokenizer.json")
  tok = _tokenizer(json.loads((src / "tokenizer.json").read_text()))
  words = corpus_words(tok, suite_corpus(args.per_task, version=args.suite), args.min_count)
  print(json.dumps(extend_target(src, args.out, words)))


if __name__ == "__main__":
  main()
