"""Target.vision_arrays: the image metadata, memoised per grid."""

import numpy as np
import pytest

from glance_jax.qwen3_vl.target import load_target
from glance_jax.qwen3_vl.vision_meta import vision_meta
from glance_jax.testbed import paths


def test_vision_arrays_equal_the_host_metadata_and_are_shared_per_grid():
  t = load_target(str(paths.TARGET))
  v = t.config.vision
  grids = [np.array([[1, 8, 8]]), np.array([[1, 4, 6], [1, 8, 8]])]
  for grid in grids:
    got = t.vision_arrays(grid)
    want = vision_meta(grid, num_position_embeddings=v.num_position_embeddings,
                       spatial_merge_size=v.spatial_merge_size).as_dict()
    assert set(got) == set(want)
    for k in want:
      np.testing.assert_array_equal(np.asarray(got[k]), want[k])
    again = t.vision_arrays(grid.astype(np.int32))          # the same grid in another dtype
    assert all(again[k] is got[k] for k in got)
  first, second = (t.vision_arrays(g) for g in grids)
  assert any(first[k].shape != second[k].shape for k in first)
  for _ in range(2):   # a bad grid is an error every time, not a cached result
    with pytest.raises(ValueError, match="not divisible by spatial_merge_size"):
      t.vision_arrays(np.array([[1, 3, 4]]))
