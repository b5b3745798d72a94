"""Compile one program and read its figures: memory per device, flops, bytes, HBM traffic, collectives."""

from __future__ import annotations

import re
import time

import jax
from jax.sharding import NamedSharding

from glance_jax.aot import hlo
from glance_jax.aot.programs import Program

GB = 1e9


def shape_classes(program: Program) -> dict[str, set]:
  """Per-device (shard) shapes of the program's weights and caches, for the traffic breakdown."""
  out = {"weights": set(), "head_weights": set(), "kv": set(), "head_kv": set()}
  names = {1: "weights", 3: "head_weights"}   # args: (tgd, tparams, drafter, drafter params, policy, state, ...)

  def add(label, leaf):
    if isinstance(leaf, jax.ShapeDtypeStruct) and isinstance(leaf.sharding, NamedSharding) and leaf.ndim:
      out[label].add(tuple(leaf.sharding.shard_shape(leaf.shape)))

  for pos, label in names.items():
    if program.kind != "train" and len(program.args) > pos:
      jax.tree.map(lambda x, label=label: add(label, x), program.args[pos])
  if program.kind == "train":
    jax.tree.map(lambda x: add("weights", x), program.args[1])
  state = program.args[5] if program.kind in ("round", "loop") else None
  if state is not None:
    jax.tree.map(lambda x: add("kv", x), state.cache.k)
    jax.tree.map(lambda x: add("head_kv", x), tuple(getattr(state.drafter, "k", ())))  # a head's context cache
  elif program.kind == "step":
    jax.tree.map(lambda x: add("kv", x), program.args[2].k)
  vocab = _vocab(program.args[1]) if len(program.args) > 1 else None
  if vocab:
    # logits and what is made from them ([B, R, V] or its vocab shard, any dtype)
    out["logits"] = lambda a: len(a.dims) >= 2 and a.dims[-1] in vocab
  return out


def _vocab(params) -> set[int] | None:
  """{V, V per device} from the target's embedding table, or None."""
  for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
    if "embed_tokens" in jax.tree_util.keystr(path) and isinstance(leaf, jax.ShapeDtypeStruct) and leaf.ndim == 2:
      v = leaf.shape[0]
      shard = leaf.sharding.shard_shape(leaf.shape)[0] if isinstance(leaf.sharding, NamedSharding) else v
      return {v, shard}
  return None


def _oom(msg: str) -> dict:
  """Figures from the compiler's out-of-memory message: "Used 20.5G of 15.75G hbm", or "the total
  memory required for HLO temporaries (58.75G) exceeds available HBM (15.75G)" (temps only)."""
  unit = {"T": 2**40, "G": 2**30, "M": 2**20, "K": 2**10}
  m = re.search(r"Used ([\d.]+)([TGMK]) of ([\d.]+)([TGMK]) hbm", msg)
  if m:
    return dict(used_bytes=float(m.group(1)) * unit[m.group(2)], hbm_bytes=float(m.group(3)) * unit[m.group(4)])
  m = re.search(r"HLO temporaries \(([\d.]+)([TGMK])\) exceeds available HBM \(([\d.]+)([TGMK])\)", msg)
  if m:
    return dict(temp_needed_bytes=float(m.group(1)) * unit[m.group(2)],
                hbm_bytes=float(m.group(3)) * unit[m.group(4)])
  return {}


def compile_one(program: Program, hbm_bytes: int | None, dump=None) -> tuple[dict, object | None]:
  """-> (row of figures, compiled executable or None). Errors become the row's `error` line.
  `dump` (a directory): write the optimised HLO there as <name>.txt."""
  row = dict(name=program.name, kind=program.kind)
  t0 = time.perf_counter()
  try:
    compiled = program.fn.lower(*program.args, **program.kwargs).compile()
  except Exception as e:  # the compiler's own message, first line: RESOURCE_EXHAUSTED, shape errors
    msg = str(e)
    row.update(error=f"{type(e).__name__}: {msg.splitlines()[0][:300] if msg else ''}", **_oom(msg),
               compile_s=time.perf_counter() - t0)
    if "used_bytes" in row or "temp_needed_bytes" in row:
      row["fits"] = False
    if dump is not None:  # the whole message: libtpu lists the largest allocations after its first line
      dump.mkdir(parents=True, exist_ok=True)
      (dump / f"{program.name}.error.txt").write_text(msg)
    return row, None
  row["compile_s"] = time.perf_counter() - t0
  mem = compiled.memory_analysis()
  row.update(argument_bytes=mem.argument_size_in_bytes, output_bytes=mem.output_size_in_bytes,
             alias_bytes=mem.alias_size_in_bytes, temp_bytes=mem.temp_size_in_bytes,
             code_bytes=mem.generated_code_size_in_bytes)
  # donated outputs alias their arguments: the peak holds arguments + non-aliased outputs + temps
  row["peak_bytes"] = (mem.argument_size_in_bytes + mem.output_size_in_bytes - mem.alias_size_in_bytes
                       + mem.temp_size_in_bytes)
  if hbm_bytes:
    row["hbm_bytes"] = hbm_bytes
    row["fits"] = row["peak_bytes"] <= hbm_bytes
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  row.update(flops=float(cost.get("flops", 0.0)), bytes_accessed_raw=float(cost.get("bytes accessed", 0.0)))
  text = compiled.as_text()
  if dump is not None:
    dump.mkdir(parents=True, exist_ok=True)
    (dump / f"{program.name}.txt").write_text(text)
  mod = hlo.Module(text, shape_classes(program))
  whole = mod.traffic()
  row.update(hbm_read=whole.read, hbm_write=whole.write, hbm_traffic=whole.total,
             hbm_by_class=dict(whole.by_class), hbm_by_op=dict(whole.by_op.most_common(8)),
             hbm_top=dict(whole.by_instr.most_common(12)),
             collectives=dict(whole.collectives))
  if program.kind == "loop":
    body = mod.loop_body()
    if body:
      per = mod.traffic(body)
      # the whole program is one iteration of the while body plus what runs once a generation
      # outside it (the state's copies in and out: ~0.46 GB for glance-63 at 8B), which a per-token
      # figure must not count every round
      row.update(round_hbm_traffic=per.total, round_hbm_by_class=dict(per.by_class),
                 round_collectives=dict(per.collectives), outside_loop_hbm_traffic=whole.total - per.total)
  return row, compiled


