"""EAGLE-3 decoding (decode/drafters/eagle3.py) in the on-device loop.

A tiny random Qwen3-VL target with a 64-token vocabulary (a random head's top-K covers enough of it
that rounds accept) and a random EAGLE-3 head whose 40-token draft vocabulary comes from random
counts (d2t / t2d), so 24 target tokens are never drafted.
  lossless    every preset (8/8/32, 3/1/4, 3/2/6) emits AR greedy's tokens on 60 prompts each (half
              with an image, lengths and max_new_tokens varied, stop tokens inside rounds), accepts,
              and leaves a draft context equal to the head run from scratch on the committed text
              (slot t = (taps of token t, token t + 1) at token t's position)
  builder     grow_tree equals a plain numpy enumeration of the EAGLE-2 pool (nodes, order, scores,
              parents, mask), ties included
  attention   each node's score is the sum of the head's log-probs run sequentially on its own path
              (a branch reading a sibling's K/V changes its children's scores); the trees are well formed
  sampling    at T = 1 the 2nd and 3rd tokens follow AR sampling's law (chi-square)
  batch       batch rows draft and accept exactly as their batch-1 runs
"""

from __future__ import annotations

import functools
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from glance_jax.config import tiny_config
from glance_jax.decode import generate as gen
from glance_jax.decode.drafter import Prefill
from glance_jax.decode.drafters import eagle3 as e3
from glance_jax.decode.methods import METHODS, Plan, plan
from glance_jax.decode.policies import Fixed
from glance_jax.eagle3 import (Eagle3Checkpoint, Eagle3Config, causal_mask, init_cache, init_eagle3,
                               vocab_map_from_counts)
from glance_jax.qwen3_vl.positions import get_rope_index
from glance_jax.qwen3_vl.processor import ImageProcessor
from glance_jax.qwen3_vl.prompt import Prompt
from glance_jax.static_args import Hashed, merge
from glance_jax.testing.images import random_images
from tests import decode_fixtures as fx

CFG = tiny_config(vocab_size=64, layers=3, deepstack=(0,), vision_depth=1)
HEAD = Eagle3Config(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                    head_dim=16, vocab_size=64, draft_vocab_size=40, rope_theta=5e6, mrope_section=(4, 2, 2),
                    aux_layer_ids=(0, 1, 2))
PRESETS = {"eagle3": (8, 8, 32), "eagle3-chain": (3, 1, 4), "small": (3, 2, 6)}
MAX_NEW = {"eagle3": 29, "eagle3-chain": 23, "small": 19}
ROWS, WIDTH = 60, 28


@pytest.fixture(scope="module")
def world():
  target = fx.lively_target(CFG, seed=11)
  graphdef, flat = init_eagle3(HEAD, seed=3)
  model = nnx.merge(graphdef, flat)
  model.lm_head.weight.set_value(model.lm_head.weight.get_value() * 30.0)   # peaked as a trained head's: deep trees
  d2t, t2d = vocab_map_from_counts(np.random.default_rng(4).integers(0, 50, 64), HEAD.draft_vocab_size)
  heads = [Eagle3Checkpoint(HEAD, graphdef, p, jnp.asarray(d2t, jnp.int32), jnp.asarray(t2d))
           for p in (nnx.split(model)[1], flat)]
  return types.SimpleNamespace(target=target, head=heads[0], flat_head=heads[1], t2d=t2d, runs={})


def mixed_batch(seed: int, rows: int = ROWS, width: int = WIDTH):
  """`rows` right-padded prompts of random lengths, half of them (at random) with one 64x96 image."""
  rng = np.random.default_rng(seed)
  has_img = rng.permutation(rows) < rows // 2
  ids, mask = np.zeros((rows, width), np.int64), np.zeros((rows, width), bool)
  for r in range(rows):
    text = list(rng.integers(0, 40, rng.integers(3, width - 8 * has_img[r] + 1)))
    if has_img[r]:
      cut = int(rng.integers(0, len(text) + 1))
      image = [CFG.vision_start_token_id] + [CFG.image_token_id] * 6 + [CFG.vision_end_token_id]
      text = text[:cut] + image + text[cut:]
    ids[r, : len(text)], mask[r, : len(text)] = text, True
  pv, grid = ImageProcessor(min_pixels=32 * 32)(random_images(seed, [(64, 96)] * int(has_img.sum())))
  pos, delta = get_rope_index(ids, mask, grid, None, image_token_id=CFG.image_token_id,
                              video_token_id=CFG.video_token_id)
  return types.SimpleNamespace(input_ids=ids, attention_mask=mask, positions=pos, rope_delta=delta, pixel_values=pv,
                               image_grid_thw=grid, has_img=has_img)


