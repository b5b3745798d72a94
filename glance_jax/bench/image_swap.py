"""The paper's image test: does the draft head's acceptance depend on the image being the right one?

`run_image_swap(target, head, records, budget=N, max_new_tokens=M)`. Per record with images:

  trajectory  y_0..y_{n-1}: the target's greedy answer (generate(method="ar"), the target's own
              stop tokens, at most M tokens) to the prompt with its CORRECT image(s). It is fixed:
              both image conditions are read along this same token sequence.
  conditions  c = correct: the record's own images; c = mismatched: the images of another record
              (a derangement of the records with images, drawn from `seed`: a random order, each
              record takes the next one's images). Records without images are skipped (counted).

For a condition c, one teacher-forced causal forward of the target over [prompt_c ; y_0..y_{n-1}]
gives at every position the logits and the head's tapped features. With g^c_j = the target's
greedy token (argmax, sampling.choose at T = 0) for trajectory slot j given prompt_c and y_<j:

  H^c_t  the entropy (nats) of the target's distribution at the row where y_t is fed, i.e. of
         p_c(. | prompt_c, y_<=t): what the decode loop records as a round's root entropy.
  a^c_t  the accepted length of a GLANCE round rooted at y_t (t = 0..n-2): the head drafts the
         block [y_t, MASK x L] from the features of prompt_c and y_<t (strictly before the root,
         as decoding and training do), build_tree keeps the `budget` best prefixes, and a^c_t is
         the depth of the deepest tree path (x_1..x_d) with x_i = g^c_{t+i} for every i <= d,
         d <= min(L, n-1-t) (the walk of decode/verify.walk with the target's choice at a depth-i
         row set to g^c_{t+i+1}).

With the correct image g = y (the trajectory is the target's own greedy output), so a^c_t is
exactly the accepted length a real decode round rooted at t records (tests/test_image_swap.py
checks this against generate(method="glance") at its rounds' roots 0, A_0 + 1, ...). With the
mismatched image it is the acceptance against the target's teacher-forced greedy predictions along
the fixed trajectory: where the mismatched target would itself leave y, the path is cut or scored
against its own choice at that slot, without rolling out its different continuation.

A third condition swaps the image for the DRAFT alone, as the zero-context ablation corrupts the
head's conditioning alone: c = drafter_mismatched drafts from the mismatched prompt's features (as
in `mismatched`) and is verified by the correct-image target (g = y, as in `correct`): what a real
decode would accept if the head's view of the image were wrong and the verifier's right. The two
swaps answer different questions. `mismatched` (the whole system sees another image) is ~0 for a
head that reads the image exactly as the target does, and also for one that ignores both image and
target; `drafter_mismatched` separates them: it falls as far as the head's drafts depend on the
image (the shipped v5b's chart task, 64 prompts, testbed/results/bench.md: 6.59 correct, 6.59
mismatched, 3.96 drafter_mismatched).

Returned: per condition the means of a and H over all (record, t) positions (the same positions in
every condition; H of drafter_mismatched is the mismatched target's, the one its features carry),
the change condition - correct with a paired bootstrap 95% interval over positions
(glance_jax.analysis.bootstrap.paired_bootstrap_diff): change["accepted"] and change["entropy"] for
`mismatched`, change["drafter_accepted"] for `drafter_mismatched`; counts, and per-record means.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from glance_jax.analysis.bootstrap import paired_bootstrap_diff
from glance_jax.decode.drafters.block import head_tree
from glance_jax.decode.generate import generate
from glance_jax.decode.sampling import SamplingConfig, choose, entropy
from glance_jax.decode.verify import walk
from glance_jax.qwen3_vl.positions import get_rope_index
from glance_jax.qwen3_vl.prompt import Prompt
from glance_jax.static_args import merge
from glance_jax.train.batch import TrainBatch
from glance_jax.train.objective import packed_hidden

ANCHORS_PER_PASS = 16   # rounds drafted per head pass (one compile for any trajectory length)
SEQ_BUCKET = 64         # teacher-forced sequences are right-padded to a multiple of this (fewer compiles)


def run_image_swap(target, head, records, *, budget: int, max_new_tokens: int, seed: int = 0) -> dict:
  """The image test over `records` (PromptRecords); see the module docstring for the definitions."""
  from glance_jax.qwen3_vl.inputs import Processor, prepare_inputs
  if budget < 1 or max_new_tokens < 2:
    raise ValueError(f"need budget >= 1 and max_new_tokens >= 2, got {budget} and {max_new_tokens}")
  if target.path is None:
    raise ValueError("run_image_swap needs a target loaded from a checkpoint directory (target.path is None): "
                     "it reads the tokenizer and image processor there")
  processor = Processor.from_pretrained(str(target.path))
  usable = [r for r in records if r.images]
  if len(usable) < 2:
    raise ValueError(f"the image test needs at least 2 records with images, got {len(usable)} of {len(records)}")
  order = np.random.default_rng(seed).permutation(len(usable))
  partner = np.empty(len(usable), int)
  partner[order] = np.roll(order, -1)                                     # a derangement: no record keeps its images
  conds = ("correct", "mismatched", "drafter_mismatched")
  a = {k: [] for k in conds}
  h = {k: [] for k in conds}
  agree, per_record, skipped_placeholder = [], [], []
  for i, rec in enumerate(usable):
    other = usable[partner[i]]
    inputs = prepare_inputs(processor, rec.prompt, list(rec.images))
    traj = np.asarray(generate(target, inputs, method="ar", max_new_tokens=max_new_tokens).tokens[0])
    vision = (target.config.image_token_id, target.config.video_token_id)
    if np.isin(traj, vision).any():  # a (random) target wrote a placeholder: the forced forward
      skipped_placeholder.append(rec.id)  # would read it as an image run with no image behind it
      continue
    cor = teacher_forced_rounds(target, head, inputs, traj, budget=budget)
    mis = teacher_forced_rounds(target, head, prepare_inputs(processor, rec.prompt, list(other.images)), traj,
                                budget=budget, also_verify=cor["greedy"])
    drf = dict(accepted=mis["accepted_also"], entropy=mis["entropy"])
    for name, r in (("correct", cor), ("mismatched", mis), ("drafter_mismatched", drf)):
      a[name].append(r["accepted"])
      h[name].append(r["entropy"])
    agree.append(cor["greedy"] == traj)
    per_record.append(dict(id=rec.id, mismatched_with=other.id, trajectory_tokens=int(len(traj)),
                           positions=int(len(cor["accepted"])),
                           correct_accepted=_mean(cor["accepted"]), mismatched_accepted=_mean(mis["accepted"]),
                           drafter_mismatched_accepted=_mean(drf["accepted"]),
                           correct_entropy=_mean(cor["entropy"]), mismatched_entropy=_mean(mis["entropy"])))
  if not a["correct"]:
    raise ValueError(f"no record could be teacher-forced: every trajectory holds image placeholder tokens "
                     f"({skipped_placeholder})")
  cat = {k: (np.concatenate(a[k]), np.concatenate(h[k])) for k in a}
  n = len(cat["correct"][0])
  out = dict(budget=int(budget), max_new_tokens=int(max_new_tokens), seed=int(seed), records=len(usable),
             skipped_no_image=len(records) - len(usable), skipped_placeholder_ids=skipped_placeholder,
             positions=n,
             teacher_forced_agrees=float(np.mean(np.concatenate(agree))) if agree else None,
             ci_level=0.95, ci_unit="position (record, t), paired across the two images",
             per_record=per_record)
  for k, (ak, hk) in cat.items():
    out[k] = dict(accepted=_mean(ak), tau=None if not n else _mean(ak) + 1.0, entropy=_mean(hk))
  out["change"] = {}
  for name, cond, idx in (("accepted", "mismatched", 0), ("entropy", "mismatched", 1),
                          ("drafter_accepted", "drafter_mismatched", 0)):
    x, y = cat[cond][idx], cat["correct"][idx]
    if n >= 2:
      d, lo, hi = paired_bootstrap_diff(x, y, seed=seed)
    else:
      d, lo, hi = (float(x.mean() - y.mean()) if n else None), None, None
    out["change"][name] = dict(diff=d, lo=lo, hi=hi)
  return out


def _mean(x) -> float | None:
  return float(np.mean(np.asarray(x, np.float64))) if len(x) else None


def teacher_forced_rounds(target, head, inputs, trajectory, *, budget: int, also_verify=None) -> dict:
  """One prompt row + a fixed trajectory -> accepted int [n-1] (a_t for t = 0..n-2), entropy
  float [n-1] (H_t), greedy int [n] (g_j: the target's argmax for slot j given prompt and y_<j).
  With `also_verify` (int [n], another verifier's greedy choices along the same trajectory), also
  accepted_also int [n-1]: the same drafts (this prompt's features) walked against those choices."""
  y = np.asarray(trajectory, np.int32)
  n = len(y)
  if n < 2:  # no round has a token to accept
    empty = np.zeros(0, np.int32)
    return dict(accepted=empty, entropy=np.zeros(0, np.float32), greedy=y.copy(),
                **({} if also_verify is None else dict(accepted_also=empty)))
  greedy, ent, feats, ids, pos, p = teacher_forced(target, head, inputs, y)
  out = dict(accepted=_walk_rounds(target, head, feats, ids, pos, p, greedy, budget), entropy=ent[p:p + n - 1],
             greedy=greedy)
  if also_verify is not None:
    choices = np.asarray(also_verify, np.int32)
    if choices.shape != (n,):
      raise ValueError(f"also_verify must hold one choice per trajectory slot: shape {choices.shape}, want ({n},)")
    out["accepted_also"] = _walk_rounds(target, head, feats, ids, pos, p, choices, budget)
  return out


def _walk_rounds(target, head, feats, ids, pos, p: int, greedy: np.ndarray, budget: int) -> np.ndarray:
  """a_t for t = 0..n-2: the drafts of the rounds rooted at y_t (from `feats`) walked against the
  verifier's choices `greedy` [n] (g_j for slot j)."""
  n = len(greedy)
  hc = head.config
  depth = hc.block_size - 1
  # labels[t, d] = g_{t+d} for d = 1..L (0 unused), -1 past the trajectory's end; L + 1 is the
  # "choice" below the deepest row, never matched
  t = np.arange(n - 1)
  j = t[:, None] + np.arange(depth + 2)[None]
  labels = np.where((j < n) & (np.arange(depth + 2)[None] <= depth), greedy[np.minimum(j, n - 1)], -1).astype(np.int32)
  accepted = np.zeros(n - 1, np.int32)
  for s in range(0, n - 1, ANCHORS_PER_PASS):
    k = min(ANCHORS_PER_PASS, n - 1 - s)
    anchors = np.zeros((1, ANCHORS_PER_PASS), np.int32)
    anchors[0, :k] = p + t[s:s + k]                                       # the root y_t sits at sequence index P + t
    valid = np.arange(ANCHORS_PER_PASS)[None] < k
    lab = np.full((ANCHORS_PER_PASS, depth + 2), -1, np.int32)
    lab[:k] = labels[s:s + k]
    acc = _accept(target.jit_graphdef, target.flat_params, head.jit_graphdef, head.flat_params, feats, ids, pos,
                  jnp.asarray(anchors), jnp.asarray(valid), jnp.asarray(lab), budget=int(budget),
                  block_size=hc.block_size, mask_token_id=hc.mask_token_id)
    accepted[s:s + k] = np.asarray(acc)[:k]
  return accepted


def teacher_forced(target, head, inputs, y: np.ndarray):
  """The teacher-forced forward over [prompt ; y] (right-padded to a SEQ_BUCKET multiple) ->
  (greedy [n] for slots 0..n-1, entropy [S] per sequence index, feats, ids, positions, P)."""
  cfg = target.config
  mask = np.asarray(inputs.attention_mask)[0].astype(bool)
  prompt = np.asarray(inputs.input_ids)[0][mask]
  p, n = len(prompt), len(y)
  s = -(-(p + n) // SEQ_BUCKET) * SEQ_BUCKET
  ids = np.zeros((1, s), np.int32)
  ids[0, :p + n] = np.concatenate([prompt, y])
  valid = np.arange(s)[None] < p + n
  grid = getattr(inputs, "image_grid_thw", None)
  pos, _ = get_rope_index(ids, valid, grid, None, image_token_id=cfg.image_token_id,
                          video_token_id=cfg.video_token_id, spatial_merge_size=cfg.vision.spatial_merge_size)
  pv = getattr(inputs, "pixel_values", None)
  meta = None if pv is None else target.vision_arrays(np.asarray(grid))
  pv = None if pv is None else jnp.asarray(pv, jnp.float32)
  ids_j, pos_j = jnp.asarray(ids), jnp.asarray(pos, jnp.int32)
  prompt = Prompt(ids_j, jnp.asarray(valid), pos_j, pv, meta)
  greedy, ent, feats = _teacher_forced(target.jit_graphdef, target.flat_params, prompt,
                                       taps=tuple(head.config.target_layer_ids))
  greedy = np.asarray(greedy)[0, p - 1:p - 1 + n]                         # row P-1+j predicts slot j
  return greedy, np.asarray(ent)[0], feats, ids_j, pos_j, p


@functools.partial(jax.jit, static_argnames=("tgd", "taps"))
def _teacher_forced(tgd, tparams, prompt: Prompt, *, taps):
  """-> greedy int32 [1, S], entropy fp32 [1, S], feats [1, S, taps x D] (causal, one pass)."""
  target = merge(tgd, tparams)
  h, _, tapped = target.forward_prompt(prompt, tap_layers=taps)
  logits = target.logits(h)                                               # [1, S, V] fp32
  greedy = choose(logits, jax.random.key(0), SamplingConfig())
  return greedy, entropy(logits), jnp.concatenate([tapped[i] for i in taps], axis=-1)


@functools.partial(jax.jit, static_argnames=("tgd", "hgd", "budget", "block_size", "mask_token_id"))
def _accept(tgd, tparams, hgd, hparams, feats, ids, positions, anchors, anchor_valid, labels, *, budget: int,
            block_size: int, mask_token_id: int):
  """A = ANCHORS_PER_PASS rounds in one packed head pass (train/objective.packed_hidden: block j sees
  the features before its anchor and its own block) -> accepted int32 [A]."""
  target, head = merge(tgd, tparams), merge(hgd, hparams)
  ones = jnp.ones(ids.shape, bool)
  batch = TrainBatch(input_ids=ids, loss_mask=ones, attention_mask=ones, positions=positions)
  hidden = packed_hidden(head, target.embed_weight, feats, batch, anchors, anchor_valid, block_size=block_size,
                         mask_token_id=mask_token_id)                     # [1, A*Bk, D]
  a = anchors.shape[1]
  hidden = hidden.reshape(a, block_size, -1)
  log_q = jax.nn.log_softmax(target.logits(hidden[:, 1:]), axis=-1)      # [A, L, V]: slot k drafts y_{t+k}
  tree = head_tree(log_q, budget).tree
  # the target's choice at each verify row: g_{t+d+1} at a depth-d row (the root is depth 0)
  depths = jnp.concatenate([jnp.zeros((a, 1), jnp.int32), tree.depths], axis=1)   # [A, N+1]
  choice = jnp.take_along_axis(labels, depths + 1, axis=1)
  return walk(tree, choice, block_size - 1).accepted