def add_ratios(rows: list[dict]) -> None:
  """round / AR figures: each round.<m>.b<B> against round.ar.b<B> (same batch); each loop.<m>.b<B>
  against loop.ar.b<B> per iteration (the while body: what every round of a generation moves)."""
  by = {r["name"]: r for r in rows}
  for r in rows:
    m = re.match(r"loop\.(\w+)\.b(\d+)$", r["name"])
    if m and r.get("round_hbm_traffic"):
      ar = by.get(f"loop.ar.b{m.group(2)}")
      if ar and ar.get("round_hbm_traffic"):
        r["vs_ar"] = dict(hbm=r["round_hbm_traffic"] / ar["round_hbm_traffic"],
                          hbm_whole=r["hbm_traffic"] / ar["hbm_traffic"],
                          flops=r["flops"] / max(ar["flops"], 1.0))
      continue
    m = re.match(r"round\.(\w+)\.b(\d+)$", r["name"])
    if not m or "hbm_traffic" not in r:
      continue
    ar = by.get(f"round.ar.b{m.group(2)}")
    if ar and ar.get("hbm_traffic"):
      r["vs_ar"] = dict(hbm=r["hbm_traffic"] / ar["hbm_traffic"],
                        raw_bytes=r["bytes_accessed_raw"] / max(ar["bytes_accessed_raw"], 1.0),
                        flops=r["flops"] / max(ar["flops"], 1.0))


CLASSES = ("weights", "head_weights", "kv", "head_kv", "logits", "other")


def by_class_table(rows: list[dict]) -> list[str]:
  """HBM traffic per class (read + write), per program; a loop's row is one iteration (a round)."""
  out = ["", "HBM traffic by class, GB per device (read + write; loop rows: one round of the loop):", "",
         "| program | " + " | ".join(CLASSES) + " | total |", "|---|" + "---|" * (len(CLASSES) + 1)]
  for r in rows:
    cls = r.get("round_hbm_by_class") or r.get("hbm_by_class")
    if not cls or r["kind"] == "train":
      continue
    per = {c: sum(v for k, v in cls.items() if k.rsplit(".", 1)[0] == c) for c in CLASSES}
    out.append(f"| {r['name']} | " + " | ".join(f"{per[c] / GB:.3f}" for c in CLASSES)
               + f" | {sum(cls.values()) / GB:.3f} |")
  return out if len(out) > 5 else []


def _gb(x) -> str:
  return "" if x is None else f"{x / GB:.2f}"


def markdown(rows: list[dict], header: str) -> str:
  lines = [header, "",
           "| program | args GB | out GB | temp GB | peak GB | fits | GFLOP | raw bytes GB | HBM traffic GB "
           "| per iteration GB | x AR (HBM / flops) | collectives GB | compile s |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
  for r in rows:
    if "error" in r:
      peak, temp = _gb(r.get("used_bytes")), _gb(r.get("temp_needed_bytes"))
      lines.append(f"| {r['name']} | | | {temp} | {peak} | {'no' if r.get('fits') is False else ''} | | | | | | "
                   f"| {r.get('compile_s', 0):.0f} |")
      continue
    ratio = r.get("vs_ar")
    ratio = f"{ratio['hbm']:.2f} / {ratio['flops']:.2f}" if ratio else ""
    coll = r.get("collectives", {})
    lines.append(
        f"| {r['name']} | {_gb(r['argument_bytes'])} | {_gb(r['output_bytes'])} | {_gb(r['temp_bytes'])} | "
        f"{_gb(r['peak_bytes'])} | {'' if 'fits' not in r else ('yes' if r['fits'] else 'NO')} | "
        f"{r['flops'] / 1e9:.2f} | {_gb(r['bytes_accessed_raw'])} | {_gb(r['hbm_traffic'])} | "
        f"{_gb(r.get('round_hbm_traffic'))} | {ratio} | "
        f"{' '.join(f'{k} {v / GB:.3f}' for k, v in sorted(coll.items()))} | {r['compile_s']:.0f} |")
  if any(r.get("round_hbm_traffic") for r in rows):
    lines += ["", "A loop's HBM traffic is the whole program: one iteration of its while loop (per iteration: "
              "what each round moves) plus what runs once a generation outside it (the decode state's copies "
              "in and out); its x AR is per iteration, against AR's loop."]
  lines += by_class_table(rows)
  errs = [r for r in rows if "error" in r]
  if errs:
    lines += ["", "Did not compile:", ""] + [f"- {r['name']}: {r['error']}" for r in errs]
  return "\n".join(lines) + "\n"
