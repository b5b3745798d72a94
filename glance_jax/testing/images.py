"""Random RGB images for tests and benchmarks (content is irrelevant; sizes drive the token count)."""

import numpy as np


def random_images(seed: int = 0, shapes=((64, 96), (96, 64))) -> list[np.ndarray]:
  """uint8 [h, w, 3] per (h, w) in `shapes`, a pure function of `seed`."""
  rng = np.random.default_rng(seed)
  return [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in shapes]


def demo_pngs(root, n: int, size: tuple[int, int] = (64, 64)) -> list[str]:
  """`n` random images (seeds 0..n-1) written as root/img{i}.png: the image files task records
  point at in tests."""
  import pathlib

  from PIL import Image
  out = []
  for i in range(n):
    p = pathlib.Path(root) / f"img{i}.png"
    Image.fromarray(random_images(i, (size,))[0]).save(p)
    out.append(str(p))
  return out
