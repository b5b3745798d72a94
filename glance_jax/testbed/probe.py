"""Where is a testbed target unsure? Teacher-forced entropy of its next-token distribution on the
reference answers of held-out records, by the kind of character each answer token starts at:

  clear     inside a field the image shows for sure ("pens: 42" drawn plainly, a visible bar top)
  unclear   inside a small, faint or partly hidden field (a value, word or bar height)
  other     the rest: punctuation, separators, the caption's phrasing and the list order (forks)

A target that reads its images has low entropy on clear tokens and a spread on the others, which is
what the entropy law needs. Run on a trained target before the slow bench:

  python -m glance_jax.testbed.probe --target testbed/target --records 24
"""

from __future__ import annotations

import argparse
import json

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from glance_jax.testbed import stream, suites

KINDS = ("clear", "unclear", "other")


def char_kinds(scene, answer: str) -> list[str]:
  """The kind of every answer character: each scene field is found in reading order (chart bars
  may run right to left, so each is searched from the start)."""
  kinds = ["other"] * len(answer)
  pos = 0
  for field, clear in zip(scene.fields, scene.clear):
    start = answer.find(field, 0 if scene.task == "chart" else pos)
    if start < 0:
      continue
    for i in range(start, start + len(field)):
      kinds[i] = "clear" if clear else "unclear"
    pos = start + len(field)
  return kinds


def token_entropies(target, processor, task: str, indices, *, batch: int = 8, suite=None) -> list[dict]:
  """Per held-out record of `suite` (a suite module; default: the shipped version's): per answer token (and the final
  <|im_end|>) its kind, the target's entropy H (nats) before it, and whether the target's argmax
  is the token."""
  from glance_jax.testbed.target_train import ExampleMaker
  from glance_jax.train.batch import collate

  suite = suite or suites.get(suites.DEFAULT)
  cfg = target.config
  maker = ExampleMaker(processor, cfg.eos_token_ids[0])
  tok = processor.tokenizer

  @jax.jit
  def forward(params, b):
    model = nnx.merge(target.graphdef, params)
    h, _, _ = model.forward_prompt(b.prompt)
    logp = jax.nn.log_softmax(model.logits(h[:, :-1]).astype(jnp.float32), -1)
    return -(jnp.exp(logp) * logp).sum(-1), jnp.argmax(logp, -1) == b.input_ids[:, 1:]

  out = []
  indices = list(indices)
  for s in range(0, len(indices), batch):
    chunk = indices[s: s + batch]
    recs = [suite.record(task, "heldout", i) for i in chunk]
    examples = [maker(image, suite.QUESTIONS[task], answer) for _, image, answer in recs]
    seq = max(e.input_ids.size for e in examples)
    b = collate(examples, cfg, seq_len=seq, max_patches=sum(int(np.prod(e.image_grid_thw)) for e in examples),
                pad_id=processor.pad_token_id)
    H, hit = (np.asarray(x) for x in forward(target.params, b))
    for row, ((scene, _, answer), e) in enumerate(zip(recs, examples)):
      ids = tok.encode(answer)
      kinds = char_kinds(scene, answer)
      first = e.input_ids.size - len(ids) - 1           # the answer's first token
      toks, ends = [], [len(tok.decode(ids[: j + 1])) for j in range(len(ids))]
      for j in range(len(ids)):
        start = ends[j - 1] if j else 0
        while start < len(answer) - 1 and answer[start] == " ":
          start += 1                                     # a token's leading space is not its kind
        toks.append({"kind": kinds[min(start, len(answer) - 1)], "H": float(H[row, first + j - 1]),
                     "hit": bool(hit[row, first + j - 1])})
      toks.append({"kind": "other", "H": float(H[row, first + len(ids) - 1]),
                   "hit": bool(hit[row, first + len(ids) - 1])})
      out.append({"index": chunk[row], "answer": answer, "tokens": toks})
  return out


def summarize(records: list[dict]) -> dict:
  """Per kind: token count, mean H, share with H > 0.3 nats, argmax accuracy; and H's deciles."""
  res = {}
  allH = np.array([t["H"] for r in records for t in r["tokens"]])
  for kind in KINDS:
    ts = [t for r in records for t in r["tokens"] if t["kind"] == kind]
    if ts:
      H = np.array([t["H"] for t in ts])
      res[kind] = {"tokens": len(ts), "mean_H": float(H.mean()), "share_H_gt_0.3": float((H > 0.3).mean()),
                   "argmax_acc": float(np.mean([t["hit"] for t in ts]))}
  res["H_deciles"] = np.quantile(allH, np.linspace(0.1, 0.9, 9)).round(3).tolist()
  return res


def main(argv=None) -> None:
  ap = argparse.ArgumentParser(prog="python -m glance_jax.testbed.probe", description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--target", required=True, help="a testbed target checkpoint directory")
  ap.add_argument("--suite", default=suites.DEFAULT, choices=suites.VERSIONS, help="the suite its records come from")
  ap.add_argument("--records", type=int, default=16, help="held-out records per task (from index 0)")
  ap.add_argument("--json", default=None, help="also write the per-task summary here")
  args = ap.parse_args(argv)
  if not 0 < args.records <= stream.HELDOUT_RESERVED:
    ap.error(f"--records must be in 1..{stream.HELDOUT_RESERVED}, got {args.records}")
  from glance_jax.qwen3_vl.inputs import Processor
  from glance_jax.qwen3_vl.target import load_target
  target = load_target(args.target, dtype=jnp.float32)
  processor = Processor.from_pretrained(args.target)
  s = suites.get(args.suite)
  report = {t: summarize(token_entropies(target, processor, t, range(args.records), suite=s)) for t in s.TASKS}
  print(json.dumps(report, indent=2))
  if args.json:
    with open(args.json, "w") as f:
      json.dump(report, f, indent=2)


if __name__ == "__main__":
  main()
