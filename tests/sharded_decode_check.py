"""Run in a subprocess with 8 fake CPU devices (see test_sharding.py)."""

import types

import jax
import numpy as np

from glance_jax import sharding as shd
from glance_jax.qwen3_vl.positions import get_rope_index
from glance_jax.qwen3_vl.target import Target
from tests import oracle


def main():
  assert jax.device_count() == 8, jax.devices()
  cfg = oracle.CONFIG_A
  prompt = oracle.two_image_prompt(cfg, seed=5)
  short = [7, 8, 9, 10, 11]
  ids = np.zeros((2, prompt.ids.shape[1]), np.int64)
  ids[0] = prompt.ids[0]
  ids[1, :5] = short
  mask = ids != 0
  mask[0] = True
  pos, delta = get_rope_index(ids, mask, prompt.grid_thw, None, image_token_id=cfg.image_token_id,
                              video_token_id=cfg.video_token_id)
  inputs = types.SimpleNamespace(input_ids=ids, attention_mask=mask, positions=pos, rope_delta=delta,
                                 pixel_values=prompt.pixel_values, image_grid_thw=prompt.grid_thw)
  single = Target.random(cfg, seed=1)
  ref, _ = single.generate_greedy(inputs, 12, stop_tokens=())
  mesh = shd.make_mesh((2, 2, 2))
  sharded = single.shard(mesh)
  q = sharded.params["model"]["language_model"]["layers"][0]["self_attn"]["q_proj"]["weight"]
  assert "tensor" in tuple(q.get_value().sharding.spec), q.get_value().sharding
  assert len(q.get_value().sharding.device_set) == 8
  got, _ = sharded.generate_greedy(inputs, 12, stop_tokens=())
  np.testing.assert_array_equal(got, ref)
  born = Target.random(cfg, seed=1, mesh=mesh)       # created already sharded, under jit
  got2, _ = born.generate_greedy(inputs, 12, stop_tokens=())
  np.testing.assert_array_equal(got2, ref)
  # the GLANCE loop: target and head both sharded on the mesh, the same tokens as on one device
  import dataclasses
  from glance_jax.decode.generate import generate
  from glance_jax.head import Head
  from glance_jax.testing.random_weights import lively
  single = dataclasses.replace(single, params=lively(single.params, 7))
  from glance_jax.head.config import HeadConfig
  from glance_jax.head.model import abstract_head
  hc = HeadConfig.for_target(cfg, num_layers=2)
  graphdef, abstract = abstract_head(hc)
  head = Head(hc, graphdef, lively(abstract, 8))      # lively reads shapes only: no initialiser compiled
  # chain is glance's loop with another tree builder (nothing sharding-specific): not repeated here
  runs = [("glance", 15), ("ngram", 15)]
  refs = [generate(single, inputs, head=head, method=m, budget=b, max_new_tokens=12, stop_tokens=()) for m, b in runs]
  ar = single.generate_greedy(inputs, 12, stop_tokens=())[0]
  sharded = single.shard(mesh)
  shead = dataclasses.replace(head, params=jax.device_put(head.params, shd.state_shardings(head.params, mesh)))
  for (m, b), r in zip(runs, refs):
    got = generate(sharded, inputs, head=shead, method=m, budget=b, max_new_tokens=12, stop_tokens=())
    assert [list(t) for t in got.tokens] == [list(t) for t in r.tokens], m
    assert [list(t) for t in got.tokens] == [list(a[a >= 0]) for a in ar], m
  # parent-conditioned trees: the correction's params (vocab rows of `out` on tensor) on the mesh too
  from glance_jax.head import parent_correction as pc
  ccfg = pc.CorrectionConfig.for_head(hc, width=32, rank=8)
  cgd, cparams = pc.abstract_correction(ccfg)
  corr = pc.Correction(ccfg, cgd, lively(cparams, 11))
  phead = head.with_parent_correction(corr)
  pref = generate(single, inputs, head=phead, method="glance", budget=31, max_new_tokens=12, stop_tokens=())
  scorr = dataclasses.replace(corr, params=jax.device_put(corr.params, shd.state_shardings(corr.params, mesh)))
  assert len(scorr.params["out"].get_value().sharding.device_set) == 8
  got = generate(sharded, inputs, head=shead.with_parent_correction(scorr), method="glance", budget=31,
                 max_new_tokens=12, stop_tokens=())
  assert [list(t) for t in got.tokens] == [list(t) for t in pref.tokens] == [list(a[a >= 0]) for a in ar], "parent"
  # the rivals: an EAGLE-3 head (its params and draft cache on the mesh) and two-model speculation
  # (a smaller draft Qwen3-VL sharded like the target), the same tokens as on one device and as AR
  from glance_jax.eagle3 import Eagle3Checkpoint, Eagle3Config, init_eagle3, vocab_map_from_counts
  from glance_jax.config import tiny_config
  from glance_jax.bench import random_models
  t = cfg.text
  e3 = Eagle3Config(hidden_size=t.hidden_size, intermediate_size=t.intermediate_size,
                    num_attention_heads=t.num_attention_heads, num_key_value_heads=t.num_key_value_heads,
                    head_dim=t.head_dim, vocab_size=t.vocab_size, draft_vocab_size=t.vocab_size // 2,
                    mrope_section=t.mrope_section, aux_layer_ids=(0, 1, t.num_hidden_layers - 1))
  egd, eparams = init_eagle3(e3, seed=3)
  d2t, t2d = vocab_map_from_counts(np.random.default_rng(0).integers(0, 9, t.vocab_size), e3.draft_vocab_size)
  ehead = Eagle3Checkpoint(e3, egd, lively(eparams, 9), jax.numpy.asarray(d2t), jax.numpy.asarray(t2d))
  sehead = ehead._replace(params=jax.device_put(ehead.params, shd.state_shardings(ehead.params, mesh)))
  draft = random_models.make_target(tiny_config(layers=1, hidden=32, heads=2, kv_heads=2, head_dim=16,
                                                intermediate=64, vision_depth=1, deepstack=(0,)), 10)
  for m, h, sh in (("eagle3-chain", ehead, sehead), ("eagle3", ehead, sehead), ("two-model", draft, draft.shard(mesh))):
    r = generate(single, inputs, head=h, method=m, max_new_tokens=12, stop_tokens=())
    got = generate(sharded, inputs, head=sh, method=m, max_new_tokens=12, stop_tokens=())
    assert [list(x) for x in got.tokens] == [list(x) for x in r.tokens] == [list(a[a >= 0]) for a in ar], m
  # the decode state's layout, set in the prefill and kept by the loop's constraints: the target's and
  # the head's K/V with rows on data and kv heads on tensor, the other per-row buffers rows on data
  from glance_jax.decode import generate as gen
  from glance_jax.decode import methods
  from jax.sharding import PartitionSpec as P
  plan = methods.plan(sharded, "glance", head=shead, budget=15)
  args, st = gen.start(sharded, inputs, plan, max_new_tokens=12, stop_tokens=())
  from jax.sharding import NamedSharding
  kv = NamedSharding(mesh, P("data", None, "tensor", None))
  for when, state in (("prefill", st), ("loop", gen.loop(args, st))):
    for name, x in (("cache.k", state.cache.k[0]), ("cache.v", state.cache.v[-1]), ("head k", state.drafter.k[0])):
      assert x.sharding.is_equivalent_to(kv, x.ndim), (when, name, x.sharding)
    assert state.out.sharding.spec[0] == "data" and state.history.sharding.spec[0] == "data", when
  print("SHARDED_OK", ref.tolist())


if __name__ == "__main__":
  main()
