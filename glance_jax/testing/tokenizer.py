"""A tiny Qwen-style tokenizer for tests: byte-level BPE trained on a few built-in English sentences.

No model hub is reachable from our machines, so tests and tiny checkpoints use this instead of the real
151k-token Qwen vocab. The layout copies Qwen2's tokenizer.json (NFC normalizer, Qwen split regex, byte-level
BPE, special tokens as added tokens), with the Qwen special tokens pinned at caller-chosen ids so that they
agree with a tiny model config (e.g. image_token_id=502 in a 512-token vocab).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping

import tokenizers
from tokenizers import decoders, models, normalizers, pre_tokenizers, processors, trainers

from glance_jax.qwen3_vl.chat import QWEN3_VL_CHAT_TEMPLATE

QWEN_SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                       "<|image_pad|>", "<|video_pad|>")

# Qwen2 / Qwen3 pre-tokenizer split pattern.
_QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")

_CORPUS = """\
Describe this image. What is in the picture? The picture shows a small red house next to a tall green tree.
A cat is sitting on the table and looking out of the window at the birds in the garden.
There are two dogs playing with a ball in the park, and a child is running after them.
The sky is blue and there are a few white clouds. The sun is shining over the mountains.
What color is the car? The car is yellow. How many people are in the image? There are three people.
Please answer the question with a single word. Yes. No. Maybe. I think the answer is four.
The quick brown fox jumps over the lazy dog. She sells sea shells by the sea shore.
This is a photo of a city street at night with lights, shops, and people walking on the sidewalk.
A plate of food with rice, vegetables, and chicken is on the wooden table in the kitchen.
The man is wearing a black jacket and holding an umbrella because it is raining outside.
Read the text in the image and tell me what it says. The sign says: open from 9 to 5 every day.
You are a helpful assistant. Let me look at the image carefully before I answer your question.
In the first picture there is a boat on the lake; in the second picture there is a train near the station.
Numbers like 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 100 and 2024 appear in many documents and charts.
The chart shows that sales increased from January to March and then decreased in April.
"""


def _assign_special_ids(vocab_size: int, special_ids: Mapping[str, int]) -> dict[str, int]:
  """Given ids for some specials; the remaining Qwen specials take the highest free ids below vocab_size."""
  ids = dict(special_ids)
  for token, i in ids.items():
    if not 0 <= i < vocab_size:
      raise ValueError(f"special token {token!r} id {i} is outside the vocab [0, {vocab_size})")
  if len(set(ids.values())) != len(ids):
    raise ValueError(f"special token ids must be distinct, got {ids}")
  free = sorted(set(range(vocab_size)) - set(ids.values()), reverse=True)
  for token in QWEN_SPECIAL_TOKENS:
    if token not in ids:
      ids[token] = free.pop(0)
  return ids


def build_tiny_tokenizer(vocab_size: int = 512, special_ids: Mapping[str, int] | None = None,
                         corpus: Iterable[str] | None = None) -> tokenizers.Tokenizer:
  """A byte-level BPE `tokenizers.Tokenizer` with vocab exactly `vocab_size` and specials at `special_ids`,
  trained on `corpus` (lines of text; default: a few built-in English sentences).

  Regular tokens take the free ids in training order; ids left over (the corpus is small) hold unreachable
  `<|reserved_k|>` tokens so that ids are dense.
  """
  specials = _assign_special_ids(vocab_size, special_ids or {})
  n_regular = vocab_size - len(specials)
  if n_regular < 256:
    raise ValueError(f"vocab_size {vocab_size} leaves {n_regular} regular ids; byte-level BPE needs >= 256")

  tok = tokenizers.Tokenizer(models.BPE())
  tok.normalizer = normalizers.NFC()
  tok.pre_tokenizer = pre_tokenizers.Sequence([
      pre_tokenizers.Split(tokenizers.Regex(_QWEN_SPLIT), behavior="isolated", invert=False),
      pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
  ])
  tok.decoder = decoders.ByteLevel()
  tok.post_processor = processors.ByteLevel(trim_offsets=False)
  trainer = trainers.BpeTrainer(vocab_size=n_regular, show_progress=False,
                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
  lines = _CORPUS.splitlines(keepends=True) if corpus is None else list(corpus)
  tok.train_from_iterator(lines, trainer)

  spec = json.loads(tok.to_str())
  trained = sorted(spec["model"]["vocab"].items(), key=lambda kv: kv[1])  # training order
  free = sorted(set(range(vocab_size)) - set(specials.values()))
  vocab = {token: free[k] for k, (token, _) in enumerate(trained)}
  for k, i in enumerate(free[len(trained):]):
    vocab[f"<|reserved_{k}|>"] = i
  # Specials live in the model vocab too, so that loading keeps their ids (added tokens are otherwise
  # renumbered after the model vocab).
  vocab.update(specials)
  spec["model"]["vocab"] = vocab
  spec["added_tokens"] = [
      dict(id=i, content=t, single_word=False, lstrip=False, rstrip=False, normalized=False, special=True)
      for t, i in sorted(specials.items(), key=lambda kv: kv[1])]
  out = tokenizers.Tokenizer.from_str(json.dumps(spec))
  for t, i in specials.items():
    assert out.token_to_id(t) == i, (t, i, out.token_to_id(t))
  return out


def make_tiny_tokenizer(out_dir: str, vocab_size: int = 512, special_ids: Mapping[str, int] | None = None,
                        chat_template: str = QWEN3_VL_CHAT_TEMPLATE,
                        corpus: Iterable[str] | None = None) -> dict[str, int]:
  """Writes tokenizer.json, tokenizer_config.json and chat_template.jinja into `out_dir`.

  special_ids: token text -> id, e.g. {"<|vision_start|>": 500, "<|vision_end|>": 501, "<|image_pad|>": 502,
  "<|video_pad|>": 503}; Qwen specials not given take the highest free ids. Returns the full text -> id map
  of the seven Qwen specials. transformers' PreTrainedTokenizerFast(tokenizer_file=...) and
  AutoTokenizer.from_pretrained(out_dir) both load the result.
  """
  tok = build_tiny_tokenizer(vocab_size, special_ids, corpus)
  os.makedirs(out_dir, exist_ok=True)
  tok.save(os.path.join(out_dir, "tokenizer.json"))
  config = {
      "tokenizer_class": "PreTrainedTokenizerFast",
      "bos_token": None,
      "eos_token": "<|im_end|>",
      "pad_token": "<|endoftext|>",
      "unk_token": None,
      "clean_up_tokenization_spaces": False,
      "errors": "replace",
      "model_max_length": 262144,
      "split_special_tokens": False,
  }
  with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
    json.dump(config, f, indent=2)
  with open(os.path.join(out_dir, "chat_template.jinja"), "w", encoding="utf-8") as f:
    f.write(chat_template)
  return {t: tok.token_to_id(t) for t in QWEN_SPECIAL_TOKENS}
