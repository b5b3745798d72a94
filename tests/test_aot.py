"""Ahead-of-time TPU compiles from this CPU host (glance_jax.aot): every method's loop and round,
prefill, regeneration and the train step, tiny size, sharded over a v5e:2x2 topology.

Runs the command in a subprocess: libtpu is loaded there only (the rest of the suite runs with
JAX_PLATFORMS=cpu, see conftest.py), and the report it writes is what is checked.
"""

import json
import os
import subprocess
import sys

import pytest

from glance_jax.aot import topology

needs_libtpu = pytest.mark.skipif(topology.libtpu_version() is None, reason=topology.MISSING)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(*args, out=None):
  env = dict(os.environ, PYTHONPATH=ROOT)
  cmd = [sys.executable, "-m", "glance_jax.aot", "--tiny", *args] + (["--out", str(out)] if out else [])
  return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


@needs_libtpu
def test_every_program_compiles_for_v5e(tmp_path):
  # glance15 and glance31 are glance63's program at other static widths (all three compiled by
  # `python -m glance_jax.aot`); chain is the same loop with the chain tree builder
  r = _run("--topology", "v5e:2x2", "--mesh", "1,1,4", "--train-mesh", "1,4,1",
           "--methods", "ar,ngram,chain,glance63", "--dump-hlo", out=tmp_path)
  assert r.returncode == 0, r.stderr[-3000:]
  rep = json.loads((tmp_path / "report.json").read_text())
  assert rep["meta"]["devices"] == 4 and rep["meta"]["device_kind"] == "TPU v5 lite"
  rows = {p["name"]: p for p in rep["programs"]}
  failed = {n: p["error"] for n, p in rows.items() if "error" in p}
  assert not failed, failed
  want = ["prefill.b1", "ar_step.b1", "regen.prefill.b4", "regen.loop.b4", "train.1x4x1.g2"]
  want += [f"{k}.{m}.b1" for k in ("round", "loop") for m in ("ar", "ngram", "chain", "glance63")]
  assert sorted(want) == sorted(rows), sorted(rows)
  for name, p in rows.items():
    assert p["argument_bytes"] > 0 and p["temp_bytes"] >= 0 and p["fits"], (name, p)
    assert p["flops"] > 0 and p["hbm_traffic"] > 0, (name, p)
  # the weights are split 4 ways on the tensor axis: every round holds less than the whole model
  assert rows["round.glance63.b1"]["vs_ar"]["flops"] > rows["round.chain.b1"]["vs_ar"]["flops"] > 1.0
  assert "| round.ar.b1 |" in (tmp_path / "report.md").read_text()
  # the decode loops' attention is the Pallas kernel (head_dim 128 here, as at 8B), one call a layer;
  # the prompt's prefill keeps the dense path
  def kernel_calls(name):
    text = (tmp_path / "hlo" / f"{name}.txt").read_text()
    return [line for line in text.splitlines() if "tpu_custom_call" in line and "cache_attention/pallas_call" in line]

  for name in ("loop.ar.b1", "loop.glance63.b1", "round.glance63.b1"):
    assert len(kernel_calls(name)) >= 4, (name, len(kernel_calls(name)))
  assert not kernel_calls("prefill.b1")


@needs_libtpu
def test_the_rivals_rounds_compile_for_v5e(tmp_path):
  """The rivals' rounds compile for TPU beside AR's (tiny shapes; the 8B figures: docs/tpu.md): EAGLE-3's (8 sequential draft passes, the
  dynamic tree, the same verify; eagle3-chain is the same program at K = 1, `--methods eagle3chain`)
  and two-model's (the draft's 4 passes over its own cache, then the target's verify): each reads
  more than AR's round."""
  r = _run("--topology", "v5e:2x2", "--mesh", "1,1,4", "--programs", "round", "--methods", "ar,eagle3,twomodel",
           out=tmp_path)
  assert r.returncode == 0, r.stderr[-3000:]
  rows = {p["name"]: p for p in json.loads((tmp_path / "report.json").read_text())["programs"]}
  assert sorted(rows) == ["round.ar.b1", "round.eagle3.b1", "round.twomodel.b1"], sorted(rows)
  ar = rows["round.ar.b1"]["hbm_traffic"]
  for name in ("round.eagle3.b1", "round.twomodel.b1"):
    assert "error" not in rows[name] and rows[name]["fits"] and rows[name]["hbm_traffic"] > ar, rows[name]
  # the draft (the tiny target at half its depth here) is read once a pass, 4 passes a round: more
  # than half of AR's round again (at 8B, Qwen3-VL-4B: 3.23x AR, docs/tpu.md)
  assert rows["round.twomodel.b1"]["hbm_traffic"] > 1.5 * ar, (rows["round.twomodel.b1"]["hbm_traffic"], ar)


