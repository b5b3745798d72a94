"""`two-model`: classic speculative decoding: a second, smaller Qwen3-VL drafts a chain of S tokens
in S sequential forward passes of its own, over its own KV cache and its own pass over the prompt
(image included), and the target verifies the chain in one pass.

Draft cache slot t holds token t, as the target's does. A round (the root at target slot L):
  1. a 2-row pass over [token L-1, root] at slots [L-1, L]: slot L-1 is written again (the same
     token over the same prefix: the same K/V), which makes it right whatever the last round
     accepted (when it accepted the whole chain, its last token was never fed);
  2. S - 1 one-row passes, each feeding the token the last one chose at the next slot.
Rollback is by length: the next round starts again at its own L - 1, so the rows of rejected
tokens are overwritten before anything attends to them. Node scores are the draft's cumulative
log-probs (score_kind "log_prob"); at T > 0 the verifier's walk keeps the output the target's own
samples whatever the draft proposes.

The draft shares the prompt the target's processor made (ids, 3-D positions, pixels and the
vision tables), so it must tokenize and see images as the target does: same vocabulary and
special tokens (the tokenizers compared when both directories have one), same patch size, merge
size and position-embedding grid. Checked in `check_pair`, each mismatch an error naming the key.

Letters: B rows, S draft passes (= chain length), Sd draft cache slots (= the target's), V vocab.
"""

from __future__ import annotations

import dataclasses
import pathlib

import flax.struct
import jax
import jax.numpy as jnp

from glance_jax.decode.drafter import Drafter, Prefill, Proposal
from glance_jax.decode.drafters.block import text_positions
from glance_jax.decode.verify import chain_from_tokens
from glance_jax.qwen3_vl.cache import KVCache, init_cache, pin_cache
from glance_jax.static_args import Hashed, merge

PRESETS = {"two-model": 4}        # chain length S (SpecDec-style drafts of 3-5 tokens; the paper's 4B arm)


@flax.struct.dataclass
class TwoModelState:
  cache: KVCache            # the draft's, [B, Sd, kv, hd] per layer; length = committed slots it holds


@dataclasses.dataclass(frozen=True)
class TwoModelDrafter(Drafter):
  name = "two-model"
  graphdef: Hashed          # the draft model's graphdef (a Qwen3-VL like the target's, smaller)
  depth: int                # S
  mesh: object = None

  def __post_init__(self):
    if self.depth < 1:
      raise ValueError(f"two-model: the chain length must be >= 1, got {self.depth}")

  @property
  def num_nodes(self) -> int:
    return self.depth

  @property
  def max_depth(self) -> int:
    return self.depth

  @property
  def passes(self) -> int:
    return self.depth

  def init(self, params, target, prefill: Prefill) -> TwoModelState:
    draft = merge(self.graphdef, params)
    b = prefill.lengths.shape[0]
    cache = init_cache(draft.cfg.text, b, prefill.max_length, draft.embed_weight.dtype)
    _, cache, _ = draft.forward_prompt(prefill.prompt, cache)
    return TwoModelState(cache=pin_cache(cache.replace(length=prefill.lengths), self.mesh))

  def propose(self, params, target, state: TwoModelState, st):
    draft = merge(self.graphdef, params)
    b = st.root.shape[0]
    rows = jnp.arange(b)
    start = st.cache.length - 1                                           # [B]: slot L - 1
    last = st.history[rows, start]                                        # token at L - 1 (committed)
    ids = jnp.stack([last, st.root], axis=1)                              # [B, 2]
    causal = jnp.broadcast_to(jnp.tril(jnp.ones((2, 2), bool)), (b, 2, 2))
    h, cache, _ = draft(ids, text_positions(start + st.rope_delta, jnp.arange(2)),
                        state.cache.replace(length=start), causal)
    lp = jax.nn.log_softmax(draft.logits(h[:, 1]), axis=-1)               # [B, V]: after the root
    one = jnp.ones((b, 1, 1), bool)

    def pick(lp, score):
      """The draft's greedy token and the chain's cumulative log-prob with it."""
      tok = jnp.argmax(lp, axis=-1).astype(jnp.int32)
      return tok, score + jnp.take_along_axis(lp, tok[:, None], axis=1)[:, 0]

    def step(carry, i):
      cache, lp, score = carry
      tok, score = pick(lp, score)
      # fed at slot L + i; its output chooses the next token
      h, cache, _ = draft(tok[:, None], text_positions(st.cache.length + i + st.rope_delta, jnp.zeros((1,), jnp.int32)),
                          cache.replace(length=st.cache.length + i), one)
      return (cache, jax.nn.log_softmax(draft.logits(h[:, 0]), axis=-1), score), (tok, score)

    # S - 1 fed tokens (none at S = 1: a scan of length 0), then the S-th, chosen and never fed
    (cache, lp, score), (toks, scores) = jax.lax.scan(step, (cache, lp, jnp.zeros((b,), jnp.float32)),
                                                      jnp.arange(1, self.depth))
    tok, score = pick(lp, score)
    toks = jnp.concatenate([jnp.moveaxis(toks, 0, 1), tok[:, None]], axis=1)            # [B, S]
    scores = jnp.concatenate([jnp.moveaxis(scores, 0, 1), score[:, None]], axis=1)
    tree = chain_from_tokens(toks, jnp.ones((b, self.depth), bool))
    return Proposal(tree, scores), state.replace(cache=pin_cache(cache, self.mesh))


