"""train.py trains the EAGLE-3 rival end to end (configs/train_eagle3_tiny.py, drafter="eagle3"):

  run        the CLI main on a tiny random target and its regenerated rows: N steps, the loss falls,
             the exported midlayer head loads with load_eagle3 against the target and decodes
             losslessly with eagle3-chain (tokens == AR greedy), text and image rows in one batch
  vocabulary <workdir>/eagle3_vocab.npz equals the K most frequent response tokens of the rows
             (counted here from the regenerated file, independently of the code), its coverage is
             returned, the head carries the same d2t / t2d, and a rerun whose rows give another
             vocabulary stops with an error naming the file
  warm start head_init=<a saved head> starts from its weights: at lr 0 the export is that head to
             the bit, and the first step's loss is the saved head's, not a random one's; a head of
             another draft vocabulary is refused, naming the file
  resume     a run killed with SIGKILL resumes from its orbax checkpoint to exactly the parameters
             of the uninterrupted run (as tests/test_train_e2e.py asserts for the GLANCE head)
  errors     a bad drafter name is a one-line error naming the key
"""

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from glance_jax.config import tiny_config
from glance_jax.train import cli

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "train_eagle3_tiny.py"
STEPS, K = 12, 32
# Shorter than the config's answers and rows (the same recipe, less CPU time).
COMMON = ["seq_len=128", "regen_max_new_tokens=32", f"steps={STEPS}", "save_every=4", "log_every=1",
          f"eagle3_draft_vocab={K}"]


def _args(root, workdir, *extra):
  return ["--no-progress", "--config", str(CONFIG), f"root={root}", f"workdir={workdir}", *COMMON, *extra]


def _metrics(workdir):
  return [json.loads(l) for l in (pathlib.Path(workdir) / "metrics.jsonl").read_text().splitlines()]


def _head_arrays(workdir):
  from safetensors.numpy import load_file
  return load_file(str(pathlib.Path(workdir) / "eagle3_head" / "model.safetensors"))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  """The uninterrupted run, after the target's answers are regenerated (<root>/regen, shared)."""
  root = tmp_path_factory.mktemp("eagle3_e2e")
  assert cli.main(["--config", str(CONFIG), f"root={root}", *COMMON, "--regenerate-only"]) is None
  out = cli.main(_args(root, root / "a"))
  return root, out


def test_train_py_runs_the_loss_falls_and_the_head_is_lossless(trained):
  import jax.numpy as jnp
  from glance_jax.data.records import read_task_file
  from glance_jax.decode.generate import generate
  from glance_jax.eagle3 import load_eagle3
  from glance_jax.qwen3_vl.inputs import Processor, prepare_inputs
  from glance_jax.qwen3_vl.target import load_target
  root, out = trained
  assert out["steps"] == STEPS and out["resumed_from"] == 0
  assert out["export"] == str(root / "a" / "eagle3_head")
  metrics = _metrics(root / "a")
  losses, acc = [m["loss"] for m in metrics], [m["acc_0"] for m in metrics]
  assert len(losses) == STEPS and all(np.isfinite(losses))
  # The soft CE has the target's entropy as its floor (a random target's is high), so the loss
  # falls by a few percent only; the first step's agreement with the target's argmax rises clearly.
  assert np.mean(losses[-3:]) < 0.97 * losses[0], losses
  assert np.mean(acc[-3:]) > acc[0] + 0.1, acc
  assert {"loss_0", "acc_6", "n_0", "grad_norm", "lr"} <= set(metrics[-1])

  target = load_target(root / "tiny-random-qwen3-vl", dtype=jnp.float32)
  head = load_eagle3(out["export"], target.config, dtype=jnp.float32)
  assert head.cfg.draft_vocab_size == K and head.cfg.aux_layer_ids == (1, 1, 0)   # EAGLE-3's default at L = 4
  record = read_task_file(root / "data" / "synthetic_train.jsonl", on_error="raise")[0]
  inputs = prepare_inputs(Processor.from_pretrained(str(target.path)),
                          ["what color is the square", record.prompt], [None, list(record.images)])
  ar = generate(target, inputs, method="ar", max_new_tokens=10)
  e3 = generate(target, inputs, head=head, method="eagle3-chain", max_new_tokens=10)
  for a, b in zip(ar.tokens, e3.tokens):
    np.testing.assert_array_equal(a, b)


