"""The Flax target equals transformers' Qwen3-VL (fp32, every parameter re-randomised)."""

import types

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from glance_jax.qwen3_vl import weights  # noqa: E402
from glance_jax.qwen3_vl.positions import get_rope_index  # noqa: E402
from glance_jax.qwen3_vl.target import Target  # noqa: E402
from tests import oracle  # noqa: E402

CONFIGS = {"A": oracle.CONFIG_A, "B": oracle.CONFIG_B}


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def case(request):
  cfg = CONFIGS[request.param]
  hf = oracle.hf_model(cfg, seed=ord(request.param))
  graphdef, params = weights.from_state_dict(cfg, oracle.state_dict_np(hf))
  target = Target(cfg, graphdef, params)
  prompt = oracle.two_image_prompt(cfg, seed=ord(request.param))
  pos, delta = get_rope_index(prompt.ids, None, prompt.grid_thw, None, image_token_id=cfg.image_token_id,
                              video_token_id=cfg.video_token_id)
  inputs = types.SimpleNamespace(input_ids=prompt.ids, attention_mask=np.ones_like(prompt.ids, bool),
                                 positions=pos, rope_delta=delta, pixel_values=prompt.pixel_values,
                                 image_grid_thw=prompt.grid_thw)
  return types.SimpleNamespace(cfg=cfg, hf=hf, target=target, prompt=prompt, inputs=inputs)


def _hf_inputs(case):
  ids = torch.from_numpy(case.prompt.ids)
  return dict(input_ids=ids, attention_mask=torch.ones_like(ids),
              mm_token_type_ids=(ids == case.cfg.image_token_id).long(),
              pixel_values=torch.from_numpy(case.prompt.pixel_values),
              image_grid_thw=torch.from_numpy(case.prompt.grid_thw))


def test_positions_and_rope_delta_match_hf(case):
  hf_in = _hf_inputs(case)
  pos, delta = case.hf.model.get_rope_index(hf_in["input_ids"], hf_in["mm_token_type_ids"],
                                            hf_in["image_grid_thw"])
  np.testing.assert_array_equal(case.inputs.positions, pos.numpy())
  np.testing.assert_array_equal(case.inputs.rope_delta, delta.numpy().reshape(-1))


def test_prefill_logits_match_hf_at_every_position(case):
  with torch.no_grad():
    ref = case.hf(**_hf_inputs(case)).logits.numpy()[0]
  cache = case.target.init_cache(1, 128)
  out = case.target.prefill(case.inputs, cache)
  got = np.asarray(out.logits[0])
  assert got.dtype == np.float32 and got.shape == ref.shape
  assert np.abs(got - ref).max() <= 1e-4, np.abs(got - ref).max()


def test_tapped_hidden_states_match_hf(case):
  """Tap i = output of decoder layer i AFTER its deepstack addition (what the head must see in
  training and decoding alike). transformers 5.x records hidden_states[i + 1] with a hook on the
  layer, i.e. BEFORE the deepstack addition, so inside the deepstack range we add HF's own
  deepstack features at the image rows; outside it the two are the same tensor."""
  n_ds = len(case.cfg.vision.deepstack_visual_indexes)
  taps = tuple(range(case.cfg.text.num_hidden_layers - 1))
  hf_in = _hf_inputs(case)
  with torch.no_grad():
    hs = case.hf(**hf_in, output_hidden_states=True).hidden_states
    ds = case.hf.model.visual(hf_in["pixel_values"], grid_thw=hf_in["image_grid_thw"]).deepstack_features
  vis = case.prompt.ids[0] == case.cfg.image_token_id
  out = case.target.prefill(case.inputs, case.target.init_cache(1, 128), tap_layers=taps)
  assert sorted(out.taps) == list(taps)
  for i in taps:
    want = hs[i + 1].numpy()[0].copy()
    if i < n_ds:
      want[vis] += ds[i].numpy()
    np.testing.assert_allclose(np.asarray(out.taps[i][0]), want, atol=1e-4, rtol=0)


