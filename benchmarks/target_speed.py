"""Jitted greedy AR decoding of the target vs transformers' `generate()`, both timed in one run.

    python -m benchmarks.target_speed --sizes tiny,small,medium \
        --repeats 5 --json /tmp/target_speed.json

Per size: one random fp32 HF `Qwen3VLForConditionalGeneration` (every parameter redrawn, as in the
parity oracle) and the very same weights in ours; one prompt (a 224x224 random image through
transformers' `Qwen2VLImageProcessorPil` with the real Qwen3-VL preprocessor settings,
min_pixels=65536, so 224 -> 256x256 -> 64 image tokens, plus ~40 text tokens); 64 greedy new
tokens with no stop token.

Decode ms/token = the cost of one more decode forward, (T(64 new tokens) - T(1 new token)) / 63:
HF: T = wall time of `generate(max_new_tokens=n, min_new_tokens=n, do_sample=False)` (prefill
included; it cancels in the difference). Ours: T = wall time of the jitted
`engine.greedy_decode(max_new_tokens=n)` (the whole loop in one lax.while_loop) after a separately
timed `engine.prefill`. Repeats of ours and theirs are interleaved (order alternating) so the
noise on this shared machine hits both alike; medians of the repeats are reported. Prefill is
reported separately (HF's is T(1), i.e. prefill + one sample + generate()'s overhead). A call
shorter than MIN_SAMPLE_S (both sides, same rule) is repeated back to back and its median is the
sample, so that the tiny size is not pure timer noise.

Read the figures from a run on a quiet machine: "others' cores" is how many cores other
processes kept busy meanwhile (machine busy time from /proc/stat minus ours). When others load
the 2 cores, HF's generate() slows down far more than ours (seen: medium 55 -> 390 ms/token
against ours 23 -> 55), so a loaded run flatters the ratio.

The memory-bandwidth floor is (bytes of weights read per decode token) / bandwidth: the text
decoder layers + final norm + lm_head (+ one embedding row), not the vision tower and not the
embedding table. Bandwidth is probed after every repeat (a jitted XLA matrix-vector product with a
256 MiB (out, in) matrix, best of 3) so that it sees the same machine load as the decode timings;
the floor uses the median probe, and the best probe is printed too. torch runs with as many
intra-op threads as there are cores (XLA's CPU client uses all cores by default), so both sides
get the whole machine.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
import types

# XLA CPU flags would have to be set here, before jax is imported; none helped (see the report), so
# XLA runs with its defaults unless XLA_FLAGS is set in the environment.

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from glance_jax.config import tiny_config  # noqa: E402
from glance_jax.qwen3_vl import engine, weights  # noqa: E402
from glance_jax.qwen3_vl.positions import get_rope_index  # noqa: E402
from glance_jax.qwen3_vl.target import Target  # noqa: E402
from tests import oracle  # noqa: E402

NEW_TOKENS = 64
MIN_SAMPLE_S = 0.25   # calls shorter than this are repeated back to back within one sample
MAX_INNER = 9

# text: hidden / layers / heads / kv heads / head_dim / intermediate / vocab; vision: depth / hidden
SIZES = {
    "tiny": dict(text=(64, 2, 4, 2, 16, 192, 1024), vision=(2, 32)),
    "small": dict(text=(256, 4, 4, 2, 64, 768, 32000), vision=(2, 64)),
    "medium": dict(text=(1024, 12, 16, 8, 64, 3072, 32000), vision=(4, 128)),
}


def make_config(name: str):
  hidden, layers, heads, kv, hd, inter, vocab = SIZES[name]["text"]
  vdepth, vhidden = SIZES[name]["vision"]
  return tiny_config(vocab_size=vocab, hidden=hidden, layers=layers, heads=heads, kv_heads=kv,
                     head_dim=hd, intermediate=inter, vision_depth=vdepth, vision_hidden=vhidden,
                     vision_heads=max(1, vhidden // 16), vision_intermediate=4 * vhidden,
                     num_position_embeddings=256, deepstack=tuple(range(max(0, vdepth - 3), vdepth)))


def image_processor():
  """The real Qwen3-VL preprocessor_config.json settings (min_pixels = 65536)."""
  from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
  return Qwen2VLImageProcessorPil(patch_size=16, temporal_patch_size=2, merge_size=2,
                                  image_mean=[0.5] * 3, image_std=[0.5] * 3,
                                  size={"shortest_edge": 65536, "longest_edge": 16777216})


def make_prompt(cfg, seed: int = 0):
  rng = np.random.default_rng(seed)
  img = rng.integers(0, 256, (224, 224, 3), dtype=np.uint8)
  px = image_processor()(images=[img], return_tensors="np")
  grid = np.asarray(px["image_grid_thw"])
  n_img = int(grid.prod() // cfg.vision.spatial_merge_size**2)
  text = lambda n: rng.integers(0, cfg.text.vocab_size - 16, n).tolist()  # noqa: E731
  vision = [cfg.vision_start_token_id] + [cfg.image_token_id] * n_img + [cfg.vision_end_token_id]
  ids = text(6) + vision + text(34)
  ids = np.asarray([ids], np.int64)
  pos, delta = get_rope_index(ids, None, grid, None, image_token_id=cfg.image_token_id,
                              video_token_id=cfg.video_token_id)
  ours = types.SimpleNamespace(input_ids=ids, attention_mask=np.ones_like(ids, bool), positions=pos,
                               rope_delta=delta, pixel_values=np.asarray(px["pixel_values"], np.float32),
                               image_grid_thw=grid)
  tids = torch.from_numpy(ids)
  hf = dict(input_ids=tids, attention_mask=torch.ones_like(tids),
            mm_token_type_ids=(tids == cfg.image_token_id).long(),
            pixel_values=torch.from_numpy(ours.pixel_values), image_grid_thw=torch.from_numpy(grid))
  return ours, hf, n_img


# --- the two generators ------------------------------------------------------------------------

def run_ours(target: Target, inputs, n: int):
  """-> (prefill s, decode s, tokens [n]); blocks on each phase."""
  cache = target.init_cache(1, inputs.input_ids.shape[1] + NEW_TOKENS + 1)
  jax.block_until_ready(cache)
  t0 = time.perf_counter()
  out = target.prefill(inputs, cache, logits_at="last")
  jax.block_until_ready(out)
  t1 = time.perf_counter()
  toks, _, cache = engine.greedy_decode(target.graphdef, target.params, out.cache, out.logits[:, 0],
                                        jnp.asarray(inputs.rope_delta, jnp.int32),
                                        jnp.asarray([-2], jnp.int32), max_new_tokens=n)
  toks = np.asarray(toks)  # blocks
  t2 = time.perf_counter()
  return t1 - t0, t2 - t1, toks[0]


def run_hf(model, hf_inputs, n: int):
  """-> (total s, tokens [n])."""
  with torch.inference_mode():
    t0 = time.perf_counter()
    out = model.generate(**hf_inputs, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                         eos_token_id=None, pad_token_id=0)
    t1 = time.perf_counter()
  return t1 - t0, out[0, hf_inputs["input_ids"].shape[1]:].numpy()


# --- bandwidth -----------------------------------------------------------------------------------

def _best(fn, reps: int) -> float:
  best = float("inf")
  for _ in range(reps):
    t0 = time.perf_counter()
    jax.block_until_ready(fn())
    best = min(best, time.perf_counter() - t0)
  return best


class Bandwidth:
  """Memory read bandwidth probes (GB/s = 1e9 bytes/s), all far larger than the 32 MiB L3.

  `matvec`: a jitted XLA matrix-vector product with a 256 MiB (out, in) matrix used as x @ W.T
  (the decode layout and kernel); `sum`: a jitted XLA reduction over the same 256 MiB;
  `numpy_copy`: bytes read + written by np.copyto of 256 MiB (reference only).
  """

  def __init__(self):
    self.w = jax.random.normal(jax.random.key(0), (8192, 8192), jnp.float32)
    self.x = jnp.ones((1, 8192), jnp.float32)
    self._mv = jax.jit(lambda x, w: jax.lax.dot_general(x, w, (((1,), (1,)), ((), ()))))
    self._sum = jax.jit(jnp.sum)
    jax.block_until_ready((self._mv(self.x, self.w), self._sum(self.w)))
    self.samples: list[float] = []      # matvec GB/s, one per probe() call

  def probe(self, reps: int = 3) -> float:
    gbs = self.w.nbytes / _best(lambda: self._mv(self.x, self.w), reps) / 1e9
    self.samples.append(gbs)
    return gbs

  def report(self, reps: int = 10) -> dict[str, float]:
    res = dict(xla_matvec=self.w.nbytes / _best(lambda: self._mv(self.x, self.w), reps) / 1e9,
               xla_sum=self.w.nbytes / _best(lambda: self._sum(self.w), reps) / 1e9)
    a = np.ones(64 * 2**20, np.float32)
    b = np.empty_like(a)
    best = float("inf")
    for _ in range(reps):
      t0 = time.perf_counter()
      np.copyto(b, a)
      best = min(best, time.perf_counter() - t0)
    res["numpy_copy_rw"] = 2 * a.nbytes / best / 1e9
    return res


def decode_weight_bytes(target: Target) -> int:
  """Bytes of parameters one decode step reads: decoder layers, final norm, lm_head, one embedding row."""
  total = 0
  for path, var in jax.tree_util.tree_flatten_with_path(target.params)[0]:
    key = ".".join(str(getattr(p, "key", getattr(p, "idx", p))) for p in path)
    if key.startswith("model.language_model.layers.") or key.startswith("model.language_model.norm."):
      total += var.nbytes
    elif key.startswith("lm_head."):
      total += var.nbytes
  cfg = target.config
  if cfg.tie_word_embeddings:
    total += cfg.text.vocab_size * cfg.text.hidden_size * np.dtype(target.dtype).itemsize
  total += cfg.text.hidden_size * np.dtype(target.dtype).itemsize   # the embedding row
  return total


# --- machine load by others ---------------------------------------------------------------------

class OthersLoad:
  """Average number of cores that OTHER processes kept busy while this ran: busy time of the whole
  machine (/proc/stat) minus this process's CPU time, per wall second (0 on a quiet machine)."""

  def __init__(self):
    self.start = self._sample()

  @staticmethod
  def _sample():
    try:
      with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
      busy = (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")   # minus idle and iowait
    except (OSError, ValueError, IndexError):
      busy = float("nan")
    t = os.times()
    return time.perf_counter(), busy, t.user + t.system

  def cores(self) -> float:
    w1, b1, m1 = self.start
    w2, b2, m2 = self._sample()
    return max(0.0, ((b2 - b1) - (m2 - m1)) / max(w2 - w1, 1e-9))


# --- one size ------------------------------------------------------------------------------------

def bench_size(name: str, repeats: int, bw: Bandwidth, log=print) -> dict:
  cfg = make_config(name)
  hf = oracle.hf_model(cfg, seed=0)
  graphdef, params = weights.from_state_dict(cfg, oracle.state_dict_np(hf))
  target = Target(cfg, graphdef, params)
  n_params = sum(p.numel() for p in hf.parameters())
  ours_in, hf_in, n_img = make_prompt(cfg)
  others = OthersLoad()
  log(f"[{name}] {n_params / 1e6:.1f}M parameters; prompt {ours_in.input_ids.shape[1]} tokens "
      f"({n_img} image tokens, {ours_in.input_ids.shape[1] - n_img} text), {NEW_TOKENS} new tokens")

  # warm-up / compile both lengths on both sides; the warm-up times set how many back-to-back calls
  # make one sample (the same rule for both sides: calls shorter than MIN_SAMPLE_S are repeated and
  # their median taken, so that tiny sizes are not pure timer noise)
  t0 = time.perf_counter()
  run_ours(target, ours_in, 1)
  log(f"[{name}] ours compiled in {time.perf_counter() - t0:.1f}s")
  warm = {}
  for n in (1, NEW_TOKENS):
    for _ in range(2):
      pre, dec, _ = run_ours(target, ours_in, n)
      warm[("ours", n)] = pre + dec
    for _ in range(2):
      warm[("hf", n)] = run_hf(hf, hf_in, n)[0]
  inner = {k: int(min(MAX_INNER, max(1, math.ceil(MIN_SAMPLE_S / max(v, 1e-6))))) for k, v in warm.items()}

  ours_toks = hf_toks = None
  t = {k: [] for k in ("ours_pre", "ours_dec_1", "ours_dec_64", "hf_1", "hf_64")}
  bw_samples = []
  for r in range(repeats):
    jobs = [("ours", NEW_TOKENS), ("hf", NEW_TOKENS), ("ours", 1), ("hf", 1)]
    if r % 2:
      jobs = [jobs[1], jobs[0], jobs[3], jobs[2]]
    for who, n in jobs:
      if who == "ours":
        runs = [run_ours(target, ours_in, n) for _ in range(inner[(who, n)])]
        t[f"ours_dec_{n}"].append(statistics.median(x[1] for x in runs))
        t["ours_pre"].append(statistics.median(x[0] for x in runs))
        if n == NEW_TOKENS:
          ours_toks = runs[-1][2]
      else:
        runs = [run_hf(hf, hf_in, n) for _ in range(inner[(who, n)])]
        t[f"hf_{n}"].append(statistics.median(x[0] for x in runs))
        if n == NEW_TOKENS:
          hf_toks = runs[-1][1]
    bw_samples.append(bw.probe())
    log(f"[{name}] repeat {r + 1}/{repeats}: ours decode {t['ours_dec_64'][-1]:.3f}s / {t['ours_dec_1'][-1]:.3f}s, "
        f"hf generate {t['hf_64'][-1]:.3f}s / {t['hf_1'][-1]:.3f}s (64 / 1 new tokens); "
        f"matvec bandwidth {bw_samples[-1]:.1f} GB/s")

  others_cores = others.cores()
  med = {k: statistics.median(v) for k, v in t.items()}
  ours_ms = 1e3 * (med["ours_dec_64"] - med["ours_dec_1"]) / (NEW_TOKENS - 1)
  hf_ms = 1e3 * (med["hf_64"] - med["hf_1"]) / (NEW_TOKENS - 1)
  bandwidth = statistics.median(bw_samples)
  wbytes = decode_weight_bytes(target)
  floor_ms = 1e3 * wbytes / (bandwidth * 1e9)
  floor_best_ms = 1e3 * wbytes / (max(bw_samples) * 1e9)
  same = ours_toks is not None and hf_toks is not None and np.array_equal(ours_toks, hf_toks)
  res = dict(size=name, params_m=n_params / 1e6, prompt_tokens=int(ours_in.input_ids.shape[1]),
             ours_ms_per_token=ours_ms, hf_ms_per_token=hf_ms, ratio=ours_ms / hf_ms,
             ours_prefill_ms=1e3 * med["ours_pre"], hf_prefill_ms=1e3 * med["hf_1"],
             ours_total_ms=1e3 * (med["ours_pre"] + med["ours_dec_64"]), hf_total_ms=1e3 * med["hf_64"],
             weight_mb_per_token=wbytes / 1e6, bandwidth_gbs=bandwidth, bandwidth_best_gbs=max(bw_samples),
             floor_ms=floor_ms, floor_best_ms=floor_best_ms, ours_over_floor=ours_ms / floor_ms,
             tokens_identical=bool(same), others_cores=others_cores,
             first_mismatch=None if same else int(np.argmax(ours_toks != hf_toks)),
             samples={k: v for k, v in t.items()}, calls_per_sample={f'{a}_{b}': c for (a, b), c in inner.items()},
             bandwidth_samples=bw_samples)
  log(f"[{name}] ours {ours_ms:.2f} ms/token, hf {hf_ms:.2f} ms/token, ratio {ours_ms / hf_ms:.2f}; "
      f"floor {floor_ms:.2f} ms ({wbytes / 1e6:.1f} MB at {bandwidth:.1f} GB/s, median of {len(bw_samples)} "
      f"interleaved probes; {floor_best_ms:.2f} ms at the best probe {max(bw_samples):.1f} GB/s); "
      f"ours/floor {ours_ms / floor_ms:.2f}; tokens identical: {same}; other processes kept "
      f"{others_cores:.2f} of {os.cpu_count()} cores busy meanwhile")
  del hf, target, params
  return res


def _g(x: float) -> str:
  """3 significant digits, no exponent."""
  return f"{x:.{max(0, 2 - math.floor(math.log10(abs(x))))}f}" if x else "0"


def table(results: list[dict]) -> str:
  head = ("| size | params | ours ms/tok | HF ms/tok | ours/HF | ours prefill ms | HF prefill ms "
          "| weights MB/tok | bandwidth GB/s | floor ms/tok | ours/floor | tokens identical | others' cores |")
  rows = [head, "|" + "---|" * 13]
  for r in results:
    rows.append(f"| {r['size']} | {r['params_m']:.1f}M | {_g(r['ours_ms_per_token'])} | {_g(r['hf_ms_per_token'])} "
                f"| {_g(r['ratio'])} | {_g(r['ours_prefill_ms'])} | {_g(r['hf_prefill_ms'])} "
                f"| {r['weight_mb_per_token']:.1f} | {r['bandwidth_gbs']:.1f} | {_g(r['floor_ms'])} "
                f"| {_g(r['ours_over_floor'])} | {'yes' if r['tokens_identical'] else 'NO'} "
                f"| {r['others_cores']:.2f} |")
  return "\n".join(rows)


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--sizes", default="tiny,small,medium")
  ap.add_argument("--repeats", type=int, default=5)
  ap.add_argument("--json", default=None, help="write the results here")
  ap.add_argument("--torch-threads", type=int, default=None,
                  help="torch intra-op threads (default: the number of cores, as XLA uses)")
  args = ap.parse_args(argv)
  sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
  for s in sizes:
    if s not in SIZES:
      ap.error(f"unknown size {s!r}; choose from {', '.join(SIZES)}")

  cores = os.cpu_count() or 1
  torch.set_num_threads(args.torch_threads or cores)
  print(f"{cores} CPU cores; torch intra-op threads = {torch.get_num_threads()}; "
        f"jax {jax.__version__} on {jax.devices()[0].platform}; XLA_FLAGS={os.environ.get('XLA_FLAGS')!r}")
  bw = Bandwidth()
  bw_start = bw.report()
  print("bandwidth GB/s (best of 10): " + ", ".join(f"{k} {v:.1f}" for k, v in bw_start.items()))
  results = []
  for s in sizes:
    results.append(bench_size(s, args.repeats, bw))
    sys.stdout.flush()
  bw_end = bw.report()
  print("bandwidth GB/s at the end (best of 10): " + ", ".join(f"{k} {v:.1f}" for k, v in bw_end.items()))
  print()
  print(table(results))
  if args.json:
    with open(args.json, "w") as f:
      json.dump(dict(cores=cores, torch_threads=torch.get_num_threads(), bandwidth_start=bw_start,
                     bandwidth_end=bw_end, new_tokens=NEW_TOKENS, repeats=args.repeats, results=results),
                f, indent=2)
  return results


if __name__ == "__main__":
  main()
