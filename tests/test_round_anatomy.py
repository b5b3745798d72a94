"""benchmarks/round_anatomy.py: its round accounting rebuilds decoding's own tokens and accepted
lengths, the bands partition the rounds, the zeroed tally sums the ablated head's accepted tokens;
end to end on a tiny random target, a lively head and a task file written here."""

import numpy as np
import pytest

from benchmarks import round_anatomy as ra
from glance_jax.data.records import write_task_file
from glance_jax.data.synthetic import read_synthetic
from glance_jax.decode.generate import generate
from glance_jax.qwen3_vl.inputs import Processor, prepare_inputs
from glance_jax.qwen3_vl.target import load_target
from glance_jax.testing.checkpoint import make_tiny_checkpoint
from tests.decode_fixtures import lively_head


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
  root = tmp_path_factory.mktemp("anatomy")
  target = load_target(make_tiny_checkpoint(root / "ckpt", seed=5), dtype=np.float32)
  head = lively_head(target, seed=6, num_layers=2)
  records = list(read_synthetic(root, "train"))[:3]
  task = root / "synthetic.jsonl"
  write_task_file(records, task)
  return target, head, records, task


def test_rounds_rebuild_the_decoded_tokens(setup):
  target, head, records, _ = setup
  processor = Processor.from_pretrained(str(target.path))
  ids = lambda toks: list(toks)                               # "decode" to ids: the accounting itself
  accepted_somewhere = 0
  for rec in records:
    inputs = prepare_inputs(processor, rec.prompt, list(rec.images))
    res = generate(target, inputs, head=head, method="glance", budget=63, max_new_tokens=32)
    rounds = ra.rounds_of(res.tokens[0], res.accepted[0], res.root_entropy[0], ids)
    toks = [int(t) for t in res.tokens[0]]
    rebuilt = toks[:1] + [t for r in rounds for t in r["text"]]
    assert rebuilt == toks                                    # every token once, in order
    assert all(len(r["text"]) <= r["accepted"] + 1 for r in rounds)
    assert [r["accepted"] for r in rounds] == [int(a) for a in res.accepted[0][:len(rounds)]]
    np.testing.assert_allclose([r["root_entropy"] for r in rounds], res.root_entropy[0][:len(rounds)])
    accepted_somewhere += sum(r["accepted"] for r in rounds)
  assert accepted_somewhere > 0                               # the lively head is accepted somewhere


def test_bands_partition_and_tally():
  rounds = [{"root_entropy": h, "accepted": a, "before": "b", "text": t}
            for h, a, t in ((0.0, 3, "x"), (0.5, 0, "y"), (2.0, 1, "x"), (0.005, 2, "z"))]
  bands = ra.bands_of(rounds, (0.01, 1.1))
  assert [b["rounds"] for b in bands] == [2, 1, 1]
  assert bands[0]["mean_a"] == 2.5 and bands[2]["mean_H"] == 2.0
  assert ra.zeroed_tally(rounds) == [("b", "x", 4), ("b", "z", 2)]


def test_main_end_to_end(setup, tmp_path, capsys):
  target, head, _, task = setup
  rep = ra.main([str(task), "--limit", "2", "--budget", "15", "--max-new-tokens", "16", "--zeroed",
                 "--roots", "3", "--json", str(tmp_path / "a.json")], target=target, head=head)
  out = capsys.readouterr().out
  assert out.startswith("glance-15, 2 prompts") and "== zeroed head:" in out and "== by root token" in out
  assert 1 <= len(rep["by_root"]["roots"]) <= 3
  assert sum(b["rounds"] for b in rep["bands"]) > 0
  z = rep["zeroed"]
  assert z["accepted"] == sum(n for _, _, n in z["by_text"]) and z["tau"] >= 1.0
  assert (tmp_path / "a.json").exists()


def test_roots_tabulate_kinds_and_the_fit_without_each():
  """roots_of counts rounds by root token, most frequent first, and its R^2 figures are the law's
  isotonic R^2 (analysis.isotonic_r2) over all rounds and over all but one root's; law_records cuts
  the round that reached the answer's end as the bench does."""
  from glance_jax.analysis import isotonic_r2
  rng = np.random.default_rng(0)
  rounds = []
  for i in range(300):
    root = ("x", "y", "z")[i % 3]
    h = {"x": 0.001, "y": 0.004, "z": 1.5}[root] * rng.uniform(0.5, 1.5)
    a = {"x": 7, "y": 15, "z": 3}[root] + int(rng.integers(-1, 1))
    rounds.append({"root_entropy": h, "accepted": a, "a_law": min(a, 15), "censored": False, "root": root,
                   "prompt": i // 10})
  br = ra.roots_of(rounds, 2)
  H = np.array([r["root_entropy"] for r in rounds])
  a = np.array([r["a_law"] for r in rounds])
  assert [r["root"] for r in br["roots"]] == ["x", "y"] and br["roots"][0]["rounds"] == 100
  assert br["r2"] == pytest.approx(isotonic_r2(H, a, None, 15))
  assert br["r2_ci"][0] <= br["r2"] <= br["r2_ci"][1]
  keep = np.array([r["root"] != "y" for r in rounds])
  assert br["roots"][1]["r2_without"] == pytest.approx(isotonic_r2(H[keep], a[keep], None, 15))
  assert br["roots"][1]["r2_without"] > br["r2"]            # the surer-but-longer kind holds the fit down
  rounds[0]["first"] = True
  last = ra.roots_of(rounds, 4)["roots"][-1]                # a row's first round is a kind of its own
  assert (last["root"], last["rounds"]) == (ra.FIRST, 1)
  row = [{"root_entropy": 0.1, "accepted": 3}, {"root_entropy": 0.2, "accepted": 5}]
  ra.law_records(row, [3, 5], 1 + 4 + 2)                    # the last round emitted 2 of its 6
  assert [(r["a_law"], r["censored"]) for r in row] == [(3, False), (2, True)]