def test_greedy_32_tokens_equal_hf_generate(case):
  with torch.no_grad():
    ref = case.hf.generate(**_hf_inputs(case), max_new_tokens=32, do_sample=False, eos_token_id=None,
                           pad_token_id=0)
  ref = ref.numpy()[0, case.prompt.ids.shape[1]:]
  toks, n = case.target.generate_greedy(case.inputs, 32, stop_tokens=())
  assert n[0] == 32
  np.testing.assert_array_equal(toks[0], ref)


def test_cached_decode_equals_full_forward(case):
  """Prefill + 4 one-token decode steps give the logits of one forward over the extended prompt."""
  t = case.target
  extra = np.array([[7, 3, 9, 5]])
  cache = t.init_cache(1, 128)
  out = t.prefill(case.inputs, cache, logits_at="last")
  cache, stepwise = out.cache, []
  for tok in extra[0]:
    o = t.decode(np.array([tok]), cache, case.inputs.rope_delta)
    cache = o.cache
    stepwise.append(np.asarray(o.logits[0, 0]))
  ids = np.concatenate([case.prompt.ids, extra], axis=1)
  pos, delta = get_rope_index(ids, None, case.prompt.grid_thw, None, image_token_id=case.cfg.image_token_id,
                              video_token_id=case.cfg.video_token_id)
  full = types.SimpleNamespace(input_ids=ids, attention_mask=np.ones_like(ids, bool), positions=pos,
                               rope_delta=delta, pixel_values=case.prompt.pixel_values,
                               image_grid_thw=case.prompt.grid_thw)
  ref = np.asarray(t.prefill(full, t.init_cache(1, 128)).logits[0, -4:])
  np.testing.assert_allclose(np.stack(stepwise), ref, atol=1e-4, rtol=0)
  # and the forward_block path (tree verifier) over the same 4 tokens with a causal mask
  cache = t.prefill(case.inputs, t.init_cache(1, 128), logits_at="last").cache
  length = int(cache.length[0])
  posb = (cache.length[:, None] + np.asarray(case.inputs.rope_delta)[:, None] + np.arange(4)[None])
  blk = t.forward_block(extra, posb, np.tril(np.ones((1, 4, 4), bool)), cache)
  np.testing.assert_allclose(np.asarray(blk.logits[0]), np.stack(stepwise), atol=1e-4, rtol=0)
  assert int(blk.cache.length[0]) == length  # forward_block writes the rows but does not commit


def test_batch_of_two_right_padded_matches_single_rows(case):
  """Two prompts of different lengths in one call: each row's logits equal its own call."""
  t, cfg = case.target, case.cfg
  short = np.array([[5, 6, 7, 8, 9]])
  ids = np.concatenate([case.prompt.ids, np.zeros((1, 0), np.int64)], 1)
  pad = np.zeros((1, ids.shape[1] - short.shape[1]), np.int64)
  batch_ids = np.concatenate([ids, np.concatenate([short, pad], 1)], 0)
  mask = np.zeros(batch_ids.shape, bool)
  mask[0], mask[1, :5] = True, True
  pos, delta = get_rope_index(batch_ids, mask, case.prompt.grid_thw, None, image_token_id=cfg.image_token_id,
                              video_token_id=cfg.video_token_id)
  inputs = types.SimpleNamespace(input_ids=batch_ids, attention_mask=mask, positions=pos, rope_delta=delta,
                                 pixel_values=case.prompt.pixel_values, image_grid_thw=case.prompt.grid_thw)
  toks, _ = t.generate_greedy(inputs, 6, stop_tokens=())
  single = types.SimpleNamespace(input_ids=short, attention_mask=np.ones_like(short, bool),
                                 positions=np.broadcast_to(np.arange(5), (3, 1, 5)), rope_delta=np.zeros(1, np.int32),
                                 pixel_values=None, image_grid_thw=None)
  ref0, _ = t.generate_greedy(case.inputs, 6, stop_tokens=())
  ref1, _ = t.generate_greedy(single, 6, stop_tokens=())
  np.testing.assert_array_equal(toks, np.concatenate([ref0, ref1]))
