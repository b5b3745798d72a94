"""The embedded default that `python decode.py` runs with no --model: a tiny random Qwen3-VL written
as a real checkpoint directory (so the real loaders run) and a synthetic picture of coloured shapes."""

from __future__ import annotations

import pathlib
import tempfile

import numpy as np
from PIL import Image, ImageDraw

DEFAULT_PROMPT = "Describe this image."


def default_image(seed: int = 0, size: tuple[int, int] = (96, 128)) -> Image.Image:
  rng = np.random.default_rng(seed)
  img = Image.new("RGB", (size[1], size[0]), (255, 255, 255))
  draw = ImageDraw.Draw(img)
  for _ in range(4):
    x0, y0 = rng.integers(0, size[1] - 24), rng.integers(0, size[0] - 24)
    color = tuple(int(c) for c in rng.integers(0, 256, 3))
    draw.rectangle([x0, y0, x0 + 24, y0 + 24], fill=color)
  return img


def default_checkpoint(root: str | pathlib.Path | None = None) -> pathlib.Path:
  """Writes (once per root) the tiny random checkpoint and returns its directory."""
  from glance_jax.testing.checkpoint import make_tiny_checkpoint
  root = pathlib.Path(root or tempfile.mkdtemp(prefix="glance_jax_"))
  path = root / "tiny-random-qwen3-vl"
  if not (path / "config.json").exists():
    make_tiny_checkpoint(path, seed=0)
  return path