@needs_libtpu
def test_the_draft_vocabulary_round_reads_less(tmp_path):
  """glance63v (the head drafting over K = 64 of the tiny target's 512 tokens, gathered rows as a
  parameter) compiles for TPU and fits, and moves no more per round than glance63 but its [K, D]
  rows: at these sizes the compiler reads the 16 KB lm_head shard once for the verify and the head
  alike, so the saving shows only at 8B (K = 32000 of 151936: docs/tpu.md)."""
  r = _run("--topology", "v5e:2x2", "--mesh", "1,1,4", "--programs", "round", "--methods",
           "glance63,glance63v,glance63c,glance63p,glance63pv,glance63pa", "--draft-vocab", "64", out=tmp_path)
  assert r.returncode == 0, r.stderr[-3000:]
  rows = {p["name"]: p for p in json.loads((tmp_path / "report.json").read_text())["programs"]}
  assert "error" not in rows["round.glance63v.b1"] and rows["round.glance63v.b1"]["fits"], rows["round.glance63v.b1"]
  # calibrated node scores (glance63c): the beam builder over every (slot, rank) pair, still one round
  c = rows["round.glance63c.b1"]
  assert "error" not in c and c["fits"] and c["hbm_traffic"] > 0, c
  # the parent correction's trees (glance63p, over the draft vocabulary glance63pv, reading the path
  # glance63pa) compile and fit
  for name in ("round.glance63p.b1", "round.glance63pv.b1", "round.glance63pa.b1"):
    assert "error" not in rows[name] and rows[name]["fits"] and rows[name]["hbm_traffic"] > 0, rows[name]
  extra = 64 * 64 * 2 // 4 + 64 * 4          # the rows' shard (bf16, vocab on 4 devices) and the ids
  assert rows["round.glance63v.b1"]["hbm_traffic"] <= rows["round.glance63.b1"]["hbm_traffic"] + extra + 512


@needs_libtpu
def test_bad_topology_and_mesh_are_one_line(tmp_path):
  r = _run("--topology", "v5e-bogus", "--programs", "prefill", out=tmp_path)
  assert r.returncode == 2
  line = [x for x in r.stderr.splitlines() if x.startswith("error:")]
  assert len(line) == 1 and "unknown TPU topology 'v5e-bogus'" in line[0] and "v5p:2x2x1" in line[0], r.stderr
  r = _run("--topology", "v5e:2x2", "--mesh", "1,1,8", "--programs", "prefill", out=tmp_path)
  line = [x for x in r.stderr.splitlines() if x.startswith("error:")]
  assert r.returncode == 2 and len(line) == 1 and "--mesh 1,1,8" in line[0] and "4 devices" in line[0], r.stderr


HLO = """\
%fused_computation.1 (param_0.1: bf16[64,4096], param_1.1: bf16[1,4096]) -> bf16[1,64] {
  %param_0.1 = bf16[64,4096]{1,0:T(8,128)(2,1)S(1)} parameter(0)
  %param_1.1 = bf16[1,4096]{1,0:T(8,128)(2,1)} parameter(1)
  ROOT %dot.1 = bf16[1,64]{1,0} dot(%param_1.1, %param_0.1), lhs_contracting_dims={1}, rhs_contracting_dims={1}
}

ENTRY %main (param.1: bf16[256,4096], param.2: bf16[1,4096]) -> bf16[1,64] {
  %param.1 = bf16[256,4096]{1,0:T(8,128)(2,1)} parameter(0)
  %param.2 = bf16[1,4096]{1,0:T(8,128)(2,1)} parameter(1)
  %slice-start = ((bf16[256,4096]{1,0:T(8,128)(2,1)}), bf16[64,4096]{1,0:T(8,128)(2,1)S(1)}, s32[]{:S(2)}) slice-start(%param.1), slice={[0:64], [0:4096]}
  %slice-done = bf16[64,4096]{1,0:T(8,128)(2,1)S(1)} slice-done(%slice-start)
  ROOT %fusion = bf16[1,64]{1,0:T(8,128)(2,1)} fusion(%slice-done, %param.2), kind=kOutput, calls=%fused_computation.1
}
"""


def test_hbm_traffic_counts_a_vmem_prefetch_once():
  from glance_jax.aot import hlo
  t = hlo.Module(HLO, {"weights": {(256, 4096)}}).traffic()
  # the [64, 4096] slice is read from HBM once (into VMEM, S(1)); the fusion reads that VMEM copy
  # (not counted) plus the [1, 4096] HBM activation, and writes [1, 64] to HBM
  assert t.read == 64 * 4096 * 2 + 4096 * 2
  assert t.write == 64 * 2
  # the slice is attributed to the weight it slices (its source operand's shape), not to its own shape
  assert t.by_class["weights.read"] == 64 * 4096 * 2
  assert t.by_class["other.read"] == 4096 * 2


