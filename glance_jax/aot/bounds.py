"""Time bounds from compiled programs: what the TPU compiler's figures imply per AR token and per
round, against the physical floor.

  python -m glance_jax.aot.bounds runs/aot/report.json [more reports] [--taus 3.09,5.12] [--bench bench.json]

For a program (one row of a glance_jax.aot report; figures per device):

  t = max(HBM traffic / HBM bandwidth, flops / peak bf16 flops) + collective bytes / ICI bandwidth

a loop row by one iteration of its while body (what each round of a generation moves), its flops
taken from the same method's round row. The floor of an AR token is the bytes a token must read on
one device: the text decoder's weights and the lm_head (the embedding is read one row a token) over
the devices that split them, plus the KV cache at the report's prompt length, over HBM bandwidth.
A method at mean accepted length tau then costs t_round / tau per token and runs t_AR * tau /
t_round times faster than AR; t_round / t_AR is the tau it needs to break even.

These are bounds (a program is at least this slow), not predictions of a measured run: the compiler
may overlap collectives with compute, and neither launch latency nor the host is in them. The chip
figures are the public per-chip specifications (CHIPS, with their sources).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import pathlib
import re
import sys


@dataclasses.dataclass(frozen=True)
class Chip:
  name: str
  hbm_gb_s: float       # HBM bandwidth, GB/s per chip
  bf16_tflops: float    # peak bf16 dense, TFLOP/s per chip
  ici_gb_s: float       # inter-chip interconnect, GB/s per chip (the spec's Gbps / 8)
  source: str


CHIPS = {
    "v5e": Chip("v5e", 819.0, 197.0, 1600 / 8, "https://cloud.google.com/tpu/docs/v5e"),
    "v5p": Chip("v5p", 2765.0, 459.0, 4800 / 8, "https://cloud.google.com/tpu/docs/v5p"),
    "v6e": Chip("v6e", 1640.0, 918.0, 3584 / 8, "https://cloud.google.com/tpu/docs/v6e"),
}
# The paper's tau at N = 63 (Qwen3-VL-8B, HF): captioning, TextVQA, InfoVQA, DocVQA, ChartQA.
PAPER_TASKS = ("captioning", "textvqa", "infovqa", "docvqa", "chartqa")
PAPER_TAUS = dict(zip(PAPER_TASKS, (3.09, 3.46, 3.75, 3.76, 5.12)))
# Each arm's own tau in the paper, same tasks (shared/docs/baselines.md section 1): GLANCE at budget
# 63, the production EAGLE3-VL head's 8/8/32 tree (SGLang), its released 3/1/4 chain, Qwen3-VL-4B
# drafting (classic SD). Keyed by aot method run (glance_jax/aot/programs.py).
PAPER_ARM_TAUS = {
    "glance63": PAPER_TAUS, "glance63v": PAPER_TAUS,
    "eagle3": dict(zip(PAPER_TASKS, (3.51, 4.31, 3.51, 3.68, 4.50))),
    "eagle3chain": dict(zip(PAPER_TASKS, (2.13, 2.66, 2.48, 2.56, 2.92))),
    "twomodel": dict(zip(PAPER_TASKS, (3.53, 3.79, 3.95, 4.39, 4.47))),
}


def chip_of(meta: dict) -> Chip:
  """The chip of a report (its topology's generation, e.g. "v5e:2x2" -> v5e)."""
  gen = str(meta.get("topology", "")).split(":")[0]
  if gen not in CHIPS:
    raise ValueError(f"report topology {meta.get('topology')!r}: no chip figures for {gen!r} "
                     f"(known: {', '.join(CHIPS)})")
  return CHIPS[gen]


def text_config(meta: dict) -> dict:
  """The target's text config from a report's meta (sizes.config is the repr of the model config)."""
  cfg = ast.literal_eval(meta["sizes"]["config"])
  return cfg["text"] | {"tie_word_embeddings": cfg.get("tie_word_embeddings", False)}


def floor_bytes(meta: dict, bytes_per_param: int = 2, batch: int = 1) -> float:
  """Bytes one device must read per AR step of `batch` rows of a report's program (step_bytes)."""
  return step_bytes(text_config(meta), int(meta["sizes"]["prompt_len"]), bytes_per_param, batch,
                    int(meta["devices"]))


def step_bytes(t: dict, prompt_len: int, bytes_per_param: int = 2, batch: int = 1, devices: int = 1) -> float:
  """Bytes one device must read per AR step of `batch` rows: decoder layers + lm_head once (split
  over the devices, as the weights are) + each row's KV cache at the prompt length (ditto). `t` is
  the text config as a dict (TextConfig's fields)."""
  d, i, h, kv, hd = (t[k] for k in ("hidden_size", "intermediate_size", "num_attention_heads",
                                    "num_key_value_heads", "head_dim"))
  layer = d * h * hd * 2 + d * kv * hd * 2 + 3 * d * i + 2 * d + 2 * hd  # q, o, k, v, MLP, norms, q/k norms
  params = t["num_hidden_layers"] * layer + t["vocab_size"] * d + d
  kv_bytes = t["num_hidden_layers"] * 2 * kv * hd * prompt_len * bytes_per_param
  return (params * bytes_per_param + batch * kv_bytes) / devices


def _per_iteration(row: dict, rounds: dict[str, dict]) -> tuple[float, float, float]:
  """(HBM bytes, flops, collective bytes) of one round of `row` (a loop row: its body)."""
  if row["kind"] == "loop":
    m = re.match(r"loop\.(.+)$", row["name"])
    twin = rounds.get(f"round.{m.group(1)}") if m else None
    flops = twin["flops"] if twin else row["flops"]
    return row.get("round_hbm_traffic", row["hbm_traffic"]), flops, sum((row.get("round_collectives") or {}).values())
  return row["hbm_traffic"], row["flops"], sum((row.get("collectives") or {}).values())


def bound_ms(traffic: float, flops: float, coll: float, chip: Chip) -> dict:
  hbm = traffic / (chip.hbm_gb_s * 1e9) * 1e3
  compute = flops / (chip.bf16_tflops * 1e12) * 1e3
  ici = coll / (chip.ici_gb_s * 1e9) * 1e3
  return {"hbm_ms": hbm, "flops_ms": compute, "ici_ms": ici, "bound_ms": max(hbm, compute) + ici,
          "limit": "flops" if compute > hbm else "hbm"}


def bounds(report: dict, taus: dict[str, float] | None = None) -> dict:
  """Per round / loop program of a report: its bound, against AR's at the same batch; AR's floor;
  at each named tau the method's ms per token and speedup over AR (the AR row's bound per token)."""
  taus = PAPER_TAUS if taus is None else taus
  meta, chip = report["meta"], chip_of(report["meta"])
  rows = [r for r in report["programs"] if r.get("kind") in ("round", "loop") and "error" not in r]
  rounds = {r["name"]: r for r in rows if r["kind"] == "round"}
  floor_ms_at = lambda batch: floor_bytes(meta, batch=batch) / (chip.hbm_gb_s * 1e9) * 1e3  # noqa: E731
  floor_ms = floor_ms_at(1)
  out = []
  for r in rows:
    kind, method, batch = re.match(r"(round|loop)\.(.+)\.b(\d+)$", r["name"]).groups()
    b = bound_ms(*_per_iteration(r, rounds), chip)
    ar = next((x for x in rows if x["name"] == f"{kind}.ar.b{batch}"), None)
    ar_ms = bound_ms(*_per_iteration(ar, rounds), chip)["bound_ms"] if ar else None
    # the floor of one AR step at this batch: a row's bound against it (at batch 8 the weights are
    # read once for 8 tokens, so the floor per token is floor_ms / batch)
    row_floor = floor_ms_at(int(batch))
    row = {"program": r["name"], "kind": kind, "method": method, "batch": int(batch), **b,
           "x_ar": b["bound_ms"] / ar_ms if ar_ms else None, "floor_ms": row_floor,
           "floor_ms_per_token": row_floor / int(batch), "x_floor": b["bound_ms"] / row_floor}
    if method != "ar" and ar_ms:
      price = lambda ts: {name: {"tau": tau, "ms_per_token": b["bound_ms"] / tau / int(batch),  # noqa: E731
                                 "speedup": ar_ms * tau / b["bound_ms"]} for name, tau in ts.items()}
      row["at_tau"] = price(taus)
      if method in PAPER_ARM_TAUS:   # at the arm's own taus in the paper
        row["at_paper_tau"] = price(PAPER_ARM_TAUS[method])
    out.append(row)
  return {"topology": meta["topology"], "devices": meta["devices"], "chip": dataclasses.asdict(chip),
          "floor_ms": floor_ms, "floor_gb_per_device": floor_bytes(meta) / 1e9, "taus": taus, "programs": out}


def markdown(b: dict) -> str:
  c = b["chip"]
  names = list(b["taus"])
  lines = [f"{b['topology']} ({b['devices']} devices; per chip {c['hbm_gb_s']:.0f} GB/s HBM, "
           f"{c['bf16_tflops']:.0f} TFLOP/s bf16, {c['ici_gb_s']:.0f} GB/s ICI: {c['source']}). Floor per AR "
           f"token: {b['floor_gb_per_device']:.2f} GB a device = {b['floor_ms']:.2f} ms at batch 1; a row's x floor "
           "is against an AR step's floor at its batch (the weights once, every row's cache).", "",
           "| program | HBM ms | flops ms | ICI ms | bound ms | x AR | x floor | "
           + " | ".join(f"ms/token / speedup at tau {b['taus'][n]:.2f} ({n})" for n in names)
           + " | speedup at its own paper taus (" + " / ".join(PAPER_TASKS) + ") |",
           "|" + "---|" * (8 + len(names))]
  for r in b["programs"]:
    cells = [f"{r['at_tau'][n]['ms_per_token']:.2f} / {r['at_tau'][n]['speedup']:.2f}" if "at_tau" in r
             else f"{r['bound_ms'] / r['batch']:.2f} / 1.00" if r["method"] == "ar" else "-" for n in names]
    own = " / ".join(f"{v['speedup']:.2f}" for v in r["at_paper_tau"].values()) if "at_paper_tau" in r else "-"
    x_ar = "-" if r["x_ar"] is None else f"{r['x_ar']:.2f}"
    lines.append(f"| {r['program']} | {r['hbm_ms']:.2f} | {r['flops_ms']:.2f} | {r['ici_ms']:.2f} | "
                 f"{r['bound_ms']:.2f} | {x_ar} | {r['x_floor']:.2f} | " + " | ".join(cells) + f" | {own} |")
  return "\n".join(lines) + "\n"


def taus_from_bench(path: str, label: str) -> dict[str, float]:
  """Per task, the tau of method `label` in a decode.py bench report."""
  rep = json.loads(pathlib.Path(path).read_text())
  out = {t: v["methods"][label]["tau"] for t, v in rep["tasks"].items() if label in v["methods"]}
  if not out:
    raise ValueError(f"{path}: no task ran method {label!r}")
  return out


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("reports", nargs="+", help="glance_jax.aot report.json files")
  p.add_argument("--taus", default=None, help="comma list of taus to price (default: the paper's per task)")
  p.add_argument("--bench", default=None, help="a decode.py bench report: price its --bench-method's taus per task")
  p.add_argument("--bench-method", default="glance-63")
  p.add_argument("--json", dest="json_out", default=None)
  args = p.parse_args(argv)
  taus = None
  if args.taus:
    taus = {f"tau {x}": float(x) for x in args.taus.split(",") if x}
  if args.bench:
    taus = {f"testbed {t}": v for t, v in taus_from_bench(args.bench, args.bench_method).items()}
  out = []
  for path in args.reports:
    try:
      b = bounds(json.loads(pathlib.Path(path).read_text()), taus)
    except (KeyError, ValueError) as e:
      print(f"error: {path}: {e}", file=sys.stderr)
      return 2
    out.append(b)
    print(markdown(b))
  if args.json_out:
    pathlib.Path(args.json_out).write_text(json.dumps(out, indent=1))
  return 0


if __name__ == "__main__":
  sys.exit(main())
