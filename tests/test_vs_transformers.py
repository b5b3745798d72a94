"""benchmarks/vs_transformers.py reduced (the embedded tiny checkpoint, the 2 synthetic val prompts,
8 tokens): transformers' greedy tokens equal ours, and the report has its fields."""

import json
import math

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from benchmarks import vs_transformers as vt  # noqa: E402

METHODS = {"hf-greedy", "hf-prompt-lookup", "ar", "ngram", "glance-15"}


def test_reduced_run_agrees_with_hf_greedy(tmp_path, capsys):
  path = tmp_path / "vs.json"
  rep = vt.main(["--limit", "2", "--max-new-tokens", "8", "--repeats", "1", "--json", str(path)])
  out = capsys.readouterr().out
  assert out.splitlines()[0] == f"$ python benchmarks/vs_transformers.py --limit 2 --max-new-tokens 8 --repeats 1 --json {path}"
  assert "| method | ms/token |" in out
  saved = json.loads(path.read_text())
  assert saved["prompts"] == 2 and saved["max_new_tokens"] == 8 and saved["tasks"][0].endswith("synthetic_val.jsonl")
  rows = saved["methods"]
  assert set(rows) == METHODS == set(rep["methods"])
  for k, r in rows.items():
    assert r["agree_with_hf_greedy"] == 2, k                             # greedy everywhere: the same tokens
    assert 0 < r["tokens"] <= 16 and math.isfinite(r["ms_per_token"]) and r["ms_per_token"] > 0
    assert r["ratio_to_hf_greedy"] == pytest.approx(r["ms_per_token"] / rows["hf-greedy"]["ms_per_token"])
  assert rows["hf-greedy"]["ratio_to_hf_greedy"] == 1.0
  assert rows["ar"]["tau"] == 1.0 and rows["glance-15"]["tau"] >= 1.0 and rows["hf-greedy"]["tau"] is None
  assert [set(p["ms"]) for p in saved["per_prompt"]] == [METHODS] * 2
