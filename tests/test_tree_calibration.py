"""Calibrated node scores (head/tree_calibration.py, bench/tree_calibration.py): the fit from ranks,
the teacher-forced ranks against real decode rounds, lossless decoding with the scores, storage."""

import numpy as np
import pytest

from glance_jax.bench import tree_calibration as btc
from glance_jax.bench.engine import generate
from glance_jax.head import Head
from glance_jax.head import tree_calibration as tc
from tests import decode_fixtures as fx


@pytest.fixture(scope="module")
def world():
  target, head, batches = fx.sixty_prompts()
  return target, head, batches


def test_fit_counts_parents_on_and_off_the_top1_path():
  # depth 3, ranks per root: (0, 0, 1) (0, 2, 0) (1, 0, -1) (5, ...) with K = 4, R = 3 bins
  ranks = np.array([[0, 0, 1], [0, 2, 0], [1, 0, -1], [5, 0, 0]])
  c = tc.fit(ranks, max_rank=3, k=4, prior=0.0)
  p_spine = np.exp(c.spine)
  assert c.n.tolist() == [[4, 2, 1], [0, 1, 1]]          # depth 1: 4 spine parents (the root each time)
  # depth 1 (root parent): ranks 0, 0, 1, 5 (>= K: a parent, no hit) -> 2/4, 1/4, 0
  np.testing.assert_allclose(p_spine[0], [0.5, 0.25, 1e-6], atol=1e-7)
  # depth 2 on the spine: roots 0 and 1 (ranks 0 and 2: the last bin pools ranks 2..3, width 2)
  np.testing.assert_allclose(p_spine[1], [0.5, 1e-6, 0.25], atol=1e-7)
  # off the spine: root 2 at depth 2 (rank 0 after a rank-1 first token), root 1 at depth 3 (after
  # its depth-2 token ranked 2); a cell never seen is 1/2
  assert np.exp(c.off[0]).tolist() == pytest.approx([0.5, 0.5, 0.5])
  assert c.counts[1, 1].tolist() == [1, 0, 0] and c.counts[1, 2].tolist() == [1, 0, 0]
  assert c.counts[0, 2].tolist() == [0, 1, 0]
  assert np.all(c.spine <= 0) and np.all(c.off <= 0)
  sp, off = c.tables(6)
  assert sp.shape == (3, 6) and np.all(sp[:, 2:] == sp[:, 2:3])   # ranks >= R - 1 share the last bin


def test_teacher_forced_ranks_are_what_chain_rounds_meet(world):
  """A chain round rooted at y_t accepts the leading rank-0 run of ranks[t] (capped at the block
  and the answer's end): the ranks are the real rounds'."""
  target, head, batches = world
  b = batches[0]
  import types
  for row in range(3):
    one = types.SimpleNamespace(**{k: (v[row:row + 1] if k != "positions" else v[:, row:row + 1])
                                   for k, v in vars(b).items() if v is not None},
                                pixel_values=None, image_grid_thw=None)
    ids = one.input_ids[0][one.attention_mask[0]]
    one = types.SimpleNamespace(input_ids=ids[None], attention_mask=np.ones((1, len(ids)), bool),
                                positions=one.positions[:, :, : len(ids)], rope_delta=one.rope_delta,
                                pixel_values=None, image_grid_thw=None)
    y = target.generate_greedy(one, 30, stop_tokens=())[0][0]
    ranks = btc.trajectory_ranks(target, head, one, y)
    res = generate(target, one, head=head, method="chain", budget=15, max_new_tokens=30, stop_tokens=())
    t = 0
    for a in res.accepted[0][:-1]:
      lead = 0
      while lead < ranks.shape[1] and ranks[t, lead] == 0:
        lead += 1
      assert a == lead, (row, t, a, ranks[t])
      t += int(a) + 1


