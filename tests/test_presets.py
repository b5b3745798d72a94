"""Every preset's parameter keys and shapes equal transformers' model built on the meta device (no
weights), and the preset round-trips through its config.json."""

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from glance_jax.config import Qwen3VLConfig  # noqa: E402
from glance_jax.presets import PRESETS, memory_estimate  # noqa: E402
from glance_jax.qwen3_vl.weights import abstract_model, drop_tied, expected_keys  # noqa: E402
from tests import oracle  # noqa: E402


def _hf_shapes(cfg):
  with torch.device("meta"):
    if cfg.text_only:
      model = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**oracle.hf_kwargs(cfg)))
    else:
      model = transformers.Qwen3VLForConditionalGeneration(oracle.hf_config(cfg))
  return drop_tied(cfg, {k: tuple(v.shape) for k, v in model.state_dict().items()})


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_keys_and_shapes_equal_transformers_meta_model(name):
  cfg = PRESETS[name]
  ours = expected_keys(abstract_model(cfg)[1])
  theirs = _hf_shapes(cfg)
  assert set(ours) == set(theirs), (sorted(set(ours) ^ set(theirs)))[:8]
  assert {k: ours[k] for k in ours} == {k: theirs[k] for k in ours}
  assert Qwen3VLConfig.from_hf_dict(cfg.to_hf_dict()) == cfg


def test_memory_estimate_counts_bf16_weights_and_cache():
  cfg = PRESETS["Qwen/Qwen3-8B"]
  n = sum(int(torch.tensor(s).prod()) for s in _hf_shapes(cfg).values())
  est = memory_estimate(cfg, param_count=n, tokens=1)
  assert est["params"] == 2 * n and 8.1e9 < n < 8.3e9       # Qwen3-8B: 8.19B parameters
  assert est["kv_cache"] == 2 * 36 * 8 * 128 * 2
