"""benchmarks/ar_paths.py at its smallest: both greedy AR paths run and emit the same tokens."""

import math

from benchmarks import ar_paths


def test_ar_paths_smallest(tmp_path):
  rep = ar_paths.main(["--sizes", "micro", "--new-tokens", "4", "--repeats", "1",
                       "--json", str(tmp_path / "ar.json")])
  (row,) = rep["rows"]
  assert row["same_tokens"] is True
  assert math.isfinite(row["loop_over_greedy"]) and (tmp_path / "ar.json").is_file()