def _plan(w, name: str) -> Plan:
  if name in METHODS:
    return plan(w.target, name, head=w.head)
  d, params = e3.bind(w.head, w.target, *PRESETS[name])
  return Plan(name, d, params, Fixed(d.num_nodes), d.num_nodes)


def _rows(toks):
  return [list(r[r >= 0]) for r in toks]


def run_preset(w, name: str):
  """One 60-row generation of a preset (memoised): (batch, stops, AR reference, result, final state)."""
  if name not in w.runs:
    b, max_new = mixed_batch(seed=list(PRESETS).index(name)), MAX_NEW[name]
    # AR at the longest max_new_tokens, cut (one compile for every preset: 2 stops each time)
    ar = lambda stops: w.target.generate_greedy(  # noqa: E731
        b, max(MAX_NEW.values()), stop_tokens=stops)[0][:, :max_new]
    stops = fx.stops_inside_rounds(ar((-2, -3))[:, 3:])
    ref = ar(stops)
    p = _plan(w, name)
    args, state = gen.start(w.target, b, p, max_new_tokens=max_new, stop_tokens=stops)
    state = gen.loop(args, state)
    w.runs[name] = (b, stops, ref, gen.finish(p, state), state)
  return w.runs[name]


@functools.partial(jax.jit, static_argnames=("tgd", "hgd", "taps"))
def _context_kv(tgd, tparams, hgd, hparams, prompt: Prompt, *, taps):
  """The head from scratch over a whole sequence: slot t = (taps of token t, token t + 1) -> its cache."""
  target, head = merge(tgd, tparams), merge(hgd, hparams)
  _, _, tapped = target.forward_prompt(prompt, tap_layers=taps)
  feats = jnp.concatenate([tapped[i] for i in taps], axis=-1)
  b, s = prompt.input_ids.shape
  nxt = jnp.pad(prompt.input_ids[:, 1:], ((0, 0), (0, 1)))
  zero = jnp.zeros((b,), jnp.int32)
  return head(head.project(feats), head.embed(nxt, target.embed_weight), prompt.positions, init_cache(head.cfg, b, s),
              zero, causal_mask(zero, s, s))[2]


def _check_context(w, b, res, dstate):
  """The draft cache's context slots [0, ctx_len) equal the head's pass over prompt + emitted tokens."""
  lengths, ctx, s = b.attention_mask.sum(1), np.asarray(dstate.ctx_len), PRESETS[res.method][0]
  width = WIDTH + max(MAX_NEW.values()) + 1
  ids, mask = np.zeros((ROWS, width), np.int64), np.zeros((ROWS, width), bool)
  n_check = np.zeros(ROWS, int)
  for r in range(ROWS):
    seq = list(b.input_ids[r, : lengths[r]]) + list(res.tokens[r])
    # at most one round behind the emitted text; a row cut by a stop inside its last round holds (and
    # fed the next round, done already) rows past what it emitted
    assert len(seq) - s - 2 <= ctx[r] <= len(seq) + s
    # a generated image-token id is text to the loop but a placeholder to a prompt pass: cut there
    special = [j for j in range(lengths[r], len(seq)) if seq[j] in (CFG.image_token_id, CFG.video_token_id)]
    seq = seq[: special[0]] if special else seq
    ids[r, : len(seq)], mask[r, : len(seq)] = seq, True
    n_check[r] = min(ctx[r], len(seq) - 1)                                  # slots whose next token is known
  pos, _ = get_rope_index(ids, mask, b.image_grid_thw, None, image_token_id=CFG.image_token_id,
                          video_token_id=CFG.video_token_id)
  ext = types.SimpleNamespace(input_ids=ids, attention_mask=mask, positions=pos, pixel_values=b.pixel_values,
                              image_grid_thw=b.image_grid_thw)
  t = w.target
  ref = _context_kv(t.jit_graphdef, t.flat_params, Hashed(w.head.graphdef), w.head.params, t.prompt(ext),
                    taps=HEAD.aux_layer_ids)
  for got, want in ((dstate.cache.k[0], ref.k[0]), (dstate.cache.v[0], ref.v[0])):
    got, want = np.asarray(got), np.asarray(want)
    for r in range(ROWS):
      np.testing.assert_allclose(got[r, : n_check[r]], want[r, : n_check[r]], atol=2e-4, rtol=1e-4)
  assert (n_check - lengths).sum() > 0.8 * sum(len(t) - 1 for t in res.tokens)   # most generated rows checked


