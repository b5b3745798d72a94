"""train.py trains a parent correction end to end (configs/train_parent_tiny.py, drafter="parent"):
on a tiny random target's regenerated rows with a frozen random head, the correction's loss falls
and its accuracy passes the head's own, the frozen head is exported unchanged with the correction
beside it, `glance-N[parent]` decodes losslessly with what was exported, a rerun resumes from the
last checkpoint, and the joint option trains the head too."""

import json
import pathlib

import numpy as np
import pytest

from glance_jax.train import cli

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "train_parent_tiny.py"
STEPS = 16
COMMON = ["seq_len=128", "regen_max_new_tokens=32", f"steps={STEPS}", "save_every=8", "log_every=1", "lr=1e-2",
          "warmup_frac=0"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  import jax.numpy as jnp
  from glance_jax import demo
  from glance_jax.bench import random_models
  from glance_jax.head import save_head
  from glance_jax.qwen3_vl.target import load_target
  root = tmp_path_factory.mktemp("parent_e2e")
  target = load_target(demo.default_checkpoint(root), dtype=jnp.float32)
  head = random_models.make_head(target, 3, 2)
  save_head(root / "head", head.config, head.params)
  args = ["--no-progress", "--config", str(CONFIG), f"root={root}", f"workdir={root / 'a'}", *COMMON]
  assert cli.main(["--config", str(CONFIG), f"root={root}", *COMMON, "--regenerate-only"]) is None
  return root, args, cli.main(args), target


def test_loss_falls_head_frozen_and_export_is_lossless(trained):
  import jax.numpy as jnp
  from safetensors.numpy import load_file
  from glance_jax.bench.engine import generate
  from glance_jax.head import Head
  from glance_jax.head import parent_correction as pc
  from tests import decode_fixtures as fx
  root, _, out, target = trained
  assert out["steps"] == STEPS and out["export"] == str(root / "a" / "head")
  m = [json.loads(l) for l in (root / "a" / "metrics.jsonl").read_text().splitlines()]
  losses = [x["loss"] for x in m]
  assert len(m) == STEPS and np.mean(losses[-3:]) < 0.9 * losses[0], losses
  assert np.mean([x["acc"] for x in m[-3:]]) > np.mean([x["acc_base"] for x in m[-3:]])
  assert {"acc_off", "acc_off_base", "n_off", "grad_norm", "lr"} <= set(m[-1])
  a, b = load_file(str(root / "head" / "model.safetensors")), load_file(str(root / "a" / "head" / "model.safetensors"))
  assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)     # the head stayed frozen
  head = Head.load(out["export"], target=target, dtype=jnp.float32)
  assert head.correction is not None and head.correction.config.rank == 16
  assert np.abs(np.asarray(head.correction.params["out"].get_value())).max() > 0   # trained off zero
  assert json.loads((root / "a" / "head" / pc.FILE).read_text())["meta"]["steps"] == STEPS
  b = fx.batch(target.config, seed=1, rows=4, with_images=True)
  ref = target.generate_greedy(b, 24, stop_tokens=())[0]
  res = generate(target, b, head=head.with_parent_correction(), method="glance", budget=31, max_new_tokens=24,
                 stop_tokens=())
  assert [list(t) for t in res.tokens] == [list(r[r >= 0]) for r in ref]


def test_rerun_resumes_and_joint_trains_the_head(trained):
  from safetensors.numpy import load_file
  root, args, _, _ = trained
  again = cli.main(args)
  assert again["resumed_from"] == STEPS
  joint = cli.main(["--no-progress", "--config", str(CONFIG), f"root={root}", f"workdir={root / 'j'}",
                    *COMMON[:2], *COMMON[-2:], "steps=4", "save_every=4", "log_every=1", "parent_joint=true"])
  m = [json.loads(l) for l in (root / "j" / "metrics.jsonl").read_text().splitlines()]
  assert "head_acc" in m[-1] and joint["steps"] == 4
  a, b = load_file(str(root / "head" / "model.safetensors")), load_file(str(root / "j" / "head" / "model.safetensors"))
  assert any(not np.array_equal(a[k], b[k]) for k in a)                         # the head trained


def test_path_bags_sum_each_slots_strict_ancestors_above_its_parent():
  import jax.numpy as jnp
  from glance_jax.train.parent_train import path_bags
  emb = jnp.arange(2 * 5 * 3, dtype=jnp.float32).reshape(2, 5, 3)        # [rows, Bk, D]
  bags = np.asarray(path_bags(emb))
  e = np.asarray(emb)
  for k in range(5):
    want = e[:, : max(k - 1, 0)].sum(1)                                  # slots 0..k-2
    np.testing.assert_array_equal(bags[:, k], want)


def test_a_path_reading_correction_trains_and_decodes_losslessly(trained):
  """parent_path=true: the loss falls, the export says path, and its trees are lossless."""
  import jax.numpy as jnp
  from glance_jax.bench.engine import generate
  from glance_jax.head import Head
  from tests import decode_fixtures as fx
  root, _, _, target = trained
  out = cli.main(["--no-progress", "--config", str(CONFIG), f"root={root}", f"workdir={root / 'p'}", *COMMON,
                  "parent_path=true"])
  m = [json.loads(l) for l in (root / "p" / "metrics.jsonl").read_text().splitlines()]
  assert np.mean([x["loss"] for x in m[-3:]]) < 0.9 * m[0]["loss"]
  head = Head.load(out["export"], target=target, dtype=jnp.float32)
  assert head.correction.config.path
  b = fx.batch(target.config, seed=2, rows=4, with_images=True)
  ref = target.generate_greedy(b, 24, stop_tokens=())[0]
  res = generate(target, b, head=head.with_parent_correction(), method="glance", budget=15, max_new_tokens=24,
                 stop_tokens=())
  assert [list(t) for t in res.tokens] == [list(r[r >= 0]) for r in ref]


def test_frozen_without_a_head_is_an_error(tmp_path):
  from glance_jax.train.config import load_config
  with pytest.raises(ValueError, match="set head_init=DIR"):
    load_config(CONFIG, [f"root={tmp_path}", "head_init=", "steps=1"])


def test_the_testbed_recipe_fits_the_target_greedy_answers_with_the_path():
  """configs/train_parent_testbed.py: greedy rows of its own (not the head's drawn ones), path term on."""
  from glance_jax.train.config import load_config
  cfg = load_config(ROOT / "configs" / "train_parent_testbed.py", ["suite=v5"])
  assert cfg.drafter == "parent" and cfg.parent_path and cfg.regen_temperature == 0.0
  assert pathlib.Path(cfg.regen_dir).name == "parent_regen" and cfg.regen_sampling.temperature == 0.0