def draft_config_for(target_config):
  """The draft a benchmark pairs with a target when it has none: Qwen3-VL-4B for the 8B (the
  paper's pairing: the same tokenizer, the small vision tower with the same patch geometry); for any
  other target, its own config at half its depth (never fewer layers than its deepstack levels)."""
  from glance_jax.config import QWEN3_VL_8B
  from glance_jax.presets import QWEN3_VL_4B
  if target_config == QWEN3_VL_8B:
    return QWEN3_VL_4B
  t, v = target_config.text, target_config.vision
  layers = max(len(v.deepstack_visual_indexes) if v is not None else 1, t.num_hidden_layers // 2)
  return dataclasses.replace(target_config, text=dataclasses.replace(t, num_hidden_layers=layers))


def check_pair(draft_config, target_config, draft_path=None, target_path=None) -> None:
  """The draft reads the target's prompts: the same token ids and image geometry. A mismatch is an
  error naming the key (and the files, when the tokenizers differ)."""
  pairs = [("text.vocab_size", draft_config.text.vocab_size, target_config.text.vocab_size),
           ("image_token_id", draft_config.image_token_id, target_config.image_token_id),
           ("video_token_id", draft_config.video_token_id, target_config.video_token_id),
           ("eos_token_ids", tuple(draft_config.eos_token_ids), tuple(target_config.eos_token_ids))]
  dv, tv = draft_config.vision, target_config.vision
  if (dv is None) != (tv is None):
    raise ValueError(f"two-model: the draft {'has no' if dv is None else 'has a'} vision tower and the target "
                     f"{'has no' if tv is None else 'has one'} (a text-only draft is not supported yet)")
  if dv is not None:
    pairs += [(f"vision_config.{k}", getattr(dv, k), getattr(tv, k))
              for k in ("patch_size", "spatial_merge_size", "temporal_patch_size", "num_position_embeddings")]
  for key, d, t in pairs:
    if d != t:
      raise ValueError(f"two-model: the draft's {key} is {d!r} but the target's is {t!r}: the draft must read "
                       f"the target's prompts token for token")
  if draft_path is not None and target_path is not None:
    a, b = pathlib.Path(draft_path) / "tokenizer.json", pathlib.Path(target_path) / "tokenizer.json"
    if a.is_file() and b.is_file() and a.read_bytes() != b.read_bytes():
      raise ValueError(f"two-model: {a} and {b} differ: the draft and the target must share a tokenizer")


def bind(draft, target, depth: int) -> tuple[TwoModelDrafter, object]:
  """The drafter of a loaded draft model (qwen3_vl.Target) for `target` -> (drafter, its params)."""
  check_pair(draft.config, target.config, getattr(draft, "path", None), getattr(target, "path", None))
  d = TwoModelDrafter(graphdef=draft.jit_graphdef, depth=int(depth), mesh=getattr(target, "mesh", None))
  return d, draft.flat_params


def build(target, head=None, budget=None, preset: str = "two-model"):
  """The preset's chain (length PRESETS[preset]; the budget is not used, as for eagle3) drafted by
  `head`, here the draft model (a qwen3_vl.Target)."""
  from glance_jax.qwen3_vl.target import Target
  if not isinstance(head, Target):
    raise ValueError(f"method {preset!r} needs a draft model (a smaller Qwen3-VL, loaded with "
                     f"qwen3_vl.load_target), got {type(head).__name__}")
  return bind(head, target, PRESETS[preset])