LOOPS = """\
%body (p.0: (s32[], bf16[64,128])) -> (s32[], bf16[64,128]) {
  %p.0 = (s32[], bf16[64,128]{1,0}) parameter(0)
  %i.0 = s32[] get-tuple-element(%p.0), index=0
  %w.0 = bf16[64,128]{1,0} get-tuple-element(%p.0), index=1
  %neg.0 = bf16[64,128]{1,0} negate(%w.0)
  ROOT %t.0 = (s32[], bf16[64,128]{1,0}) tuple(%i.0, %neg.0)
}

%counted (p.1: (s32[], bf16[64,128])) -> pred[] {
  %c.1 = s32[] constant(7)
  %p.1 = (s32[], bf16[64,128]{1,0}) parameter(0)
  %i.1 = s32[] get-tuple-element(%p.1), index=0
  ROOT %lt.1 = pred[] compare(%i.1, %c.1), direction=LT
}

%until (p.2: (s32[], bf16[64,128])) -> pred[] {
  %c.2 = s32[] constant(7)
  %p.2 = (s32[], bf16[64,128]{1,0}) parameter(0)
  %i.2 = s32[] get-tuple-element(%p.2), index=0
  %lt.2 = pred[] compare(%i.2, %c.2), direction=LT
  %w.2 = bf16[64,128]{1,0} get-tuple-element(%p.2), index=1
  ROOT %and.2 = pred[] and(%lt.2, %lt.2)
}

ENTRY %main (a: (s32[], bf16[64,128])) -> (s32[], bf16[64,128]) {
  %a = (s32[], bf16[64,128]{1,0}) parameter(0)
  %scan = (s32[], bf16[64,128]{1,0}) while(%a), condition=%counted, body=%body
  ROOT %loop = (s32[], bf16[64,128]{1,0}) while(%scan), condition=%until, body=%body
}
"""


def test_a_scan_whose_trip_count_the_compiler_dropped_is_counted_by_its_bound():
  """A while without known_trip_count whose condition is `counter < 7` alone (a lax.scan: the TPU
  compiler drops the count from scans it sinks code into) runs its body 7 times; a loop with more in
  its condition (the decode while_loop) is counted once."""
  from glance_jax.aot import hlo
  t = hlo.Module(LOOPS, {}).traffic()
  one = 64 * 128 * 2
  assert t.by_op["negate"] == (7 + 1) * 2 * one        # read and written per iteration


def test_out_of_memory_messages_become_figures():
  from glance_jax.aot.report import _oom
  temps = _oom("RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO temporaries "
               "(58.75G) exceeds available HBM (15.75G).")
  assert temps == dict(temp_needed_bytes=58.75 * 2**30, hbm_bytes=15.75 * 2**30)
  assert _oom("Used 2.73T of 95.74G hbm")["used_bytes"] == 2.73 * 2**40
  assert _oom("some other compiler error") == {}


def test_a_loops_ratio_is_per_iteration():
  """loop.<m> against loop.ar per iteration (the while body), the whole programs' ratio beside it;
  rounds against round.ar as before."""
  from glance_jax.aot.report import add_ratios
  rows = [dict(name="loop.ar.b1", hbm_traffic=4.0, round_hbm_traffic=3.9, flops=1.0, bytes_accessed_raw=1.0),
          dict(name="loop.glance63.b1", hbm_traffic=5.5, round_hbm_traffic=5.07, flops=2.0, bytes_accessed_raw=1.0),
          dict(name="round.ar.b1", hbm_traffic=3.9, flops=1.0, bytes_accessed_raw=1.0),
          dict(name="round.glance63.b1", hbm_traffic=4.9, flops=3.0, bytes_accessed_raw=2.0)]
  add_ratios(rows)
  by = {r["name"]: r["vs_ar"] for r in rows}
  assert by["loop.glance63.b1"]["hbm"] == pytest.approx(1.3) and by["loop.glance63.b1"]["hbm_whole"] == pytest.approx(1.375)
  assert by["round.glance63.b1"]["hbm"] == pytest.approx(4.9 / 3.9) and by["round.glance63.b1"]["flops"] == 3.0


DUS = """\
ENTRY %main (a: bf16[1,2048,2,128], u: bf16[1,16,2,128], s: s32[]) -> bf16[1,2048,2,128] {
  %a = bf16[1,2048,2,128]{3,1,2,0} parameter(0)
  %u = bf16[1,16,2,128]{3,1,2,0} parameter(1)
  %s = s32[] parameter(2)
  %z = s32[] constant(0)
  ROOT %d = bf16[1,2048,2,128]{3,1,2,0} dynamic-update-slice(%a, %u, %z, %s, %z, %z)
}
"""


def test_a_dynamic_update_slice_is_counted_in_place():
  """A bare dynamic-update-slice (write_rows at batch 1: a cache row written in the loop) reads
  and writes its update, not the whole buffer it updates in place."""
  from glance_jax.aot import hlo
  t = hlo.Module(DUS, {"kv": {(1, 2048, 2, 128)}}).traffic()
  upd = 16 * 2 * 128 * 2
  assert t.write == upd and t.read == upd + 4 * 4        # and its four s32 indices
