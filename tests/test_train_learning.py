"""Learning: a head trained on a tiny target's own answers reaches a clearly higher tau on
held-out prompts than the untrained head (benchmarks/train_learning.py prints both)."""

import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_trained_head_beats_untrained_on_heldout(tmp_path):
  spec = importlib.util.spec_from_file_location("train_learning", ROOT / "benchmarks" / "train_learning.py")
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  report = mod.main(["--steps", "150", "--prompts", "32", "--heldout", "8", "--max-new-tokens", "40",
                     "--workdir", str(tmp_path)])
  before, after = report["tau_untrained"], report["tau_trained"]
  assert after["glance63"] >= before["glance63"] + 0.2, report
  assert after["glance15"] > before["glance15"], report
  assert after["chain15"] >= before["chain15"], report
