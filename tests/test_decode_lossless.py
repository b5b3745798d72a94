"""Lossless at temperature 0 in fp32: every method and budget emits exactly AR greedy's tokens.

60 prompts (30 text-only, 30 with an image) on a tiny random target with a random head, stop tokens
that fall inside accepted blocks, and max_new_tokens that falls inside a block."""

import numpy as np
import pytest

from glance_jax.bench.engine import generate
from glance_jax.decode import generate as gen_lib
from glance_jax.decode import loop
from tests import decode_fixtures as fx
from tests import oracle
from tests import tracing

MAX_NEW = 37   # 1 + 16 + 16 + 4: the last full-acceptance block is cut by max_new_tokens
RUNS = [("ar", 1)] + [(m, b) for m in ("ngram", "chain", "glance") for b in (1, 15, 31, 63)]


@pytest.fixture(scope="module")
def setup():
  target, head, batches = fx.sixty_prompts()
  # stop tokens: two tokens the AR outputs emit mid-sequence, so stops land inside blocks
  free, _ = target.generate_greedy(batches[0], MAX_NEW, stop_tokens=())
  stops = fx.stops_inside_rounds(free[:, 3:30])
  refs = [target.generate_greedy(b, MAX_NEW, stop_tokens=stops)[0] for b in batches]
  return target, head, batches, stops, refs


def _rows(toks):
  return [list(r[r >= 0]) for r in toks]


def test_reference_has_stops_inside_and_full_length_rows(setup):
  _, _, _, stops, refs = setup
  lens = [len(r) for ref in refs for r in _rows(ref)]
  assert min(lens) < MAX_NEW and max(lens) == MAX_NEW     # some rows stop early, some run to the cap
  assert any(r[-1] in stops for ref in refs for r in _rows(ref))


@pytest.mark.parametrize("method,budget", RUNS)
def test_lossless_every_method_and_budget(setup, method, budget):
  target, head, batches, stops, refs = setup
  for b, ref in zip(batches, refs):
    res = generate(target, b, head=head, method=method, budget=budget, max_new_tokens=MAX_NEW,
                   stop_tokens=stops)
    assert [list(t) for t in res.tokens] == _rows(ref), (method, budget)


@pytest.mark.parametrize("budget", [127, 255])
def test_lossless_past_63_nodes(setup, budget):
  """Trees of 127 and 255 nodes (a v6e verify of that many rows may cost about one AR step): the
  same builder, verify and walk, on 20 of the prompts (text and images), stops inside blocks."""
  target, head, batches, stops, refs = setup
  for b, ref in zip(batches[:2], refs[:2]):
    res = generate(target, b, head=head, method="glance", budget=budget, max_new_tokens=MAX_NEW,
                   stop_tokens=stops)
    assert [list(t) for t in res.tokens] == _rows(ref), budget
    assert int(np.max(np.concatenate(res.accepted))) >= 1


@pytest.mark.parametrize("method,budget", [("chain", 15), ("glance", 63), ("glance", 1)])
def test_oracle_head_accepts_whole_blocks(setup, method, budget):
  """Handed the target's own continuation, the head's tree holds it: every full round accepts
  L = 15 drafts (tau = B = 16), and the output is still exactly AR's (stops inside blocks too)."""
  target, head, batches, stops, refs = setup
  for b, ref in zip(batches[:2], refs[:2]):
    free, _ = target.generate_greedy(b, MAX_NEW, stop_tokens=())
    res = generate(target, b, head=head, method=method, budget=budget, max_new_tokens=MAX_NEW, stop_tokens=(),
                   oracle_tokens=np.maximum(free, 0))
    assert [list(t) for t in res.tokens] == _rows(free)
    depth = min(budget, 15)
    for acc in res.accepted:
      assert np.all(acc[:-1] == depth), acc            # every round but the last (cut by max_new) is full
    if budget >= 15:
      full = np.concatenate([a[:-1] for a in res.accepted]) + 1
      assert full.mean() == 16.0
    with_stops = generate(target, b, head=head, method=method, budget=budget, max_new_tokens=MAX_NEW,
                          stop_tokens=stops, oracle_tokens=np.maximum(free, 0))
    assert [list(t) for t in with_stops.tokens] == _rows(ref)


def test_loop_traces_once_per_config_and_shape(setup):
  """generate's loop program, under chex.assert_max_traces(n=1): text and image batches and other
  stop token values reuse one trace (a second would raise)."""
  target, head, batches, stops, _ = setup
  with tracing.traced(gen_lib, "decode_rounds", loop.LOOP_STATIC, ("state",), n=1) as seen:
    for i, b in enumerate(batches[:4]):   # text and image batches share the loop's shapes
      generate(target, b, head=head, method="glance", budget=7, max_new_tokens=9, stop_tokens=stops[::1 - 2 * (i % 2)])
  assert len(seen) == 1 and seen[0]["drafter"].num_nodes == 7


