"""Timing for `decode.py bench`: every method compiled first, then prompts timed in interleaved order.

Compilation. generate() traces one loop per (method, budget, max_new_tokens) and input shapes, and a
new prompt length or image grid retraces. So (1) each prompt's token rows are right-padded (masked,
never attended; positions 0) to a multiple of `pad_multiple` tokens, which folds prompts of nearby
lengths onto one shape, and (2) before any timing, one warm-up generate() runs per method for every
distinct input shape (padded length, pixel rows, image grids) over all tasks. No compile then
happens inside a timed call.

Timing. For each prompt the methods run in a fresh seeded random order (`run_order`), so slow phases
of a shared machine hit all methods alike; each method runs once untimed and then its repeats back
to back, so a timed call finds its own program in the caches, as when one decodes with one method
(`time_task(hot=True)`; `--cold` interleaves every call instead). Batch 1. The time is
time.perf_counter() around generate(), which returns host numpy arrays, so it covers prefill, the
whole decode loop and the copies back. Inside it the loop alone is timed too (the prefill waited
for first, which loses only the overlap of its tail with the loop's dispatch): where the prefill is
a large share of a short answer (a compute-bound prefill beside a memory-bound step, the CPU memory
regime), the decode-only speedup says what the same rounds give on a longer answer.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Any, Sequence

import numpy as np

from glance_jax.bench.tasks import BenchTask, problem

PAD_MULTIPLE = 32


@dataclasses.dataclass(frozen=True)
class Method:
  """A benchmarked configuration: `glance-63` is method glance at budget N = 63; `glance-auto` is
  glance with the verify width chosen per round among decode.policies.auto_widths(budget)."""
  label: str
  method: str
  budget: int
  auto: bool = False
  ablate: str | None = None   # a head variant: an ablation of head.ABLATIONS, `glance-63[zero-context]`,
                              # a draft vocabulary of K tokens, `glance-63[vocab-K]` (head/draft_vocab.py),
                              # calibrated node scores, `glance-63[calibrated]` (head/tree_calibration.py),
                              # or a parent correction's tree, `glance-63[parent]` (head/parent_correction.py)


# The methods the bench runs with the block head it loads, and the rivals with drafters of their own
# (Drafts: --eagle3-head for eagle3 / eagle3-chain, --draft for two-model); a rival's N is its preset's.
BENCH_METHODS = ("ar", "ngram", "chain", "glance")
RIVALS = ("eagle3", "eagle3-chain", "two-model")


def method_choices() -> str:
  return ", ".join([*BENCH_METHODS, "glance-N", "glance-auto", *RIVALS, "HEAD_METHOD[ABLATION]"])


def rival_budget(name: str) -> int:
  """The nodes a rival's round verifies (its preset's; the bench reports it as the method's N)."""
  from glance_jax.decode.drafters import eagle3, two_model
  return eagle3.PRESETS[name][2] - 1 if name in eagle3.PRESETS else two_model.PRESETS[name]


@dataclasses.dataclass(frozen=True, eq=False)
class Drafts:
  """What each method drafts with: the block head (chain, glance), an EAGLE-3 head (eagle3,
  eagle3-chain: eagle3.Eagle3Checkpoint), a draft model (two-model: a smaller qwen3_vl.Target)."""
  block: Any = None
  eagle3: Any = None
  draft: Any = None

  def for_method(self, m: "Method", target=None):
    if m.method in ("chain", "glance"):
      return self.block if m.ablate is None or self.block is None else _ablated_head(self.block, m.ablate, target)
    if m.method.startswith("eagle3"):
      return self.eagle3
    return self.draft if m.method == "two-model" else None

  def missing(self, methods) -> list[str]:
    """The flags the rivals in `methods` need and were not given."""
    need = {"eagle3": ("--eagle3-head", self.eagle3), "eagle3-chain": ("--eagle3-head", self.eagle3),
            "two-model": ("--draft", self.draft)}
    return sorted({need[m.method][0] for m in methods if m.method in need and need[m.method][1] is None})


CALIBRATED = "calibrated"    # the head variant ranking its trees by tree_calibration.json
PARENT = "parent"            # the head variant expanding each node's own children (parent_correction.json)


