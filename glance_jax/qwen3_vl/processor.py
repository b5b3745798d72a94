"""Qwen3-VL image preprocessing in numpy + PIL, bit-exact with transformers' `Qwen2VLImageProcessorPil`.

Pipeline per image (transformers' `Qwen2VLImageProcessorPil.preprocess`): RGB uint8 -> smart_resize to multiples of patch*merge (PIL
bicubic) -> x * (1/255) in float64, cast to float32 -> (x - mean) / std in float32 -> patches in 2x2
merge-block order, each patch duplicated over the temporal axis. The torchvision ("Fast") backend gives
slightly different pixels; we follow the PIL backend, which is what transformers uses without torchvision.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Sequence
from typing import Any, Union

import numpy as np
import PIL.Image
import PIL.ImageOps

ImageLike = Union[str, os.PathLike, PIL.Image.Image, np.ndarray]


def smart_resize(height: int, width: int, factor: int = 32, min_pixels: int = 65536,
                 max_pixels: int = 16777216) -> tuple[int, int]:
  """(height, width) rounded to multiples of `factor` with area in [min_pixels, max_pixels].

  Same arithmetic as transformers: Python `round` (half to even), then rescale by sqrt of the area ratio.
  """
  if max(height, width) / min(height, width) > 200:
    raise ValueError(f"image {height}x{width} has aspect ratio {max(height, width) / min(height, width):.1f};"
                     " it must not exceed 200")
  h_bar = round(height / factor) * factor
  w_bar = round(width / factor) * factor
  if h_bar * w_bar > max_pixels:
    beta = math.sqrt((height * width) / max_pixels)
    h_bar = max(factor, math.floor(height / beta / factor) * factor)
    w_bar = max(factor, math.floor(width / beta / factor) * factor)
  elif h_bar * w_bar < min_pixels:
    beta = math.sqrt(min_pixels / (height * width))
    h_bar = math.ceil(height * beta / factor) * factor
    w_bar = math.ceil(width * beta / factor) * factor
  return h_bar, w_bar


def _open_image(path: str | os.PathLike) -> PIL.Image.Image:
  path = os.fspath(path)
  if not os.path.isfile(path):
    raise ValueError(f"image file not found: {path}")
  try:
    image = PIL.Image.open(path)
    image.load()
  except (OSError, SyntaxError, ValueError, PIL.Image.DecompressionBombError) as e:
    raise ValueError(f"not a readable image file: {path} ({type(e).__name__}: {e})") from None
  return image


def _pil_to_rgb(image: PIL.Image.Image) -> PIL.Image.Image:
  """transformers' convert_to_rgb: transparency is composited onto white."""
  if "A" in image.getbands() or image.info.get("transparency") is not None:
    image = image.convert("RGBA")
    background = PIL.Image.new("RGBA", image.size, (255, 255, 255, 255))
    return PIL.Image.alpha_composite(background, image).convert("RGB")
  return image.convert("RGB")


def _array_to_rgb(array: np.ndarray) -> np.ndarray:
  """uint8 [H, W], [H, W, 1], [H, W, 3] or [H, W, 4] -> uint8 [H, W, 3] (alpha composited onto white)."""
  if array.dtype != np.uint8:
    raise ValueError(f"image array must be uint8 [H, W, 3], got {array.dtype} {tuple(array.shape)}")
  if array.ndim == 2:
    array = array[:, :, None]
  if array.ndim != 3 or array.shape[-1] not in (1, 3, 4) or min(array.shape[:2]) < 1:
    raise ValueError(f"image array must be [H, W], [H, W, 1], [H, W, 3] or [H, W, 4], got {tuple(array.shape)}")
  if array.shape[-1] == 1:
    return np.repeat(array, 3, axis=-1)
  if array.shape[-1] == 4:
    alpha = array[..., 3:4] / 255
    return np.round(alpha * array[..., :3] + (1 - alpha) * 255).astype(np.uint8)
  return array


def load_image(image: ImageLike) -> PIL.Image.Image:
  """Any supported image input -> an RGB PIL image.

  Paths follow transformers' `load_image` (EXIF orientation applied, then `convert("RGB")`); in-memory PIL
  images and arrays follow the image processor's `convert_to_rgb` (transparency composited onto white).
  A missing or unreadable file raises ValueError naming the path.
  """
  if isinstance(image, (str, os.PathLike)):
    return PIL.ImageOps.exif_transpose(_open_image(image)).convert("RGB")
  if isinstance(image, PIL.Image.Image):
    return _pil_to_rgb(image)
  if isinstance(image, np.ndarray):
    return PIL.Image.fromarray(_array_to_rgb(image))
  raise ValueError(f"unsupported image type {type(image).__name__}; expected a path, PIL image or uint8 array")


def _as_image_list(images: ImageLike | Sequence[ImageLike] | None) -> list[ImageLike]:
  if images is None:
    return []
  if isinstance(images, (str, os.PathLike, PIL.Image.Image, np.ndarray)):
    return [images]
  return list(images)