def test_ar_loop_equals_hf_greedy_generate():
  """The loop's AR equals transformers' greedy generate() on the same tiny model (and so does
  every other method, by the tests above)."""
  torch = pytest.importorskip("torch")
  pytest.importorskip("transformers")
  import types
  from glance_jax.qwen3_vl import weights
  from glance_jax.qwen3_vl.positions import get_rope_index
  from glance_jax.qwen3_vl.target import Target
  cfg = oracle.CONFIG_B
  hf = oracle.hf_model(cfg, seed=21)
  target = Target(cfg, *weights.from_state_dict(cfg, oracle.state_dict_np(hf)))
  p = oracle.two_image_prompt(cfg, seed=21)
  ids = torch.from_numpy(p.ids)
  with torch.no_grad():
    ref = hf.generate(input_ids=ids, attention_mask=torch.ones_like(ids), mm_token_type_ids=(ids == cfg.image_token_id).long(),
                      pixel_values=torch.from_numpy(p.pixel_values), image_grid_thw=torch.from_numpy(p.grid_thw),
                      max_new_tokens=24, do_sample=False, eos_token_id=None, pad_token_id=0).numpy()[0, p.ids.shape[1]:]
  pos, delta = get_rope_index(p.ids, None, p.grid_thw, None, image_token_id=cfg.image_token_id,
                              video_token_id=cfg.video_token_id)
  inputs = types.SimpleNamespace(input_ids=p.ids, attention_mask=np.ones_like(p.ids, bool), positions=pos,
                                 rope_delta=delta, pixel_values=p.pixel_values, image_grid_thw=p.grid_thw)
  for method in ("ar", "ngram"):
    res = generate(target, inputs, method=method, budget=15, max_new_tokens=24, stop_tokens=())
    np.testing.assert_array_equal(res.tokens[0], ref)


@pytest.mark.parametrize("cost", [(1.0, 50.0, 60.0, 70.0), (50.0, 1.0, 60.0, 70.0), (50.0, 60.0, 1.0, 70.0),
                                  (50.0, 60.0, 70.0, 1.0), (2.0, 9.0, 11.0, 14.0)])
def test_lossless_auto_budget_at_every_width(setup, cost):
  """glance-auto with cost tables that force each width (0 = AR step, 15, 31, 63) and a mixed one:
  always AR's tokens; the forced tables really run only that width."""
  from glance_jax.decode import policies
  target, head, batches, stops, refs = setup
  rc = policies.RoundCost(dict(zip((0, 15, 31, 63), cost)))
  seen = set()
  for b, ref in zip(batches[:3], refs[:3]):
    res = generate(target, b, head=head, method="glance", budget=63, auto=True, round_cost=rc,
                   max_new_tokens=MAX_NEW, stop_tokens=stops)
    assert [list(t) for t in res.tokens] == _rows(ref), cost
    seen |= set(res.widths.tolist())
  if min(cost) == 1.0:
    assert seen == {(0, 15, 31, 63)[cost.index(1.0)]}, seen


@pytest.mark.parametrize("cost,allowed", [((1.0, 1.0, 1.0, 1.0), {0, 3, 7, 15}),
                                          ((1.0, 1e6, 1e6, 1e6), {0})])
def test_ngram_verifies_only_what_pays(setup, cost, allowed):
  """ngram verifies draft rows only when the cost table says they pay: with free verify rows it
  uses several widths (the smallest holding the proposal is not forced, but only static widths);
  with prohibitive ones only AR steps (AR's program: policies.ngram_pays_at_prior). Lossless either way."""
  from glance_jax.decode import policies
  target, head, batches, stops, refs = setup
  table = dict(zip((0, 3, 7, 15), cost))
  rc = policies.RoundCost(table, ngram=table)
  widths = set()
  for b, ref in zip(batches[:2], refs[:2]):
    res = generate(target, b, method="ngram", budget=15, max_new_tokens=MAX_NEW, stop_tokens=stops, round_cost=rc)
    assert [list(t) for t in res.tokens] == _rows(ref)
    # prohibitive rows: no proposal can pay at the prior counts, so AR's own program runs
    assert res.method == ("ar" if allowed == {0} else "ngram")
    widths |= set(res.widths.tolist())
  assert widths <= allowed and (len(widths) >= 2 or allowed == {0}), widths
  if allowed == {0}:
    assert widths == {0}


def test_calibration_record_is_the_accepted_length_of_the_smaller_tree(setup):
  """The observed A(w) a glance-63 round records for w = 15 / 31 is what a round verifying only the
  top-w tree accepts from the same state (the first round of glance-15 / glance-31 runs)."""
  target, head, batches, stops, refs = setup
  b = batches[1]
  big = generate(target, b, head=head, method="glance", budget=63, max_new_tokens=MAX_NEW, stop_tokens=stops)
  assert big.record_widths == (15, 31, 63)
  for j, w in enumerate((15, 31)):
    small = generate(target, b, head=head, method="glance", budget=w, max_new_tokens=MAX_NEW, stop_tokens=stops)
    got = [int(o[0, j]) for o in big.observed]
    want = [int(a[0]) for a in small.accepted]
    assert got == want, (w, got, want)
    pred_small = [float(p[0, -1]) for p in small.predicted]  # its widest recorded width is w
    np.testing.assert_allclose([float(p[0, j]) for p in big.predicted], pred_small, rtol=1e-5)
  assert all(int(o[0, 2]) == int(a[0]) for o, a in zip(big.observed, big.accepted))


