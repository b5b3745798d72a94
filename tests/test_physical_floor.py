"""glance_jax.bench.physical_floor: the bytes an AR token reads (counted against a real target's
parameters), the datasheet lookup by jax's device kind, the read probe, and the paper-tau
predictions benchmarks/gpu_8b.py prints."""

import dataclasses
import math

import jax
import pytest

from benchmarks import gpu_8b
from glance_jax.aot.bounds import PAPER_ARM_TAUS, PAPER_TASKS, step_bytes
from glance_jax.bench import physical_floor as pf
from glance_jax.bench.random_models import make_target, size_config
from glance_jax.config import QWEN3_VL_8B


def test_the_floor_counts_every_weight_a_decode_step_reads():
  """Weights: every text-decoder leaf and the lm_head, not the embedding (one row a token) nor the
  vision tower; KV: K and V of every layer at the context, per kv head."""
  cfg = size_config("tiny")
  target = make_target(cfg, 0)
  read = 0
  for path, leaf in jax.tree_util.tree_leaves_with_path(target.params):
    key = jax.tree_util.keystr(path)
    if "visual" in key or "embed_tokens" in key:
      continue
    read += leaf.size
  t = cfg.text
  f = pf.floor(cfg, context=100, bytes_per_param=2, device_kind="cpu", probed_gb_s=None)
  assert f["weights_gb"] * 1e9 == 2 * read
  assert f["kv_gb"] * 1e9 == pytest.approx(t.num_hidden_layers * 2 * t.num_key_value_heads * t.head_dim * 100 * 2)
  assert f["nominal"] is None and f["probed_ms"] is None


@pytest.mark.parametrize("kind,name", [
    ("NVIDIA H100 80GB HBM3", "H100 SXM"), ("NVIDIA H100 PCIe", "H100 PCIe"), ("NVIDIA H200", "H200 SXM"),
    ("NVIDIA GH200 480GB", None), ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM"), ("NVIDIA A100-SXM4-40GB", "A100 40GB"),
    ("TPU v5 lite", "TPU v5e"), ("TPU v5", "TPU v5p"), ("TPU v6 lite", "TPU v6e"), ("cpu", None)])
def test_datasheet_bandwidth_by_device_kind(kind, name):
  n = pf.nominal(kind)
  assert (n.name if n else None) == name


def test_the_8b_floor_on_the_issues_chips():
  """The issue's figures: ~3.2 ms on an H200, ~5.5 on v5p, ~9.3 on v6e (bf16, one chip)."""
  ms = {k: pf.floor(QWEN3_VL_8B, 1024, 2, k, None)["nominal"]["ms"] for k in ("NVIDIA H200", "TPU v5", "TPU v6 lite")}
  assert ms["NVIDIA H200"] == pytest.approx(3.2, abs=0.1)
  assert ms["TPU v5"] == pytest.approx(5.5, abs=0.1) and ms["TPU v6 lite"] == pytest.approx(9.3, abs=0.1)
  t = dataclasses.asdict(QWEN3_VL_8B.text)
  assert step_bytes(t, 1024, batch=8, devices=4) == pytest.approx(
      (step_bytes(t, 0) + 8 * (step_bytes(t, 1024) - step_bytes(t, 0))) / 4)


def test_the_probe_reads_a_buffer():
  gb_s = pf.probe_gb_s(8 << 20, repeats=3)
  assert 0.1 < gb_s < 1e5
  text = pf.describe(pf.floor(size_config("tiny"), 64, 2, "NVIDIA H200", gb_s), ar_ms=1.0)
  assert "H200 SXM's datasheet 4800 GB/s" in text and "probed" in text


def test_paper_predictions_divide_each_arms_own_taus_by_its_round():
  preds = {p["arm"]: p for p in gpu_8b.paper_predictions({"ar": 1.0, "glance-31": 1.4, "glance-63": 1.6,
                                                           "eagle3": 2.0, "two-model": 3.5})}
  assert list(preds) == ["glance-63", "eagle3", "two-model"]
  for arm, key in (("glance-63", "glance63"), ("eagle3", "eagle3"), ("two-model", "twomodel")):
    p = preds[arm]
    assert p["speedup"] == {t: PAPER_ARM_TAUS[key][t] / p["round_over_ar"] for t in PAPER_TASKS}
    assert p["geomean"] == pytest.approx(math.prod(p["speedup"].values()) ** (1 / len(PAPER_TASKS)))
  assert "| glance-63 | 1.60 | 3.09 -> 1.93x |" in gpu_8b.paper_table(list(preds.values()))