@pytest.mark.parametrize("name", list(PRESETS))
def test_lossless_accepting_and_context(world, name):
  b, stops, ref, res, state = run_preset(world, name)
  assert [list(t) for t in res.tokens] == _rows(ref)
  lens = [len(r) for r in _rows(ref)]
  assert min(lens) < MAX_NEW[name] and max(lens) == MAX_NEW[name]
  s, k, n = PRESETS[name]
  assert res.num_nodes == n - 1 and res.draft_passes_per_round == s
  acc = np.concatenate(res.accepted)
  # a random head accepts at chance (~K/64 a round), but it does accept (a tree deeper than one node too)
  assert acc.max() <= min(s, n - 1) and (acc > 0).sum() >= 5 and ((acc > 1).any() or k == 1), np.bincount(acc)
  _check_context(world, b, res, state.drafter)


def test_methods_check_their_head_and_knobs(world):
  with pytest.raises(ValueError, match="needs an EAGLE-3 head"):
    plan(world.target, "eagle3")
  with pytest.raises(ValueError, match="top-k 41 exceeds"):
    e3.bind(world.head, world.target, 2, 41, 10)
  with pytest.raises(ValueError, match="N <= K"):
    e3.Eagle3Drafter(graphdef=None, levels=3, top_k=1, num_verify=5, taps=(0, 1, 2))


# --- the dynamic tree builder against a numpy enumeration ------------------------------------------

VD, R = 12, 37      # draft vocabulary; rows of the random log-prob table per level


def _code(parent_code, ids):
  """A node's identity from its parent's and its own draft id (the builder carries it as g)."""
  return (parent_code * 13 + ids + 1) % 1009


def _anc_code(anc):
  return np.sum(np.asarray(anc) * (np.arange(np.shape(anc)[-1]) * 5 + 1), axis=-1)


def _table_expand(table):
  """An expand whose children's log-probs are table[level] at a row given by the node's path and by
  the ancestor slots it is handed (so a wrong ancestor set changes the tree)."""
  def expand(carry, level, ids, g, anc):
    code = _code(g[..., 0], ids)                                          # [B, K]
    ac = jnp.sum(anc * (jnp.arange(anc.shape[-1]) * 5 + 1), axis=-1)
    return table[level][(code + ac) % R], code[..., None], carry
  return expand


def _enumerate(table, root_code, s, k, n):
  """EAGLE-2's pool as written in the paper (cnets.py topK_genrate), one node at a time."""
  order = lambda x: np.argsort(-np.asarray(x, np.float32), kind="stable")  # noqa: E731  ties: lower index
  lp = table[0][root_code % R]
  pool = []                                                               # (score, id, parent, depth, path)
  front = []
  for i, y in enumerate(order(lp)[:k]):
    pool.append((np.float32(lp[y]), y, -1, 1, [i]))
    front.append(dict(idx=i, score=np.float32(lp[y]), code=_code(root_code, y), anc={i}))
  for lvl in range(1, s):
    kids = []
    for f in front:
      row = table[lvl][(f["code"] + _anc_code(np.isin(np.arange((s - 1) * k), list(f["anc"])))) % R]
      for y in order(row)[:k]:
        kids.append((np.float32(f["score"] + row[y]), y, f))
    base = len(pool)
    for j, (sc, y, f) in enumerate(kids):
      pool.append((sc, y, f["idx"], lvl + 1, pool[f["idx"]][4] + [base + j]))
    front = [dict(idx=base + j, score=kids[j][0], code=_code(kids[j][2]["code"], kids[j][1]),
                  anc=kids[j][2]["anc"] | {lvl * k + i}) for i, j in enumerate(order([c[0] for c in kids])[:k])]
  sel = list(order([p[0] for p in pool])[:n])
  node = {p: i for i, p in enumerate(sel)}
  mask = np.eye(n + 1, dtype=bool)
  mask[:, 0] = True
  for i, p in enumerate(sel):
    for a in pool[p][4]:
      mask[i + 1, node[a] + 1] = True
  return dict(tokens=[pool[p][1] for p in sel], scores=[pool[p][0] for p in sel], depths=[pool[p][3] for p in sel],
              parents=[node[pool[p][2]] if pool[p][2] >= 0 else -1 for p in sel], mask=mask)


@pytest.mark.parametrize("s,k,n,ties", [(4, 3, 20, False), (3, 4, 36, False), (8, 8, 31, False), (3, 2, 10, False),
                                        (4, 3, 25, True), (1, 4, 3, False)])
