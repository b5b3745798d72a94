"""get_rope_index vs transformers' Qwen3VLModel.get_rope_index on a tiny random config."""

import numpy as np
import pytest

from glance_jax.qwen3_vl.positions import decode_positions, get_rope_index

VS, VE, IMG, VID = 500, 501, 502, 503


def ours(ids, mask=None, image_grid=None, video_grid=None):
  return get_rope_index(np.asarray(ids), mask, image_grid, video_grid, image_token_id=IMG, video_token_id=VID)


@pytest.fixture(scope="module")
def hf_model():
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  cfg = transformers.Qwen3VLConfig(
      vision_config=dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=16,
                         temporal_patch_size=2, spatial_merge_size=2, out_hidden_size=64,
                         num_position_embeddings=64, deepstack_visual_indexes=[0]),
      text_config=dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=32, rms_norm_eps=1e-6,
                       rope_parameters=dict(rope_type="default", rope_theta=5e6, mrope_section=[6, 5, 5],
                                            mrope_interleaved=True)),
      image_token_id=IMG, video_token_id=VID, vision_start_token_id=VS, vision_end_token_id=VE,
      tie_word_embeddings=False)
  torch.manual_seed(0)
  return transformers.Qwen3VLModel(cfg).eval()


def hf(model, ids, mask=None, image_grid=None, video_grid=None):
  import torch
  ids = torch.tensor(np.asarray(ids), dtype=torch.long)
  types = (ids == IMG).long() + 2 * (ids == VID).long()
  as_t = lambda g: None if g is None else torch.tensor(np.asarray(g), dtype=torch.long)
  pos, delta = model.get_rope_index(ids, types, as_t(image_grid), as_t(video_grid),
                                    attention_mask=None if mask is None else torch.tensor(np.asarray(mask)))
  return pos.numpy(), delta.numpy().reshape(-1)


def assert_same(a, b):
  (pos, delta), (ref_pos, ref_delta) = a, b
  assert pos.dtype == np.int32 and delta.dtype == np.int32
  np.testing.assert_array_equal(pos, ref_pos)
  np.testing.assert_array_equal(delta, ref_delta)