def draft_vocab_size(kind: str | None) -> int | None:
  """K of a `vocab-K` head variant, else None."""
  m = re.fullmatch(r"vocab-(\d+)", kind or "")
  return int(m[1]) if m else None


def ablated(m: Method, kind: str) -> Method:
  """`m` as a head variant: label `glance-63[zero-context]` (an ablation of head.ABLATIONS) or
  `glance-63[vocab-K]` (a draft vocabulary of K tokens); only head methods (chain, glance-*)."""
  from glance_jax.head import ABLATIONS
  if kind not in ABLATIONS and not draft_vocab_size(kind) and kind not in (CALIBRATED, PARENT):
    raise ValueError(f"unknown head variant {kind!r}; valid: {', '.join(ABLATIONS)}, vocab-K (K >= 1), "
                     f"{CALIBRATED}, {PARENT}")
  if m.method not in ("chain", "glance"):
    raise ValueError(f"ablation [{kind}] needs a head method (chain, glance-N, glance-auto), got {m.label!r}")
  if kind in (CALIBRATED, PARENT) and m.method == "chain":
    raise ValueError(f"[{kind}] changes how a tree is built; a chain has none (use glance-N[{kind}])")
  return dataclasses.replace(m, label=f"{m.label}[{kind}]", ablate=kind)


AUTO = Method("glance-auto", "glance", 63, auto=True)


def parse_methods(text: str, budgets: Sequence[int | str], depth: int = 15) -> list[Method]:
  """"ar,ngram,chain,glance" -> Methods; `glance` expands to glance-N per budget, `glance-N` names
  one budget. ar (the speedup base) is always first. chain and ngram are depth-capped chains: budget
  = depth (L = block_size - 1). A head method with an ablation suffix, `glance-63[zero-context]`,
  `chain[zero-context]` (`glance[zero-context]`: every budget), runs that method with the head
  ablated (Head.ablated). Raises ValueError naming the unknown method and the valid choices."""
  out: list[Method] = [Method("ar", "ar", 1)]
  for name in (s.strip() for s in text.split(",")):
    if not name:
      continue
    kind = None
    if m := re.fullmatch(r"(.+)\[([a-z0-9-]+)\]", name):
      name, kind = m[1], m[2]
    if name == "glance":
      new = [AUTO if n == "auto" else Method(f"glance-{n}", "glance", int(n)) for n in budgets]
    elif name == "glance-auto":
      new = [AUTO]
    elif (m := re.fullmatch(r"glance-(\d+)", name)) and int(m[1]) >= 1:
      new = [Method(name, "glance", int(m[1]))]
    elif name in ("chain", "ngram"):
      new = [Method(name, name, depth)]
    elif name == "ar":
      new = []
    elif name in RIVALS:
      new = [Method(name, name, rival_budget(name))]
    else:
      raise ValueError(f"unknown method {name!r}; valid: {method_choices()}")
    if kind is not None:
      new = [ablated(m, kind) for m in new]
    out += [m for m in new if m not in out]
  return out


