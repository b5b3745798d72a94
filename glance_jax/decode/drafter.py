"""The drafter interface: what the decode loop asks of every method's proposer.

A drafter is a frozen dataclass: static (a jit static argument, hashed once per call; one compiled
loop per distinct value), holding only configuration and graphdefs (static_args.Hashed). Its
weights travel beside it as a pytree, `params` (jit arguments, never constants in the program).
It owns a state pytree that the loop carries between rounds (LoopState.drafter) and knows nothing
of the loop itself. Three functions, all traced inside the jitted loop:

  init(params, target, prefill) -> state
      after the target's prompt forward (Prefill: the prompt, its taps, the first token).
  propose(params, target, state, st) -> (Proposal, state)
      this round's tree of `num_nodes` nodes (root excluded) and a score per node. `st` is the
      loop's state (read only): st.root, st.cache.length (the root's slot), st.rope_delta,
      st.history (committed tokens then the root), st.count (tokens emitted).
  commit(params, target, state, st, res, feats, live) -> state
      after the walk: res (decode.verify.WalkResult: A, the committed verify rows root first,
      the new tokens, the bonus that is the next root), feats [B, C, F] the target's tapped
      features at the committed rows (None without tap_layers), live bool [B] (rows still
      decoding this round).

Static facts the loop sizes its buffers with: num_nodes (N, the widest tree it proposes),
max_depth (its deepest node: a round commits C = max_depth + 1 rows), tap_layers (decoder layers
whose outputs it reads; the prefill and every verify pass tap them), passes (draft forward passes
per round, for reports), score_kind (what the node scores mean, for the width policies:
"log_prob" = the log probability of the node's whole prefix under the draft, nodes best first so
that every prefix of the node list is a tree; "match" = the length of the suffix match the
proposal continues), stateless (propose may be skipped on rounds that verify nothing).

A drafter with its own KV cache (EAGLE-3's draft layer, a second smaller target) keeps the cache
in its state, fills it in init (its own prompt forward from `prefill.prompt`), runs any number of
sequential passes inside propose, and rolls the cache back to the committed length in commit.

Adding a drafter: one module with its dataclass and a `build(target, head, budget)` returning
(drafter, params), plus one entry in decode/methods.py.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import flax.struct
import jax

from glance_jax.decode.verify import DraftTree, WalkResult
from glance_jax.qwen3_vl.prompt import Prompt

SCORE_KINDS = ("log_prob", "match")


@flax.struct.dataclass
class Proposal:
  tree: DraftTree
  scores: jax.Array         # float32 [B, N]: per node, as the drafter's score_kind says; -inf = no node


@flax.struct.dataclass
class Prefill:
  """What a drafter starts from: the prompt and the target's pass over it."""
  prompt: Prompt
  taps: jax.Array | None    # [B, S, F]: the drafter's tap_layers concatenated (None without taps)
  lengths: jax.Array        # int32 [B]: prompt tokens per row
  first: jax.Array          # int32 [B]: the target's first token (the first root)
  rope_delta: jax.Array     # int32 [B]: generated token i of row b sits at text position i + rope_delta
  max_length: int = flax.struct.field(pytree_node=False, default=0)   # target cache slots


@dataclasses.dataclass(frozen=True)
class Drafter:
  """Base class. Subclasses are frozen dataclasses and override the three functions."""
  name: ClassVar[str] = "drafter"
  score_kind: ClassVar[str] = "log_prob"
  stateless: ClassVar[bool] = False

  @property
  def num_nodes(self) -> int:
    raise NotImplementedError

  @property
  def max_depth(self) -> int:
    raise NotImplementedError

  @property
  def tap_layers(self) -> tuple[int, ...]:
    return ()

  @property
  def passes(self) -> int:
    """Draft forward passes per round."""
    return 0

  def init(self, params, target, prefill: Prefill) -> Any:
    return ()

  def propose(self, params, target, state, st) -> tuple[Proposal, Any]:
    raise NotImplementedError

  def commit(self, params, target, state, st, res: WalkResult, feats: jax.Array | None, live: jax.Array) -> Any:
    return state