def test_tree_builder_equals_enumeration(s, k, n, ties):
  rng = np.random.default_rng(s * 100 + k * 10 + ties)
  if ties:  # integer log-probs in [-3, 0]: equal scores everywhere, children as good as parents
    table = rng.integers(-3, 1, (s, R, VD)).astype(np.float32)
  else:
    table = np.asarray(jax.nn.log_softmax(2.0 * rng.standard_normal((s, R, VD)), axis=-1), np.float32)
  b = 3
  root = np.arange(b) + 5
  tree, scores, _ = jax.jit(lambda t: e3.grow_tree(t[0][root % R], jnp.asarray(root)[:, None], _table_expand(t), (),
                                                   levels=s, top_k=k, num_nodes=n))(jnp.asarray(table))
  for r in range(b):
    want = _enumerate(table, int(root[r]), s, k, n)
    assert np.asarray(tree.tokens[r]).tolist() == [int(y) for y in want["tokens"]]
    assert np.asarray(tree.parents[r]).tolist() == want["parents"]
    assert np.asarray(tree.depths[r]).tolist() == want["depths"]
    np.testing.assert_array_equal(np.asarray(scores[r]), np.asarray(want["scores"], np.float32))
    np.testing.assert_array_equal(np.asarray(tree.ancestor_mask[r]), want["mask"])
  if ties:
    assert len(np.unique(np.asarray(scores))) < scores.size / 2          # the case really ties


# --- the draft's tree attention: every node sees its own path only ---------------------------------

P_LEN, SLOTS = 11, 40


def _fake_prompt(rng, b):
  """Random taps and tokens; rows of lengths 11 and 7 whose middle is 3-D ("image") positions and whose
  text after it sits at index + rope_delta."""
  lengths, delta = np.array([P_LEN, 7][:b]), np.array([4, 2][:b])
  pos = np.zeros((3, b, P_LEN), np.int32)
  for r in range(b):
    t = np.arange(lengths[r])
    pos[:, r, : lengths[r]] = np.where(t < 5, t, t + delta[r])
    pos[1, r, 2:5] = [3, 2, 4]                                          # the image rows
  ids = rng.integers(0, 64, (b, P_LEN)) * (np.arange(P_LEN) < lengths[:, None])
  taps = rng.standard_normal((b, P_LEN, 3 * HEAD.hidden_size)).astype(np.float32)
  return taps, ids, lengths, pos, delta, rng.integers(0, 64, b)


def _first_proposal(d, params, table, taps, ids, lengths, pos, delta, first):
  tgt = types.SimpleNamespace(embed_weight=table)
  prompt = Prompt(ids, jnp.arange(P_LEN)[None] < lengths[:, None], pos)
  pre = Prefill(prompt=prompt, taps=taps, lengths=lengths, first=first, rope_delta=delta, max_length=SLOTS)
  st = types.SimpleNamespace(root=first, rope_delta=delta, cache=types.SimpleNamespace(length=lengths))
  return d.propose(params, tgt, d.init(params, tgt, pre), st)[0]


@functools.partial(jax.jit, static_argnames=("hgd", "project"))
def _head_rows(hgd, hparams, table, g, ids, pos, cache, start, project: bool = False):
  """The head on T rows at slots [start, start + T), causal over the cache -> (log-probs, h, cache);
  g: target taps (project) or the previous step's h."""
  head = merge(hgd, hparams)
  lg, h, cache = head(head.project(g) if project else g, head.embed(ids, table), pos, cache, start,
                      causal_mask(start, ids.shape[1], SLOTS))
  return jax.nn.log_softmax(lg, axis=-1), h, cache


def _path(tree, r, i):
  out = []
  while i >= 0:
    out.append(i)
    i = int(tree.parents[r, i])
  return out[::-1]


def _check_well_formed(tree, scores, t2d, depth):
  n = tree.tokens.shape[1]
  for r in range(tree.tokens.shape[0]):
    par, dep, mask = (np.asarray(x[r]) for x in (tree.parents, tree.depths, tree.ancestor_mask))
    assert (par < np.arange(n)).all() and t2d[np.asarray(tree.tokens[r])].all()
    assert (np.diff(np.asarray(scores[r])) <= 0).all() and dep.max() <= depth
    for i in range(n):
      up = mask[par[i] + 1].copy()
      up[i + 1] = True
      assert (mask[i + 1] == up).all() and dep[i] == (dep[par[i]] if par[i] >= 0 else 0) + 1
    kids = {}
    for i in range(n):  # siblings hold distinct tokens (the walk needs it)
      assert kids.setdefault((par[i], int(tree.tokens[r, i])), i) == i


