"""ImageProcessor vs transformers' Qwen2VLImageProcessorPil (bit-exact), plus input handling and errors."""

import json

import numpy as np
import PIL.Image
import pytest

from glance_jax.qwen3_vl.processor import ImageProcessor, load_image, smart_resize


def _hf(min_pixels, max_pixels):
  pytest.importorskip("torch")
  pytest.importorskip("transformers")
  from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
  return Qwen2VLImageProcessorPil(patch_size=16, temporal_patch_size=2, merge_size=2, image_mean=[0.5] * 3,
                                  image_std=[0.5] * 3,
                                  size={"shortest_edge": min_pixels, "longest_edge": max_pixels})


def _random_image(h, w, seed=0, channels=3):
  shape = (h, w) if channels is None else (h, w, channels)
  return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


@pytest.mark.parametrize("h, w, min_pixels, max_pixels, grid", [
    (64, 96, 32 * 32, 16777216, (1, 4, 6)),       # tiny, no resize
    (37, 203, 32 * 32, 16777216, (1, 2, 12)),     # odd aspect ratio, rounding both ways
    (300, 500, 32 * 32, 64 * 64 * 4, (1, 6, 10)),  # over max_pixels: shrunk
    (20, 30, 65536, 16777216, (1, 14, 20)),       # under min_pixels (real default): upscaled
    (300, 500, 65536, 16777216, (1, 18, 32)),     # real defaults, doc example 288x512
])
def test_matches_hf_pil_processor(h, w, min_pixels, max_pixels, grid):
  img = _random_image(h, w, seed=h * w)
  ref = _hf(min_pixels, max_pixels)(images=[img], return_tensors="np")
  pixel_values, grid_thw = ImageProcessor(min_pixels=min_pixels, max_pixels=max_pixels)(img)
  assert grid_thw.dtype == np.int64 and pixel_values.dtype == np.float32
  assert grid_thw.tolist() == [list(grid)] == ref["image_grid_thw"].tolist()
  assert pixel_values.shape == (grid[1] * grid[2], 1536)
  np.testing.assert_array_equal(pixel_values, ref["pixel_values"])


def test_several_images_and_input_kinds_match_hf(tmp_path):
  """PIL (RGB, RGBA, L, P), uint8 arrays (HWC, grayscale, RGBA) and paths, several at once."""
  rgba = _random_image(48, 80, seed=1, channels=4)
  gray = _random_image(70, 40, seed=2, channels=1)  # transformers rejects 2-D arrays in a list
  rgb = _random_image(33, 65, seed=3)
  palette = PIL.Image.fromarray(rgb).convert("P")
  path = tmp_path / "rgb.png"
  PIL.Image.fromarray(rgb).save(path)
  images = [PIL.Image.fromarray(rgb), PIL.Image.fromarray(rgba), PIL.Image.fromarray(gray[..., 0]), palette, rgba, gray]
  ref = _hf(32 * 32, 16777216)(images=images, return_tensors="np")
  proc = ImageProcessor(min_pixels=32 * 32)
  pixel_values, grid_thw = proc(images + [str(path), path])
  n_ref = ref["pixel_values"].shape[0]
  np.testing.assert_array_equal(pixel_values[:n_ref], ref["pixel_values"])
  assert grid_thw[:len(images)].tolist() == ref["image_grid_thw"].tolist()
  # The two path entries decode to the first image.
  first = proc(images[0])[0]
  np.testing.assert_array_equal(pixel_values[n_ref:], np.concatenate([first, first]))


@pytest.mark.parametrize("h, w", [(300, 500), (224, 224), (1000, 1000), (80, 112), (16, 3200), (3000, 20)])
def test_smart_resize_matches_hf(h, w):
  pytest.importorskip("transformers")
  from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize as hf_smart_resize
  for lo, hi in [(65536, 16777216), (32 * 32, 64 * 64 * 4), (32 * 32, 16777216)]:
    assert smart_resize(h, w, 32, lo, hi) == hf_smart_resize(h, w, 32, lo, hi)


def test_smart_resize_doc_examples():
  assert smart_resize(300, 500) == (288, 512)
  assert smart_resize(224, 224) == (256, 256)
  assert smart_resize(1000, 1000) == (992, 992)
  assert smart_resize(80, 112, min_pixels=32 * 32) == (64, 128)  # round half to even: 2.5 -> 2, 3.5 -> 4
  with pytest.raises(ValueError, match="aspect ratio"):
    smart_resize(10, 2010)


def test_grid_helpers_agree_with_processing():
  proc = ImageProcessor(min_pixels=32 * 32)
  _, grid = proc(_random_image(37, 203))
  assert proc.grid_thw(37, 203) == tuple(grid[0])
  assert proc.num_image_tokens(37, 203) == grid[0].prod() // 4 == 6
  assert proc.patch_dim == 1536


def test_bad_paths_raise_value_error_naming_path(tmp_path):
  missing = tmp_path / "nope.png"
  with pytest.raises(ValueError, match="not found.*nope.png"):
    ImageProcessor()([str(missing)])
  not_image = tmp_path / "notes.png"
  not_image.write_text("definitely not a png")
  with pytest.raises(ValueError, match="not a readable image.*notes.png"):
    load_image(not_image)
  with pytest.raises(ValueError, match="uint8"):
    load_image(np.zeros((8, 8, 3), np.float32))
  with pytest.raises(ValueError, match="unsupported image type"):
    load_image(3.0)


def test_load_image_is_rgb():
  gray = _random_image(9, 7, channels=None)
  assert load_image(gray).mode == "RGB"
  np.testing.assert_array_equal(np.asarray(load_image(gray)), np.repeat(gray[..., None], 3, axis=-1))
  # RGBA arrays composite onto white: fully transparent -> 255.
  rgba = _random_image(4, 4, channels=4)
  rgba[..., 3] = 0
  assert (np.asarray(load_image(rgba)) == 255).all()


def test_from_pretrained_real_qwen3_vl_config(tmp_path):
  config = {
      "image_processor_type": "Qwen2VLImageProcessorFast", "do_convert_rgb": True, "do_normalize": True,
      "do_rescale": True, "do_resize": True, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
      "merge_size": 2, "patch_size": 16, "processor_class": "Qwen3VLProcessor", "resample": 3,
      "rescale_factor": 0.00392156862745098, "size": {"longest_edge": 16777216, "shortest_edge": 65536},
      "temporal_patch_size": 2,
  }
  (tmp_path / "preprocessor_config.json").write_text(json.dumps(config))
  proc = ImageProcessor.from_pretrained(str(tmp_path))
  assert proc == ImageProcessor(rescale_factor=0.00392156862745098)
  # Legacy min_pixels / max_pixels keys override size, as in transformers.
  config.update(min_pixels=1024, max_pixels=4096)
  (tmp_path / "preprocessor_config.json").write_text(json.dumps(config))
  proc = ImageProcessor.from_pretrained(str(tmp_path))
  assert (proc.min_pixels, proc.max_pixels) == (1024, 4096)
  with pytest.raises(ValueError, match="preprocessor config not found"):
    ImageProcessor.from_pretrained(str(tmp_path / "missing"))