def _independent_vocab(root):
  """The K most frequent response tokens of the usable rows (as driver.valid_rows keeps them, cut at
  seq_len = 128), ties to the lower id, restated from the regenerated file."""
  cfg = tiny_config()
  vis = {cfg.image_token_id, cfg.video_token_id}
  counts = np.zeros(cfg.text.vocab_size, np.int64)
  for line in (root / "regen" / "synthetic_train.jsonl").read_text().splitlines():
    row = json.loads(line)
    if not row["response_ids"] or vis & set(row["response_ids"]):
      continue
    for t in row["response_ids"][: 128 - len(row["prompt_ids"])]:
      counts[t] += 1
  order = sorted(range(len(counts)), key=lambda i: (-counts[i], i))[:K]
  used = np.sort(np.asarray(order))
  return used, counts


def test_draft_vocabulary_file_and_coverage(trained):
  root, out = trained
  used, counts = _independent_vocab(root)
  path = root / "a" / "eagle3_vocab.npz"
  assert out["vocab"]["path"] == str(path) and out["vocab"]["size"] == K
  with np.load(path) as f:
    np.testing.assert_array_equal(f["d2t"] + np.arange(K), used)
    np.testing.assert_array_equal(np.flatnonzero(f["t2d"]), used)
    np.testing.assert_array_equal(f["counts"], counts)
  want = counts[used].sum() / counts.sum()
  assert 0 < want < 1     # K is below the rows' distinct tokens: the coverage means something
  assert out["vocab"]["coverage"] == pytest.approx(want)
  head = _head_arrays(root / "a")
  np.testing.assert_array_equal(head["d2t"] + np.arange(K), used)
  np.testing.assert_array_equal(np.flatnonzero(head["t2d"]), used)
  # Another vocabulary in the same workdir (here: another K) is refused before any step runs.
  with pytest.raises(ValueError, match="eagle3_vocab.npz"):
    cli.main(_args(root, root / "a", f"eagle3_draft_vocab={K // 2}"))


def test_head_init_starts_from_the_saved_head(trained):
  root, out = trained
  warm = cli.main(_args(root, root / "warm", f"head_init={out['export']}", "steps=2", "lr=0.0"))
  saved, again = _head_arrays(root / "a"), _head_arrays(root / "warm")
  assert saved.keys() == again.keys()
  for k in saved:
    np.testing.assert_array_equal(saved[k], again[k], err_msg=k)
  first = _metrics(root / "a")[0]["loss"]
  assert _metrics(root / "warm")[0]["loss"] < 0.99 * first     # not a random head's first loss
  assert warm["steps"] == 2
  # A head whose draft vocabulary is not this run's: its lm_head rows stand for other tokens.
  with pytest.raises(Exception, match="draft vocabulary|draft_vocab_size") as e:
    cli.main(_args(root, root / "other", f"head_init={out['export']}", f"eagle3_draft_vocab={K // 2}"))
  assert "eagle3_head" in str(e.value)


def test_sigkill_resumes_to_the_uninterrupted_params(trained):
  root, _ = trained
  work = root / "b"
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
  proc = subprocess.Popen([sys.executable, str(ROOT / "train.py"), *_args(root, work)], cwd=ROOT, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  metrics = work / "metrics.jsonl"
  deadline = time.time() + 600
  while time.time() < deadline and proc.poll() is None:   # kill after step 6: checkpoint 4 exists
    if metrics.exists() and len(metrics.read_text().splitlines()) >= 6:
      break
    time.sleep(0.02)
  assert proc.poll() is None, proc.communicate()[0][-3000:]
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  assert not (work / "eagle3_head").exists()
  saved = sorted(int(p.name) for p in (work / "ckpt").iterdir() if p.name.isdigit())
  assert saved and saved[-1] < STEPS
  out = cli.main(_args(root, work))
  assert out["resumed_from"] == saved[-1] > 0
  a, b = _head_arrays(root / "a"), _head_arrays(work)
  assert a.keys() == b.keys()
  for k in a:
    np.testing.assert_array_equal(a[k], b[k], err_msg=k)
  assert [m["step"] for m in _metrics(work)] == list(range(1, STEPS + 1))   # no duplicates from the killed run


def test_bad_drafter_name_is_one_line_naming_the_key(trained, monkeypatch, capsys):
  root, _ = trained
  monkeypatch.setattr(sys, "argv", ["train.py", *_args(root, root / "bad", "drafter=eagle")])
  with pytest.raises(SystemExit) as e:
    cli.cli_main()
  err = capsys.readouterr().err.strip()
  assert e.value.code == 2 and len(err.splitlines()) == 1, err
  assert "drafter" in err and "'eagle'" in err and "'eagle3'" in err, err