@dataclasses.dataclass(frozen=True)
class ImageProcessor:
  """Qwen3-VL image preprocessing settings; defaults are the real Qwen3-VL preprocessor_config.json.

  min_pixels / max_pixels are pixel AREAS (the config's size.shortest_edge / size.longest_edge).
  """

  patch_size: int = 16
  temporal_patch_size: int = 2
  merge_size: int = 2
  min_pixels: int = 65536
  max_pixels: int = 16777216
  image_mean: tuple[float, ...] = (0.5, 0.5, 0.5)
  image_std: tuple[float, ...] = (0.5, 0.5, 0.5)
  resample: int = 3  # PIL.Image.BICUBIC
  rescale_factor: float = 1 / 255

  @property
  def patch_dim(self) -> int:
    """Features per pixel_values row: C * T * P * P (1536 for Qwen3-VL)."""
    return len(self.image_mean) * self.temporal_patch_size * self.patch_size ** 2

  @classmethod
  def from_config(cls, config: dict[str, Any], source: str = "preprocessor config") -> "ImageProcessor":
    """From a preprocessor_config.json dict; min_pixels / max_pixels keys override size (as in transformers)."""
    for key in ("do_resize", "do_rescale", "do_normalize", "do_convert_rgb"):
      if config.get(key) is False:
        raise ValueError(f"{source}: {key}=false is not supported")
    size = config.get("size") or {}
    kw: dict[str, Any] = {}
    if "shortest_edge" in size:
      kw["min_pixels"] = int(size["shortest_edge"])
    if "longest_edge" in size:
      kw["max_pixels"] = int(size["longest_edge"])
    for key in ("min_pixels", "max_pixels", "patch_size", "temporal_patch_size", "merge_size", "resample"):
      if config.get(key) is not None:
        kw[key] = int(config[key])
    for key in ("image_mean", "image_std"):
      if config.get(key) is not None:
        value = config[key]
        kw[key] = tuple(float(v) for v in (value if isinstance(value, (list, tuple)) else [value] * 3))
    if config.get("rescale_factor") is not None:
      kw["rescale_factor"] = float(config["rescale_factor"])
    out = cls(**kw)
    if len(out.image_mean) != 3 or len(out.image_std) != 3:
      raise ValueError(f"{source}: image_mean / image_std must have 3 entries, got {out.image_mean}, "
                       f"{out.image_std}")
    if out.min_pixels > out.max_pixels:
      raise ValueError(f"{source}: min_pixels {out.min_pixels} > max_pixels {out.max_pixels}")
    return out

  @classmethod
  def from_pretrained(cls, checkpoint_dir: str) -> "ImageProcessor":
    """Reads `preprocessor_config.json` from a checkpoint directory."""
    path = os.path.join(checkpoint_dir, "preprocessor_config.json")
    if not os.path.isfile(path):
      raise ValueError(f"preprocessor config not found: {path}")
    try:
      with open(path, encoding="utf-8") as f:
        config = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
      raise ValueError(f"cannot read {path}: {e}") from None
    return cls.from_config(config, source=path)

  def resized_size(self, height: int, width: int) -> tuple[int, int]:
    """Pixel size an image of (height, width) is resized to."""
    return smart_resize(height, width, self.patch_size * self.merge_size, self.min_pixels, self.max_pixels)

  def grid_thw(self, height: int, width: int) -> tuple[int, int, int]:
    """(t, h, w) patch grid of an image of (height, width) pixels, without processing it."""
    rh, rw = self.resized_size(height, width)
    return 1, rh // self.patch_size, rw // self.patch_size

  def num_image_tokens(self, height: int, width: int) -> int:
    """<|image_pad|> tokens an image of (height, width) pixels expands to."""
    t, h, w = self.grid_thw(height, width)
    return t * h * w // self.merge_size ** 2

  def preprocess_one(self, image: ImageLike) -> tuple[np.ndarray, tuple[int, int, int]]:
    """One image -> (pixel_values float32 [gh*gw, C*T*P*P], (1, gh, gw))."""
    pil = load_image(image)
    height, width = pil.height, pil.width
    rh, rw = self.resized_size(height, width)
    # transformers round-trips through np.array / fromarray; resizing the RGB image directly is identical.
    resized = np.asarray(pil.resize((rw, rh), resample=self.resample))  # uint8 [rh, rw, 3]
    x = (resized.astype(np.float64) * self.rescale_factor).astype(np.float32)
    mean = np.asarray(self.image_mean, np.float32)
    std = np.asarray(self.image_std, np.float32)
    x = ((x - mean) / std).transpose(2, 0, 1)  # [C, rh, rw] float32
    p, m, tp = self.patch_size, self.merge_size, self.temporal_patch_size
    c, gh, gw = x.shape[0], rh // p, rw // p
    x = x.reshape(c, gh // m, m, p, gw // m, m, p).transpose(1, 4, 2, 5, 0, 3, 6)  # [gh/m, gw/m, m, m, C, p, p]
    x = np.broadcast_to(x[:, :, :, :, :, None], (*x.shape[:5], tp, p, p))       # duplicate over time
    return np.ascontiguousarray(x.reshape(gh * gw, c * tp * p * p)), (1, gh, gw)

  def __call__(self, images: ImageLike | Sequence[ImageLike]) -> tuple[np.ndarray, np.ndarray]:
    """Images (PIL, uint8 [H, W, 3] arrays, or file paths) ->
    (pixel_values float32 [sum(t*h*w), C*T*P*P], image_grid_thw int64 [n_images, 3]).

    Rows are the images' patches concatenated in order, each image in 2x2 merge-block order.
    """
    patches, grids = [], []
    for image in _as_image_list(images):
      x, grid = self.preprocess_one(image)
      patches.append(x)
      grids.append(grid)
    if not patches:
      return np.zeros((0, self.patch_dim), np.float32), np.zeros((0, 3), np.int64)
    return np.concatenate(patches, axis=0), np.asarray(grids, dtype=np.int64)