@pytest.mark.parametrize("s,k,n", [(4, 2, 15), (8, 8, 32)])
def test_tree_attention_sees_only_each_nodes_path(world, s, k, n):
  """Each node's score equals the head run sequentially on its own path (context, then its
  ancestors one row each): a row that saw a sibling's or a cousin's K/V would change its children.
  (4, 2, 15) verifies the whole pool."""
  head, b = world.head, 2
  rng = np.random.default_rng(s)
  table = jnp.asarray(rng.standard_normal((64, HEAD.hidden_size)).astype(np.float32))
  taps, ids, lengths, pos, delta, first = _fake_prompt(rng, b)
  d = e3.Eagle3Drafter(graphdef=Hashed(head.graphdef), levels=s, top_k=k, num_verify=n, taps=(0, 1, 2))
  params = (head.params, head.d2t)
  prop = jax.jit(functools.partial(_first_proposal, d))(params, table, taps, ids, lengths, pos, delta, first)
  tree, scores = prop.tree, np.asarray(prop.scores)
  _check_well_formed(tree, scores, world.t2d, s)
  assert np.asarray(tree.depths).max() >= min(s, 3)                    # deep enough to hold cousins
  to_draft = {int(v): i for i, v in enumerate(np.flatnonzero(world.t2d))}
  hgd = Hashed(head.graphdef)
  for r in range(b):
    L = int(lengths[r])
    nxt = np.concatenate([ids[r, 1:L], [first[r]]])[None]
    lp, h, ctx = _head_rows(hgd, head.params, table, taps[r:r + 1, :L], nxt, pos[:, r:r + 1, :L],
                            init_cache(HEAD, 1, SLOTS), jnp.zeros((1,), jnp.int32), project=True)
    root_lp, root_h = lp[0, -1], h[:, -1:]
    for i in range(n - 1):
      lp, g, cache, want = root_lp, root_h, ctx, np.float32(0)
      path = _path(tree, r, i)
      for depth, node in enumerate(path):  # node at depth + 1: its row sits at slot L + depth
        tok = int(tree.tokens[r, node])
        want = np.float32(want + lp[to_draft[tok]])
        if node != i:
          lps, g, cache = _head_rows(hgd, head.params, table, g, jnp.full((1, 1), tok, jnp.int32),
                                     jnp.full((3, 1, 1), L + depth + delta[r], jnp.int32), cache,
                                     jnp.full((1,), L + depth, jnp.int32))
          lp = lps[0, 0]
      np.testing.assert_allclose(scores[r, i], want, rtol=1e-5, atol=1e-4, err_msg=f"row {r} node {i} path {path}")


# --- T > 0: the target-sample walk keeps the target's law -------------------------------------------

def test_sampling_matches_ar_sampling(world):
  """3000 rows of one prompt; the 2nd and 3rd tokens (decided by the walk) of a 2/8/17 tree and of
  AR sampling by a chi-square two-sample test."""
  # a flat head (its top-8 root children all in the tree): more of the target's mass is drafted
  fx.assert_samples_like_ar(world.target, e3.bind(world.flat_head, world.target, 2, 8, 17), 64)


# --- batch rows are independent ---------------------------------------------------------------------

def _image_row(b, r):
  """Row r (one with an image) of a mixed batch as a batch of one: its image is the i-th, i = the
  image rows before it."""
  i = int(b.has_img[:r].sum())
  n = int(np.prod(b.image_grid_thw[i]))
  return types.SimpleNamespace(input_ids=b.input_ids[r:r + 1], attention_mask=b.attention_mask[r:r + 1],
                               positions=b.positions[:, r:r + 1], rope_delta=b.rope_delta[r:r + 1],
                               pixel_values=b.pixel_values[i * n:(i + 1) * n], image_grid_thw=b.image_grid_thw[i:i + 1])


def test_batch_rows_equal_their_batch_1_runs(world):
  """Rows of the 60-row run (the shortest and the longest with an image) decoded alone: the same tokens
  and the same accepted length every round (the draft reads nothing of other rows)."""
  b, stops, _, res, _ = run_preset(world, "small")
  d, params = e3.bind(world.head, world.target, *PRESETS["small"])
  lengths = b.attention_mask.sum(1)
  img = [r for r in range(ROWS) if b.has_img[r]]
  picked = [min(img, key=lambda r: lengths[r]), max(img, key=lambda r: lengths[r])]
  for r in picked:
    one = gen.generate(world.target, _image_row(b, r), drafter=(d, params),
                       max_new_tokens=MAX_NEW["small"], stop_tokens=stops)
    assert list(one.tokens[0]) == list(res.tokens[r])
    assert list(one.accepted[0]) == list(res.accepted[r])
