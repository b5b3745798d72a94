"""decode.py: every method end to end on the embedded default and on checkpoint directories; bad
input is a clear one-line error."""

import json
import sys

import numpy as np
import pytest

from glance_jax.cli import decode as cli
from tests.decode_fixtures import decode_checkpoints


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
  root = tmp_path_factory.mktemp("cli")
  decode_checkpoints(root)
  from glance_jax.demo import default_image
  default_image(seed=3).save(root / "x.png")
  (root / "not_an_image.png").write_text("hello")
  return root


def test_decode_default_runs(tmp_path, capsys):
  out = tmp_path / "r.json"
  res = cli.main(["--max-new-tokens", "8", "--budget", "15", "--json", str(out)])
  assert res["new_tokens"] >= 1 and res["method"] == "glance"
  line = capsys.readouterr().out.strip().splitlines()[-1]
  for field in ("new_tokens=", "rounds=", "tau=", "ms/token=", "tokens/s="):
    assert field in line
  assert json.loads(out.read_text())["tokens"] == res["tokens"]


def test_regime_widens_the_testbed_pair(monkeypatch, ckpt):
  """The testbed decodes in its default regime, memory (the widened pair; x2 here, x8 in the regime):
  the same tokens as the pair as trained (--regime compute); with --model, that pair widened."""
  from glance_jax.testbed import regimes
  monkeypatch.setitem(regimes.WIDTH, "memory", 2)
  seen = []
  real = regimes.widen_pair
  monkeypatch.setattr(regimes, "widen_pair", lambda t, h, r: seen.append(r) or real(t, h, r))
  base = ["--max-new-tokens", "10", "--budget", "15"]
  small = cli.main(base + ["--regime", "compute"])
  wide = cli.main(base)                     # the testbed's default regime: memory
  assert seen == ["compute", "memory"] and wide["tokens"] == small["tokens"] and wide["accepted"] == small["accepted"]
  # with --model the given pair is widened alike (a testbed build not shipped yet)
  base = ["--model", str(ckpt / "model"), "--head", str(ckpt / "head"), "--max-new-tokens", "10", "--budget", "15"]
  assert cli.main(base + ["--regime", "memory"])["tokens"] == cli.main(base)["tokens"] and seen[-1] == "memory"
  # two-model: the target and its draft model are both widened (two widenings), tokens unchanged
  base = ["--model", str(ckpt / "model"), "--method", "two-model", "--draft", str(ckpt / "draft"),
          "--max-new-tokens", "10"]
  n = len(seen)
  wide = cli.main(base + ["--regime", "memory"])
  assert len(seen) == n + 2 and wide["tokens"] == cli.main(base)["tokens"]


def test_every_method_gives_ar_tokens_from_checkpoints(ckpt):
  base = ["--model", str(ckpt / "model"), "--image", str(ckpt / "x.png"), "--image", str(ckpt / "x.png"),
          "--prompt", "Compare the two pictures.", "--max-new-tokens", "12", "--budget", "15"]
  ref = cli.main(base + ["--method", "ar"])
  assert len(set(ref["tokens"])) > 1 and np.all(np.asarray(ref["tokens"]) >= 0)
  for method in ("ngram", "chain", "glance"):
    res = cli.main(base + ["--method", method, "--head", str(ckpt / "head")])
    assert res["tokens"] == ref["tokens"], method
  for method in ("eagle3", "eagle3-chain"):
    res = cli.main(base + ["--method", method, "--head", str(ckpt / "eagle3_head")])
    assert res["tokens"] == ref["tokens"], method
  res = cli.main(base + ["--method", "two-model", "--draft", str(ckpt / "draft")])
  assert res["tokens"] == ref["tokens"], "two-model"
  res = cli.main(base + ["--method", "glance", "--head", str(ckpt / "head"), "--scores", "calibrated"])
  assert res["tokens"] == ref["tokens"], "glance, calibrated scores"
  auto = cli.main(base[:-2] + ["--method", "glance", "--budget", "auto", "--head", str(ckpt / "head")])
  assert auto["tokens"] == ref["tokens"] and auto["widths"] and set(auto["widths"]) <= {0, 15, 31, 63}


@pytest.mark.parametrize("args,words", [
    (["--budget", "0"], ["--budget must be an integer >= 1"]),
    (["--temperature", "-1"], ["--temperature must be >= 0"]),
    (["--image", "{root}/nope.png"], ["nope.png"]),
    (["--image", "{root}/not_an_image.png"], ["not_an_image.png"]),
    (["--model", "{root}/model", "--method", "glance"], ["needs --head"]),
    (["--model", "{root}/model", "--method", "eagle3"], ["needs --head", "EAGLE-3"]),
    (["--model", "{root}/model", "--method", "eagle3", "--head", "{root}/head"], ["config.json", "EAGLE-3"]),
    (["--model", "{root}/model", "--head", "{root}/deep_head"], ["target_layer_ids", "depth 4"]),
    (["--model", "{root}/model", "--method", "two-model"], ["needs --draft"]),
    (["--model", "{root}/model", "--draft", "{root}/model"], ["--draft", "two-model"]),
    (["--method", "chain", "--budget", "auto"], ["--budget auto needs --method glance"]),
    (["--budget", "auto", "--round-cost", "{root}/nope.json"], ["nope.json"]),
])
def test_bad_input_is_one_line_error(ckpt, args, words, monkeypatch, capsys):
  args = [a.format(root=ckpt) for a in args]
  monkeypatch.setattr(sys, "argv", ["decode.py", *args, "--max-new-tokens", "2"])
  with pytest.raises(SystemExit) as e:
    cli.cli_main()
  assert e.value.code == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and err[0].startswith("decode.py: error:"), err
  for w in words:
    assert w in err[0], err[0]