def test_calibrated_trees_are_lossless_and_change_the_tree(world, tmp_path):
  target, head, batches = world
  rng = np.random.default_rng(0)
  calib = tc.TreeCalibration(spine=np.log(rng.uniform(0.2, 0.9, (15, 8))).astype(np.float32),
                             off=np.log(rng.uniform(0.01, 0.3, (15, 8))).astype(np.float32))
  scored = head.with_calibrated_scores(calib)
  for b in batches[:2]:
    ref = target.generate_greedy(b, 37, stop_tokens=())[0]
    for n in (15, 63):
      res = generate(target, b, head=scored, method="glance", budget=n, max_new_tokens=37, stop_tokens=())
      assert [list(t) for t in res.tokens] == [list(r[r >= 0]) for r in ref], n
  # the tree is built from the table: a table that prefers deep spines over siblings gives other nodes
  from glance_jax.decode import methods
  plain = methods.plan(target, "glance", head=head, budget=15)
  cal = methods.plan(target, "glance", head=scored, budget=15)
  assert cal.drafter.calibrated and not plain.drafter.calibrated
  lq = np.log(rng.dirichlet(np.ones(target.config.text.vocab_size), size=(1, 15))).astype(np.float32)
  a, c = plain.drafter.tree(lq).tree, cal.drafter.tree(lq, cal.params[2]).tree
  assert not np.array_equal(np.asarray(a.tokens), np.asarray(c.tokens))
  # stored beside the head, loaded with it; errors name the file
  from glance_jax.head import save_head
  save_head(tmp_path / "h", head.config, head.params)
  with pytest.raises(ValueError, match="no tree_calibration.json beside its checkpoint"):
    Head.load(tmp_path / "h", target=target).with_calibrated_scores()
  tc.save(tmp_path / "h", calib, {"prompts": 0})
  loaded = Head.load(tmp_path / "h", target=target)
  np.testing.assert_array_equal(loaded.calibration.off, calib.off)
  assert loaded.with_calibrated_scores().scores is loaded.calibration
  (tmp_path / "h" / tc.FILE).write_text('{"schema": "glance-tree-calibration/1", "spine": [[0.5]], "off": [[0.0]]}')
  with pytest.raises(ValueError, match=r"tree_calibration.json: key 'spine' must be \[15, R\] log-probabilities"):
    Head.load(tmp_path / "h", target=target)


def test_marginal_bins_fit_and_increments():
  """--by marginal: per (side, depth, bin of the node's own q) hits over candidates; the drafter's
  increments look each node's bin up, so the tree still follows each round's marginals."""
  import jax.numpy as jnp
  edges = (0.2, 0.6)
  # two roots, depth 2; hist: top-K candidates per bin at (t, d); ybin: the target token's bin
  ranks = np.array([[0, 1], [0, 0]])
  ybin = np.array([[2, 1], [2, 2]])
  hist = np.array([[[3, 1, 1], [3, 2, 0]], [[4, 0, 1], [3, 1, 1]]])
  c = tc.fit_marginal(ranks, ybin, hist, edges, k=5, prior=0.0)
  # both roots' depth-1 tokens rank 0, so both depth-2 parents are on the top-1 path
  assert c.counts[0].tolist() == [[0, 0, 2], [0, 1, 1]] and not c.counts[1].any()
  np.testing.assert_allclose(np.exp(c.spine[0]), [1e-6, 1e-6, 1.0], atol=1e-7)     # 2 hits of 2 candidates
  np.testing.assert_allclose(np.exp(c.spine[1]), [1e-6, 1 / 3, 1.0], atol=1e-6)   # bin 1: 1 hit of 3
  np.testing.assert_allclose(np.exp(c.off), 0.5)                                  # never seen
  top = jnp.log(jnp.asarray([[0.7, 0.25, 0.05], [0.5, 0.3, 0.21]]))
  sp, off = tc.increments(top, c.tables(3))
  np.testing.assert_allclose(np.asarray(sp), [[c.spine[0, 2], c.spine[0, 1], c.spine[0, 0]],
                                              [c.spine[1, 1], c.spine[1, 1], c.spine[1, 1]]])
  np.testing.assert_allclose(np.asarray(off), np.log(0.5), rtol=1e-6)


def test_trajectory_bins_match_the_ranks(world):
  target, head, batches = world
  import types
  b = batches[0]
  ids = b.input_ids[0][b.attention_mask[0]]
  one = types.SimpleNamespace(input_ids=ids[None], attention_mask=np.ones((1, len(ids)), bool),
                              positions=b.positions[:, :1, : len(ids)], rope_delta=b.rope_delta[:1],
                              pixel_values=None, image_grid_thw=None)
  y = target.generate_greedy(one, 20, stop_tokens=())[0][0]
  edges = tc.DEFAULT_EDGES
  ranks, ybin, hist = btc.trajectory_ranks(target, head, one, y, edges=edges, k=15)
  assert np.array_equal(ranks, btc.trajectory_ranks(target, head, one, y))
  assert np.all(hist.sum(-1) == 15)                         # every top-15 candidate in one bin
  valid = ranks >= 0
  assert np.all((ybin >= 0) & (ybin <= len(edges))) and valid.any()
  # the target token's bin is never above the top token's: a rank-0 token sits in the highest occupied bin
  top_bin = np.array([[max(np.flatnonzero(h)) for h in row] for row in hist])
  assert np.all(ybin[valid & (ranks == 0)] == top_bin[valid & (ranks == 0)])
  assert np.all(ybin[valid] <= top_bin[valid])
