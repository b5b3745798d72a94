"""The parent-conditioned correction (head/parent_correction.py) in decoding: lossless at T = 0 on
60 prompts (batch rows == AR per row) and at T = 1, with and without a draft vocabulary; an
untrained (zero) correction builds the product-of-marginals tree; the correction changes the tree;
storage beside the head, with errors naming the file and key."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from glance_jax.bench.engine import generate
from glance_jax.decode import methods
from glance_jax.decode.drafters import block
from glance_jax.head import Head
from glance_jax.head import parent_correction as pc
from glance_jax.testing.random_weights import lively
from tests import decode_fixtures as fx


def random_correction(head_cfg, seed: int = 0, zero_out: bool = False, path: bool = False) -> pc.Correction:
  cfg = pc.CorrectionConfig.for_head(head_cfg, width=32, rank=8, path=path)
  graphdef, params = pc.abstract_correction(cfg)
  params = lively(params, seed)
  if zero_out:
    params["out"].set_value(jnp.zeros_like(params["out"].get_value()))
  return pc.Correction(cfg, graphdef, params)


@pytest.fixture(scope="module")
def world():
  return fx.sixty_prompts()


@pytest.mark.parametrize("path", [False, True])
def test_parent_trees_are_lossless_on_sixty_prompts(world, path):
  target, head, batches = world
  corrected = head.with_parent_correction(random_correction(head.config, 1, path=path))
  for i, b in enumerate(batches if not path else batches[:3]):
    ref = target.generate_greedy(b, 29, stop_tokens=())[0]
    for n in ((15, 63) if i < 2 else (31,)):
      res = generate(target, b, head=corrected, method="glance", budget=n, max_new_tokens=29, stop_tokens=())
      assert [list(t) for t in res.tokens] == [list(r[r >= 0]) for r in ref], (i, n)


def test_parent_trees_with_a_draft_vocabulary_are_lossless(world):
  target, head, batches = world
  counts = np.random.default_rng(3).integers(0, 50, head.config.vocab_size)
  from dataclasses import replace
  h = replace(head, token_counts=counts).with_draft_vocab(target, 64).with_parent_correction(
      random_correction(head.config, 2))
  plan = methods.plan(target, "glance", head=h, budget=31)
  assert plan.drafter.correction is not None and plan.drafter.draft_vocab == 64
  for b in batches[:2]:
    ref = target.generate_greedy(b, 29, stop_tokens=())[0]
    res = generate(target, b, head=h, method="glance", budget=31, max_new_tokens=29, stop_tokens=())
    assert [list(t) for t in res.tokens] == [list(r[r >= 0]) for r in ref]


def _trees(target, head, corr, lq_seed=0, n=15):
  """(plain tree, corrected tree) of one round's random hidden states through the head's logits."""
  from flax import nnx
  plain = methods.plan(target, "glance", head=head, budget=n)
  cor = methods.plan(target, "glance", head=head.with_parent_correction(corr), budget=n)
  rng = np.random.default_rng(lq_seed)
  hidden = jnp.asarray(rng.normal(size=(2, 15, head.config.hidden_size)), jnp.float32)
  merged = nnx.merge(target.graphdef, target.params)
  logits = merged.logits(hidden)
  a = plain.drafter.tree(jax.nn.log_softmax(logits, -1)).tree
  c = cor.drafter.corrected_tree(cor.params, merged, hidden, logits, jnp.asarray([3, 5], jnp.int32)).tree
  return a, c


@pytest.mark.parametrize("path", [False, True])
def test_zero_correction_is_the_product_of_marginals_and_a_trained_one_changes_the_tree(world, path):
  target, head, _ = world
  a, z = _trees(target, head, random_correction(head.config, 4, zero_out=True, path=path))
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(z)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  a, c = _trees(target, head, random_correction(head.config, 4, path=path))
  assert not np.array_equal(np.asarray(a.tokens), np.asarray(c.tokens))


def test_the_path_changes_the_tree_where_the_parent_alone_does_not(world):
  """The same correction with and without its path term (path_proj zeroed): different trees, so the
  bag the builder carries reaches the bias."""
  target, head, _ = world
  with_path = random_correction(head.config, 8, path=True)
  params = jax.tree.map(lambda x: x, with_path.params)
  params["path_proj"]["weight"].set_value(jnp.zeros_like(params["path_proj"]["weight"].get_value()))
  _, c = _trees(target, head, with_path)
  _, c0 = _trees(target, head, pc.Correction(with_path.config, with_path.graphdef, params))
  assert not np.array_equal(np.asarray(c.tokens), np.asarray(c0.tokens))


def test_samples_like_ar_at_temperature_one():
  from glance_jax.config import tiny_config
  cfg = tiny_config(vocab_size=32, layers=2, deepstack=(0,), vision_depth=1)
  target = fx.lively_target(cfg, seed=41)
  head = fx.lively_head(target, seed=42)
  head = head.with_parent_correction(random_correction(head.config, 5))
  fx.assert_samples_like_ar(target, block.build(target, head, 15), vocab=32)


def test_stored_beside_the_head_and_errors_name_the_file(world, tmp_path):
  target, head, _ = world
  from glance_jax.head import save_head
  save_head(tmp_path / "h", head.config, head.params)
  with pytest.raises(ValueError, match="no parent_correction.json beside its checkpoint"):
    Head.load(tmp_path / "h", target=target).with_parent_correction()
  corr = random_correction(head.config, 6)
  pc.save(tmp_path / "h", corr, {"steps": 0})
  loaded = Head.load(tmp_path / "h", target=target)
  np.testing.assert_array_equal(np.asarray(loaded.correction.params["out"].get_value()),
                                np.asarray(corr.params["out"].get_value()))
  assert loaded.with_parent_correction().parent is loaded.correction
  from safetensors.numpy import load_file, save_file
  w = load_file(str(tmp_path / "h" / pc.WEIGHTS))
  save_file({k: v for k, v in w.items() if k != "down.weight"}, str(tmp_path / "h" / pc.WEIGHTS))
  with pytest.raises(ValueError, match=r"parent_correction.safetensors: missing key 'down.weight'"):
    Head.load(tmp_path / "h", target=target)
  w["out"] = w["out"][:, :3]
  save_file(w, str(tmp_path / "h" / pc.WEIGHTS))
  with pytest.raises(ValueError, match=r"key 'out' has shape \(\d+, 3\)"):
    Head.load(tmp_path / "h", target=target)
  other = pc.CorrectionConfig(hidden_size=8, vocab_size=head.config.vocab_size, depth=15, width=4, rank=2)
  pc.save(tmp_path / "h", pc.Correction(other, *pc.init_correction(other)))
  with pytest.raises(ValueError, match="made for a head of width 8"):
    Head.load(tmp_path / "h", target=target)
  pathed = random_correction(head.config, 9, path=True)
  pc.save(tmp_path / "h", pathed)
  loaded = Head.load(tmp_path / "h", target=target).correction
  assert loaded.config.path and loaded.config == pathed.config
  np.testing.assert_array_equal(np.asarray(loaded.params["path_proj"]["weight"].get_value()),
                                np.asarray(pathed.params["path_proj"]["weight"].get_value()))


@pytest.mark.parametrize("width,path", [(2, False), (4, False), (4, True)])
def test_widened_correction_gives_the_same_bias(width, path):
  """pc.widen: fed the widened pair's tiled embedding and tiled (tied: / width) hidden state, the
  correction's bias is the small one's."""
  from flax import nnx
  from tests import oracle
  small = fx.lively_target(oracle.CONFIG_B, seed=4)
  head = fx.lively_head(small, seed=5)
  corr = random_correction(head.config, 7, path=path)
  wide = pc.widen(corr, width)
  assert wide.config.hidden_size == width * corr.config.hidden_size
  rng = np.random.default_rng(1)
  d = corr.config.hidden_size
  emb, hid, bag = (jnp.asarray(rng.normal(size=(5, d)), jnp.float32) for _ in range(3))
  depth, on = jnp.asarray([0, 3, 7, 14, 2]), jnp.asarray([True, False, True, False, False])
  bag = bag if path else None
  a = nnx.merge(corr.graphdef, corr.params).bias(emb, hid, depth, on, path_emb=bag)
  tile = lambda x: None if x is None else jnp.tile(x, (1, width))   # noqa: E731
  b = nnx.merge(wide.graphdef, wide.params).bias(tile(emb), tile(hid) / width, depth, on, path_emb=tile(bag))
  assert np.abs(np.asarray(a)).max() > 0.5
  np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-4, atol=1e-4)
