"""decode.py runs end to end on the embedded default and on a checkpoint directory."""

import json

import numpy as np
import pytest

from glance_jax.decode import cli
from glance_jax.testing.checkpoint import make_tiny_checkpoint


def test_decode_default_runs(tmp_path, capsys):
  out = tmp_path / "r.json"
  res = cli.main(["--max-new-tokens", "8", "--json", str(out)])
  assert res["new_tokens"] >= 1
  assert "new_tokens=" in capsys.readouterr().out
  assert json.loads(out.read_text())["tokens"] == res["tokens"]


def test_decode_with_model_and_image_file(tmp_path):
  from glance_jax.demo import default_image
  ckpt = make_tiny_checkpoint(tmp_path / "ckpt", seed=2, max_shard_bytes=200_000)
  img = tmp_path / "x.png"
  default_image(seed=3).save(img)
  res = cli.main(["--model", str(ckpt), "--image", str(img), "--image", str(img), "--prompt", "Compare.",
                  "--max-new-tokens", "5"])
  assert len(res["tokens"]) == res["new_tokens"] <= 5
  assert np.all(np.asarray(res["tokens"]) >= 0)


def test_decode_missing_image_is_a_clear_error(tmp_path):
  with pytest.raises(ValueError, match="nope.png"):
    cli.main(["--image", str(tmp_path / "nope.png"), "--max-new-tokens", "2"])