def pad_inputs(inputs: Any, multiple: int, pad_id: int) -> Any:
  """Right-pads the token rows (ids with pad_id, mask False, positions 0) to a multiple of
  `multiple` tokens; the decode loop reads each row's real length from the mask."""
  s = inputs.input_ids.shape[1]
  width = -(-s // multiple) * multiple - s if multiple > 1 else 0
  if width == 0:
    return inputs
  return dataclasses.replace(
      inputs, input_ids=np.pad(inputs.input_ids, ((0, 0), (0, width)), constant_values=pad_id),
      attention_mask=np.pad(inputs.attention_mask, ((0, 0), (0, width))),
      positions=np.pad(inputs.positions, ((0, 0), (0, 0), (0, width))))


def signature(inputs: Any) -> tuple:
  """What generate() traces on: padded length, pixel rows, image grids."""
  pv, grid = getattr(inputs, "pixel_values", None), getattr(inputs, "image_grid_thw", None)
  return (tuple(inputs.input_ids.shape), None if pv is None else tuple(pv.shape),
          None if grid is None else tuple(map(tuple, np.asarray(grid).tolist())))


@dataclasses.dataclass
class Prompt:
  task: str
  file: str
  id: str
  inputs: Any
  signature: tuple


@dataclasses.dataclass
class PromptRun:
  """One (prompt, method) over the repeats. Records and tokens from the first timed run; `stable`:
  every later repeat emitted the same tokens."""
  times: list[float]
  tokens: np.ndarray        # int [new tokens], stop token included
  accepted: np.ndarray      # int [rounds]: accepted draft tokens a per round
  root_entropy: np.ndarray  # float [rounds]: target entropy at each round's root (nats)
  stable: bool = True
  predicted: np.ndarray | None = None   # glance: float [rounds, P] raw E[A] of the top-w trees
  observed: np.ndarray | None = None    # glance: int [rounds, P] their accepted lengths (-1 = not verified)
  widths: np.ndarray | None = None      # int [rounds]: verify width of each round
  passes: int = 0                       # sequential draft forward passes a round (the drafter's)
  loop_times: list[float] = dataclasses.field(default_factory=list)  # the decode loop alone, per timed call


def prepare_prompts(processor: Any, tasks: list[BenchTask], pad_multiple: int = PAD_MULTIPLE
                    ) -> tuple[dict[str, list[Prompt]], list[dict[str, Any]]]:
  """Chat-rendered, image-processed, padded inputs per task; a prompt that fails is a problem."""
  from glance_jax.qwen3_vl.inputs import prepare_inputs
  out: dict[str, list[Prompt]] = {}
  problems = []
  for t in tasks:
    prompts = []
    for r in t.records:
      try:
        inputs = pad_inputs(prepare_inputs(processor, r.prompt, list(r.images) or None), pad_multiple,
                            processor.pad_token_id)
      except Exception as e:  # PIL / tokenizer / placeholder errors: skip the prompt, keep the task
        problems.append(problem(f"{t.file}: id {r.id!r}: cannot prepare inputs "
                                f"({type(e).__name__}: {e}); prompt skipped",
                                file=t.file, id=r.id, task=t.name))
        continue
      prompts.append(Prompt(t.name, t.file, r.id, inputs, signature(inputs)))
    out[t.name] = prompts
  return out, problems


@functools.lru_cache(maxsize=8)
def _ablated_head(head, kind: str, target):
  """One Head per (head, variant, target), so every call reuses one graphdef (one compile) and a
  draft vocabulary's rows are gathered once."""
  if kind == CALIBRATED:
    return head.with_calibrated_scores()
  if kind == PARENT:
    return head.with_parent_correction()
  k = draft_vocab_size(kind)
  return head.ablated(kind) if k is None else head.with_draft_vocab(target, k)


def _generate(target, head, prompt: Prompt, m: Method, kw: dict[str, Any], timings: dict | None = None):
  """One generate() of method m; head: a Drafts, or the block head alone. timings: receives "loop_s",
  the decode loop's time without the prefill (bench/engine.py)."""
  from glance_jax.bench.engine import generate
  kw = dict(kw, timings=timings)
  round_cost = kw.pop("round_cost", None)
  if m.auto:
    kw.update(auto=True, round_cost=round_cost)
  drafts = head if isinstance(head, Drafts) else Drafts(block=head)
  return generate(target, prompt.inputs, head=drafts.for_method(m, target), method=m.method, budget=m.budget, **kw)


MAP_COUNT_FILE, MAP_LIMIT_FILE = "/proc/self/maps", "/proc/sys/vm/max_map_count"


def map_headroom_warning(share: float = 0.75) -> str | None:
  """A warning when this process holds more than `share` of the kernel's memory-map limit, else None
  (also None where /proc is absent). XLA:CPU maps every compiled kernel into the process (~1000 maps
  for one decode loop at the testbed size) and the bench keeps every method x shape compiled, so a
  long method list or many prompt shapes can reach vm.max_map_count (65530 by default), where the
  next compile aborts the process instead of failing cleanly."""
  try:
    with open(MAP_COUNT_FILE) as f:
      used = sum(1 for _ in f)
    with open(MAP_LIMIT_FILE) as f:
      limit = int(f.read().split()[0])
  except (OSError, ValueError, IndexError):
    return None
  if used <= share * limit:
    return None
  return (f"this process holds {used} of vm.max_map_count = {limit} memory maps after compiling (XLA:CPU maps "
          "each compiled kernel); a further compile may abort the run: raise the limit (sysctl -w "
          "vm.max_map_count=262144) or bench fewer methods, budgets or prompt shapes (--pad-multiple)")


def warm_up(target, head, prompts: dict[str, list[Prompt]], methods: list[Method], kw: dict[str, Any],
            progress=None) -> list[dict[str, Any]]:
  """One generate() per method and distinct input shape (compiles everything before timing).
  A shape whose warm-up fails drops its prompts (in place) with one problem per prompt."""
  first: dict[tuple, Prompt] = {}
  for ps in prompts.values():
    for p in ps:
      first.setdefault(p.signature, p)
  bad: dict[tuple, str] = {}
  for sig, p in first.items():
    for m in methods:
      if progress is not None:
        progress.describe(f"compile {m.label}")
      try:
        _generate(target, head, p, m, kw)
      except Exception as e:  # a shape the target rejects (too long, bad grid): skip its prompts
        bad.setdefault(sig, f"{m.label}: {type(e).__name__}: {e}")
      if progress is not None:
        progress.update()
  problems = []
  for name, ps in prompts.items():
    keep = []
    for p in ps:
      if p.signature in bad:
        problems.append(problem(f"{p.file}: id {p.id!r}: generate failed ({bad[p.signature]}); "
                                "prompt skipped", file=p.file, id=p.id, task=name))
      else:
        keep.append(p)
    ps[:] = keep
  return problems


def num_signatures(prompts: dict[str, list[Prompt]]) -> int:
  return len({p.signature for ps in prompts.values() for p in ps})


def run_order(items: Sequence, k: int, seed: int = 0) -> list:
  """The order of interleaved run `k` (e.g. prompt i, repeat r: k = i * repeats + r): a fresh
  permutation per k, seeded, so a rerun times in the same order. Every item follows every other
  about equally often. A cyclic rotation (the order here until 2026-12-01) gives each item the same
  predecessor in every run, and the cache state a predecessor leaves (a wide tree's buffers, a
  larger program) was then a bias of up to ~2% on one method, not noise."""
  rng = np.random.default_rng((int(seed), int(k)))
  return [items[j] for j in rng.permutation(len(items))]


def time_task(target, head, prompts: list[Prompt], methods: list[Method], kw: dict[str, Any], *,
              repeats: int = 1, progress=None, hot: bool = True) -> dict[str, list[PromptRun]]:
  """label -> one PromptRun per prompt (same order as `prompts`), timed interleaved (module doc).

  hot (default): per prompt, the methods in a fresh seeded order, each as one untimed call and then
  its `repeats` timed calls back to back, so every timed call finds its own program and buffers in
  the caches, as a user decoding with one method does. cold: per prompt and repeat, every method
  once in a fresh order, so each call runs after another method's (what a predecessor leaves in the
  caches costs every method alike, ~3% of AR's time on the testbed)."""
  import time

  runs: dict[str, list[PromptRun]] = {m.label: [] for m in methods}
  for i, p in enumerate(prompts):
    if progress is not None:
      progress.describe(f"{p.task} {i + 1}/{len(prompts)}")
    cur: dict[str, PromptRun] = {}
    if hot:
      calls = []
      for m in run_order(methods, i):
        calls += [(m, False)] + [(m, True)] * repeats
    else:
      calls = [(m, True) for r in range(repeats) for m in run_order(methods, i * repeats + r)]
    for m, timed in calls:
      if not timed:
        _generate(target, head, p, m, kw)
        continue
      t0, tm = time.perf_counter(), {}
      res = _generate(target, head, p, m, kw, tm)
      dt = time.perf_counter() - t0
      tokens = np.asarray(res.tokens[0])
      if m.label not in cur:
        cur[m.label] = PromptRun([dt], tokens, np.asarray(res.accepted[0]), np.asarray(res.root_entropy[0]),
                                 predicted=res.predicted[0] if res.record_widths else None,
                                 observed=res.observed[0] if res.record_widths else None,
                                 widths=res.widths, passes=res.draft_passes_per_round,
                                 loop_times=[tm["loop_s"]])
      else:
        run = cur[m.label]
        run.times.append(dt)
        run.loop_times.append(tm["loop_s"])
        run.stable &= bool(np.array_equal(tokens, run.tokens))
      if progress is not None:
        progress.update()
    for m in methods:
      runs[m.label].append(cur[m.label])
  return runs