def test_auto_builds_only_the_widest_width_that_could_pay(setup):
  """With a table where width 63 can never beat an AR step (16 tokens at most for 19.8 AR steps) and
  width 0 neither, glance-auto compiles (15, 31) only: the loop's tree has 31 nodes (its records
  stop at 31, no loop at budget 63 is traced), only those widths run, and the tokens are AR's. A
  table that keeps one width runs the plain loop: the same rounds as glance at that budget."""
  from glance_jax.decode import policies
  target, head, batches, stops, refs = setup
  rc = policies.RoundCost({0: 5.66, 15: 9.87, 31: 13.26, 63: 19.76})
  seen = set()
  with tracing.traced(gen_lib, "decode_rounds", loop.LOOP_STATIC, ("state",)) as traces:
    for b, ref in zip(batches[:2], refs[:2]):
      res = generate(target, b, head=head, method="glance", budget=63, auto=True, round_cost=rc,
                     max_new_tokens=MAX_NEW, stop_tokens=stops)
      assert [list(t) for t in res.tokens] == _rows(ref)
      assert res.record_widths == (15, 31) and res.num_nodes == 31 and res.budget == "auto"
      seen |= set(res.widths.tolist())
  assert seen <= {15, 31}, seen
  assert traces and all(t["drafter"].num_nodes == 31 and t["policy"].widths == (15, 31) for t in traces), traces
  one = policies.RoundCost({0: 50.0, 15: 2.0, 31: 50.0, 63: 60.0})
  b = batches[3]
  auto = generate(target, b, head=head, method="glance", budget=63, auto=True, round_cost=one,
                  max_new_tokens=MAX_NEW, stop_tokens=stops)
  fixed = generate(target, b, head=head, method="glance", budget=15, max_new_tokens=MAX_NEW, stop_tokens=stops)
  assert set(auto.widths.tolist()) == {15}
  assert [a.tolist() for a in auto.accepted] == [a.tolist() for a in fixed.accepted]
  assert [list(t) for t in auto.tokens] == _rows(refs[3])


def test_auto_pauses_drafting_where_rounds_do_not_pay(setup):
  """A random head's rounds earn (1 + A) / 9.87 tokens per AR step, far below an AR step's 1: glance-auto
  drafts two rounds (its gain starts at 2), pauses 8 plain AR steps, and each probe that does not pay
  doubles the pause (8, 16, 32, ...); AR's tokens throughout. With the pause off (table key
  'auto_pause': false, the default) the same table verifies width 15 every round."""
  from glance_jax.decode import policies
  from glance_jax.decode.policies import auto
  target, head, batches, stops, refs = setup
  rc = policies.RoundCost({0: 50.0, 15: 9.87, 31: 50.0, 63: 60.0}, compiled=(15,), pause=True)
  pattern, n = [15, 15], auto.PAUSE
  while len(pattern) < 4 * MAX_NEW:
    pattern += [0] * n + [15]
    n = min(2 * n, auto.PAUSE_MAX)
  for b, ref in zip(batches[:2], refs[:2]):
    res = generate(target, b, head=head, method="glance", budget=63, auto=True, round_cost=rc,
                   max_new_tokens=MAX_NEW, stop_tokens=stops)
    assert [list(t) for t in res.tokens] == _rows(ref)
    got = res.widths.tolist()
    assert got == pattern[: len(got)] and got.count(0) >= auto.PAUSE, got
  import dataclasses
  off = generate(target, batches[0], head=head, method="glance", budget=63, auto=True,
                 round_cost=dataclasses.replace(rc, pause=policies.RoundCost({}).pause), max_new_tokens=MAX_NEW,
                 stop_tokens=stops)
  assert set(off.widths.tolist()) == {15} and [list(t) for t in off.tokens] == _rows(refs[0])


def test_auto_with_a_table_that_says_nothing_pays_runs_ar(setup):
  """A cost table whose replay found no compiled set beating AR (`auto_plain_ar`, e.g. measured at a
  batch where verify rows are too dear) makes glance-auto the AR loop: AR's tokens, no verify rows."""
  import dataclasses

  from glance_jax.decode import policies
  target, head, batches, stops, refs = setup
  rc = dataclasses.replace(policies.RoundCost({0: 5.0, 15: 9.0, 31: 12.0, 63: 19.0}, compiled=(15,)), plain_ar=True)
  res = generate(target, batches[0], head=head, method="glance", budget=63, auto=True, round_cost=rc,
                 max_new_tokens=MAX_NEW, stop_tokens=stops)
  assert res.method == "ar" and set(res.widths.tolist()) == {0}
  assert [list(t) for t in res.tokens] == _rows(refs[0])