def image(grid):
  t, h, w = grid
  return [VS] + [IMG] * (t * h * w // 4) + [VE]


def test_doc_example_without_torch():
  """4 text + 6 image tokens (grid 1x4x6, merged 2x3) + 8 text: the image's (t, h, w) positions start at
  4, the text after it resumes at 4 + max(1, 2, 3) = 7."""
  ids = [[10, 11, 12, VS] + [IMG] * 6 + [VE, 20, 21, 13, 12, 10, 14, 12]]
  pos, delta = ours(ids, None, [[1, 4, 6]])
  assert pos[0, 0].tolist() == [0, 1, 2, 3, 4, 4, 4, 4, 4, 4] + list(range(7, 15))
  assert pos[1, 0].tolist() == [0, 1, 2, 3, 4, 4, 4, 5, 5, 5] + list(range(7, 15))
  assert pos[2, 0].tolist() == [0, 1, 2, 3, 4, 5, 6, 4, 5, 6] + list(range(7, 15))
  assert delta.tolist() == [-3]
  assert decode_positions(np.array([18]), delta)[:, 0, 0].tolist() == [15, 15, 15]


def test_two_images_of_different_grids(hf_model):
  grids = [[1, 4, 6], [1, 6, 2]]
  ids = [[10, 11] + image(grids[0]) + [12, 13, 14] + image(grids[1]) + [15, 16, 17]]
  assert_same(ours(ids, None, grids), hf(hf_model, ids, None, grids))
  mask = np.ones_like(ids)
  assert_same(ours(ids, mask, grids), hf(hf_model, ids, mask, grids))


def test_text_only_is_arange(hf_model):
  ids = [[5, 6, 7, 8, 9, 10, 11]]
  pos, delta = ours(ids)
  np.testing.assert_array_equal(pos, np.broadcast_to(np.arange(7), (3, 1, 7)))
  assert delta.tolist() == [0]
  assert_same((pos, delta), hf(hf_model, ids, np.ones_like(ids)))


@pytest.mark.parametrize("side", ["right", "left"])
def test_batch_with_padding(hf_model, side):
  """Row 0: one image; row 1: two images, longer. Images are consumed in row order."""
  grids = [[1, 2, 4], [1, 4, 4], [1, 2, 2]]
  rows = [[10] + image(grids[0]) + [11, 12],
          [20, 21] + image(grids[1]) + [22] + image(grids[2]) + [23, 24, 25]]
  s = max(map(len, rows))
  ids = np.zeros((2, s), np.int64)
  mask = np.zeros((2, s), np.int64)
  for b, r in enumerate(rows):
    sl = slice(0, len(r)) if side == "right" else slice(s - len(r), s)
    ids[b, sl], mask[b, sl] = r, 1
  got = ours(ids, mask, grids)
  assert_same(got, hf(hf_model, ids, mask, grids))
  assert (got[0][:, mask == 0] == 0).all()
  # Row 1: the 2x2 image advances 2 but holds 4 tokens, the 1x1 one advances 1 for 1 token -> delta -2.
  assert got[1].tolist() == [0, -2]


def test_video_frames_are_separate_runs(hf_model):
  """A video grid (t, h, w) is t frames of (1, h, w), each between timestamps and vision tokens."""
  frame = [VS] + [VID] * 4 + [VE]
  ids = [[10, 11, 30, 31] + frame + [32, 33] + frame + [12] + image([1, 2, 2]) + [13]]
  assert_same(ours(ids, None, [[1, 2, 2]], [[2, 4, 4]]), hf(hf_model, ids, None, [[1, 2, 2]], [[2, 4, 4]]))


def test_random_layouts_match_hf(hf_model):
  rng = np.random.default_rng(0)
  for _ in range(20):
    rows, grids = [], []
    for _ in range(3):
      row = list(rng.integers(0, 400, rng.integers(1, 5)))
      for _ in range(rng.integers(0, 3)):
        g = [1, 2 * int(rng.integers(1, 5)), 2 * int(rng.integers(1, 5))]
        grids.append(g)
        row += image(g) + list(rng.integers(0, 400, rng.integers(0, 4)))
      rows.append(row)
    s = max(map(len, rows))
    ids = np.zeros((3, s), np.int64)
    mask = np.zeros((3, s), np.int64)
    for b, r in enumerate(rows):
      ids[b, :len(r)], mask[b, :len(r)] = r, 1
    grid_arr = np.asarray(grids) if grids else None
    assert_same(ours(ids, mask, grid_arr), hf(hf_model, ids, mask, grid_arr))


def test_decode_positions_shapes():
  delta = np.array([-3, 2], np.int32)
  pos = decode_positions(np.array([[18, 19, 20], [5, 6, 7]]), delta)
  assert pos.shape == (3, 2, 3) and pos.dtype == np.int32
  assert pos[0].tolist() == [[15, 16, 17], [7, 8, 9]]
  assert (pos[0] == pos[1]).all() and (pos[0] == pos[2]).all()
  assert decode_positions(4, delta)[:, :, 0].tolist() == [[1, 6]] * 3


def test_errors_name_the_problem():
  ids = [[10] + [IMG] * 5 + [11]]
  with pytest.raises(ValueError, match="has 5 tokens but grid \\(1, 4, 6\\) needs 6"):
    ours(ids, None, [[1, 4, 6]])
  with pytest.raises(ValueError, match="no image_grid_thw row left"):
    ours(ids, None, None)
  with pytest.raises(ValueError, match="image_grid_thw has 2 rows"):
    ours([[10] + [IMG] * 6], None, [[1, 4, 6], [1, 2, 2]])
  with pytest.raises(ValueError, match="attention_mask shape"):
    ours([[1, 2, 3]], np.ones((1, 2)))
