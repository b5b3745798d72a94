"""train.py end to end: a run killed with SIGKILL (and a corrupted newest checkpoint) resumes to
exactly the parameters of an uninterrupted run; two processes (jax.distributed on localhost, 4 CPU
devices each) train in lockstep and match the single-process 8-device run; bad input is clear."""

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from tests import train_e2e_fixtures as fx

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _env(devices: int = 1) -> dict:
  return dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}", JAX_PLATFORMS="cpu",
              PYTHONPATH=str(ROOT))


def _train(config, *extra, devices=1, check=True, **popen):
  cmd = [sys.executable, str(ROOT / "train.py"), "--config", str(config), "--no-progress", *extra]
  if popen:
    return subprocess.Popen(cmd, cwd=ROOT, env=_env(devices), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
  r = subprocess.run(cmd, cwd=ROOT, env=_env(devices), capture_output=True, text=True, timeout=900)
  if check:
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
  return r


def _head_arrays(workdir):
  from safetensors.numpy import load_file
  return load_file(str(pathlib.Path(workdir) / "head" / "model.safetensors"))


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
  root = tmp_path_factory.mktemp("train_e2e")
  paths = fx.make_setup(root)
  base = root / "base"
  cfg = fx.write_config(root / "base.py", model=paths["model"], task=paths["task"], workdir=base)
  _train(cfg, "--regenerate-only")
  assert (base / "regen" / "toy.jsonl").exists()
  return root, paths, base


def _run_dir(setup, name, **overrides):
  root, paths, base = setup
  work = root / name
  fx.copy_regen(base, work)
  return fx.write_config(root / f"{name}.py", model=paths["model"], task=paths["task"], workdir=work,
                         **overrides), work


def test_sigkill_and_corrupt_checkpoint_resume_exactly(setup):
  # 24 steps, killed once step 5 is logged: tiny steps are fast, and with 8 steps the run could
  # finish (and write its head) between the poll and the kill on a quiet machine
  steps = 24
  cfg_a, work_a = _run_dir(setup, "uninterrupted", steps=steps)
  _train(cfg_a)
  cfg_b, work_b = _run_dir(setup, "killed", steps=steps)
  proc = _train(cfg_b, popen=True)
  metrics = work_b / "metrics.jsonl"
  deadline = time.time() + 600
  while time.time() < deadline:   # kill after step 5: checkpoints at 2 and 4 exist
    if metrics.exists() and len(metrics.read_text().splitlines()) >= 5:
      break
    time.sleep(0.02)
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  assert not (work_b / "head").exists()
  saved = sorted(int(p.name) for p in (work_b / "ckpt").iterdir() if p.name.isdigit())
  assert saved and saved[-1] < steps
  newest = work_b / "ckpt" / str(saved[-1])
  for f in newest.rglob("*"):          # a half-written newest checkpoint: its array data is gone
    if f.is_file() and f.name != "_CHECKPOINT_METADATA":
      f.write_bytes(b"")
  r = _train(cfg_b)
  assert "unreadable" in r.stdout + r.stderr
  a, b = _head_arrays(work_a), _head_arrays(work_b)
  assert a.keys() == b.keys()
  for k in a:
    np.testing.assert_array_equal(a[k], b[k], err_msg=k)
  steps_logged = [json.loads(l)["step"] for l in (work_b / "metrics.jsonl").read_text().splitlines()]
  assert steps_logged == list(range(1, steps + 1))   # no duplicate lines from the killed run


def _free_port():
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def test_two_processes_match_single_process_eight_devices(setup):
  cfg_1, work_1 = _run_dir(setup, "single8", mesh=(2, 2, 2), steps=3, save_every=3, head_group=2)
  _train(cfg_1, devices=8)
  cfg_2, work_2 = _run_dir(setup, "multi", mesh=(2, 2, 2), steps=3, save_every=3, head_group=2)
  port = _free_port()
  procs = [_train(cfg_2, "--coordinator", f"localhost:{port}", "--num-processes", "2", "--process-id", str(i),
                  devices=4, popen=True) for i in range(2)]
  outs = [p.communicate(timeout=900)[0] for p in procs]
  assert all(p.returncode == 0 for p in procs), "\n".join(o[-2000:] for o in outs)
  for i, o in enumerate(outs):
    assert f"process {i} reads its own share of each batch" in o, o[-2000:]
  a, b = _head_arrays(work_1), _head_arrays(work_2)
  for k in a:
    np.testing.assert_allclose(a[k], b[k], rtol=1e-5, atol=1e-6, err_msg=k)
  la = [json.loads(l)["loss"] for l in (work_1 / "metrics.jsonl").read_text().splitlines()]
  lb = [json.loads(l)["loss"] for l in (work_2 / "metrics.jsonl").read_text().splitlines()]
  np.testing.assert_allclose(la, lb, rtol=1e-5)


def test_bad_input_errors(setup, tmp_path):
  cfg, work = _run_dir(setup, "bad_mesh", mesh=(3, 1, 1))
  r = _train(cfg, devices=8, check=False)
  assert r.returncode == 2 and "mesh (3, 1, 1)" in r.stderr, r.stderr[-2000:]
  root, paths, base = setup
  rows = (base / "regen" / "toy.jsonl").read_text().splitlines()
  broken = [json.loads(l) for l in rows]
  broken[0]["images"] = [str(tmp_path / "gone.png")]
  work = root / "bad_rows"
  (work / "regen").mkdir(parents=True)
  (work / "regen" / "toy.jsonl").write_text("".join(json.dumps(r) + "\n" for r in broken))
  cfg = fx.write_config(root / "bad_rows.py", model=paths["model"], task=paths["task"], workdir=work,
                        on_bad_record="raise", steps=1)
  r = _train(cfg, check=False)
  assert r.returncode == 2 and "'p0'" in r.stderr and "gone.png" in r.stderr, r.stderr[-2000:]
  cfg = fx.write_config(root / "bad_rows_skip.py", model=paths["model"], task=paths["task"], workdir=work,
                        on_bad_record="skip", steps=1)
  r = _train(cfg)
  assert "skipping regenerated row id 'p0'" in r.stdout + r.stderr


def test_exported_head_decodes_losslessly_through_decode_py(setup):
  """The exported DFlash-format head is what `decode.py --head` reads."""
  from glance_jax.cli import decode as cli
  root, paths, _ = setup
  work = root / "uninterrupted"
  if not (work / "head" / "config.json").exists():
    pytest.skip("needs the uninterrupted run of test_sigkill_and_corrupt_checkpoint_resume_exactly")
  base = ["--model", str(paths["model"]), "--prompt", "what color is the square", "--max-new-tokens", "10"]
  ar = cli.main(base + ["--method", "ar"])
  gl = cli.main(base + ["--method", "glance", "--budget", "15", "--head", str(work / "head")])
  assert gl["tokens"] == ar["tokens"]
  # beside it, the rows' response-token counts: a draft vocabulary of any size decodes losslessly
  import numpy as np
  from glance_jax.head import draft_vocab as dv
  from glance_jax.train.regenerate import read_regenerated
  counts = dv.load_counts(work / "head", 512)
  rows = [r for f in sorted((work / "regen").glob("*.jsonl")) for r in read_regenerated(f)]
  assert 0 < counts.sum() <= sum(len(r["response_ids"]) for r in rows)
  assert set(np.flatnonzero(counts)) <= {t for r in rows for t in r["response_ids"]}
  small = cli.main(base + ["--method", "glance", "--budget", "15", "--head", str(work / "head"), "--draft-vocab", "64"])
  assert small["tokens"] == ar["tokens"]
