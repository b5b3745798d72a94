"""Tests for glance_jax.io: round trips, header validation, errors, placement."""

from __future__ import annotations

import gc
import json
import os
import pathlib
import subprocess
import sys
import textwrap
import weakref

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from safetensors import safe_open

from glance_jax.io import (CheckpointError, TensorEntry, check_keys, index_checkpoint,
                           load_tensors, resolve_checkpoint_dir, save_tensors, tensor_nbytes)

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]


def _tensors() -> dict[str, object]:
  """Mixed dtypes, jax and numpy, including a scalar and an empty tensor."""
  rng = np.random.default_rng(0)
  return {
      "model.embed.weight": rng.standard_normal((16, 8)).astype(np.float32),
      "model.layers.0.attn.q.weight": jnp.asarray(rng.standard_normal((8, 8)), jnp.bfloat16),
      "model.layers.0.norm.weight": rng.standard_normal((8,)).astype(ml_dtypes.bfloat16),
      "model.layers.1.mlp.up.weight": rng.standard_normal((24, 8)).astype(np.float16),
      "model.ids": np.arange(-5, 7, dtype=np.int32).reshape(3, 4),
      "model.bytes": np.arange(10, dtype=np.uint8),
      "model.mask": np.array([True, False, True]),
      "model.scale": np.float32(0.5),
      "model.empty": np.zeros((0, 3), np.float32),
  }


def _targets(tensors) -> dict[str, jax.ShapeDtypeStruct]:
  return {k: jax.ShapeDtypeStruct(np.shape(v), np.asarray(v).dtype) for k, v in tensors.items()}


def _assert_same(loaded: dict, tensors: dict) -> None:
  assert list(loaded) == list(tensors)
  for key, value in tensors.items():
    expected = np.asarray(value)
    got = np.asarray(loaded[key])
    assert got.dtype == expected.dtype, key
    assert got.shape == expected.shape, key
    np.testing.assert_array_equal(got, expected, err_msg=key)


def _error(fn, *args, **kwargs) -> str:
  with pytest.raises(CheckpointError) as info:
    fn(*args, **kwargs)
  message = str(info.value)
  assert "\n" not in message, message
  return message


# ------------------------------------------------------------------------------------------------
# Round trips.


def test_round_trip_single_file(tmp_path):
  tensors = _tensors()
  written = save_tensors(tmp_path, tensors)
  assert written == [tmp_path / "model.safetensors"]
  assert sorted(p.name for p in tmp_path.iterdir()) == ["model.safetensors"]  # No temp leftovers.

  entries = index_checkpoint(tmp_path)
  assert set(entries) == set(tensors)
  q = entries["model.layers.0.attn.q.weight"]
  assert (q.shape, q.dtype, q.nbytes) == ((8, 8), "BF16", 128)
  assert entries["model.scale"].shape == () and entries["model.ids"].dtype == "I32"
  assert tensor_nbytes(entries) == sum(np.asarray(v).nbytes for v in tensors.values())

  # The official reader agrees, byte for byte, and sees the metadata transformers requires.
  with safe_open(str(tmp_path / "model.safetensors"), framework="numpy") as f:
    assert f.metadata() == {"format": "pt"}
    for key, value in tensors.items():
      np.testing.assert_array_equal(f.get_tensor(key), np.asarray(value))

  _assert_same(load_tensors(entries, _targets(tensors)), tensors)


def test_round_trip_sharded_with_index(tmp_path):
  tensors = _tensors()
  total = sum(np.asarray(v).nbytes for v in tensors.values())
  written = save_tensors(tmp_path, tensors, max_shard_bytes=300, metadata={"note": "x"})
  shards = sorted(p.name for p in tmp_path.glob("*.safetensors"))
  n = len(shards)
  assert n >= 3
  assert shards == [f"model-{i:05d}-of-{n:05d}.safetensors" for i in range(1, n + 1)]
  assert written[-1] == tmp_path / "model.safetensors.index.json"

  index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
  assert index["metadata"]["total_size"] == total
  assert set(index["weight_map"]) == set(tensors)
  assert set(index["weight_map"].values()) == set(shards)

  entries = index_checkpoint(tmp_path)
  assert {e.file.name for e in entries.values()} == set(shards)
  for key, entry in entries.items():
    assert entry.file.name == index["weight_map"][key]
  with safe_open(str(tmp_path / shards[0]), framework="numpy") as f:
    assert f.metadata() == {"format": "pt", "note": "x"}
  _assert_same(load_tensors(entries, _targets(tensors)), tensors)

  # Re-saving as a single file removes the stale shards and index, so readers cannot mix them.
  save_tensors(tmp_path, tensors)
  assert sorted(p.name for p in tmp_path.iterdir()) == ["model.safetensors"]


def test_load_casts_and_transforms(tmp_path):
  w = np.arange(12, dtype=np.float32).reshape(3, 4)  # (out, in)
  save_tensors(tmp_path, {"w": w, "b": np.ones((4,), np.float32),
                          "i": np.arange(3, dtype=np.int64)})
  entries = index_checkpoint(tmp_path)
  out = load_tensors(
      entries,
      {"w": jax.ShapeDtypeStruct((4, 3), jnp.bfloat16),
       "b": jax.ShapeDtypeStruct((4,), jnp.bfloat16),
       "i": jax.ShapeDtypeStruct((3,), jnp.int32)},
      transforms={"w": lambda x: x.T})
  assert out["w"].dtype == jnp.bfloat16 and out["w"].shape == (4, 3)
  np.testing.assert_array_equal(np.asarray(out["w"], np.float32), w.T)
  assert out["i"].dtype == jnp.int32

  # A transform that yields the wrong shape names the key and both shapes.
  msg = _error(load_tensors, entries, {"w": jax.ShapeDtypeStruct((4, 3), jnp.float32)},
               transforms={"w": lambda x: x.reshape(2, 6)})
  assert "'w'" in msg and "(2, 6)" in msg and "(4, 3)" in msg


def test_load_rejects_bad_dtypes(tmp_path):
  save_tensors(tmp_path, {"f": np.ones((2,), np.float32), "big": np.array([1, 300], np.int32)})
  entries = index_checkpoint(tmp_path)
  msg = _error(load_tensors, entries, {"f": jax.ShapeDtypeStruct((2,), jnp.int32)})
  assert "'f'" in msg and "float32" in msg and "int32" in msg
  msg = _error(load_tensors, entries, {"big": jax.ShapeDtypeStruct((2,), jnp.int8)})
  assert "'big'" in msg and "300" in msg and "int8" in msg


def test_load_plan_problems_reported_together_before_reading(tmp_path, monkeypatch):
  save_tensors(tmp_path, {"a": np.ones((2, 3), np.float32), "b": np.ones((4,), np.float32)})
  entries = index_checkpoint(tmp_path)
  opened = []
  monkeypatch.setattr("safetensors.safe_open", lambda *a, **k: opened.append(a) or 1 / 0)
  msg = _error(load_tensors, entries, {
      "a": jax.ShapeDtypeStruct((3, 2), jnp.float32),  # misshaped
      "b": jax.ShapeDtypeStruct((4,), jnp.int32),  # float into int
      "c": jax.ShapeDtypeStruct((1,), jnp.float32),  # absent
  }, shardings={"typo": jax.sharding.SingleDeviceSharding(jax.devices()[0])})
  assert "4 problems" in msg
  assert "'a'" in msg and "(2, 3)" in msg and "(3, 2)" in msg
  assert "'b'" in msg and "'c'" in msg and "'typo'" in msg
  assert not opened  # Failed from the headers alone.


def test_load_reads_one_tensor_at_a_time(tmp_path, monkeypatch):
  """Spy on the reader: each file opened once, and no earlier host tensor alive at each read."""
  tensors = {f"t{i}": np.full((64, 32), i, np.float32) for i in range(6)}
  save_tensors(tmp_path, tensors, max_shard_bytes=3 * 64 * 32 * 4)  # 2 shards x 3 tensors.
  entries = index_checkpoint(tmp_path)
  assert len({e.file for e in entries.values()}) == 2

  events: list[tuple[str, str]] = []
  alive: list[weakref.ref] = []
  import safetensors  # pylint: disable=import-outside-toplevel
  real = safetensors.safe_open

  class SpyHandle:
    def __init__(self, path, framework):
      assert framework == "numpy"
      self._path = pathlib.Path(path).name
      self._inner = real(path, framework=framework)

    def __enter__(self):
      events.append(("open", self._path))
      self._inner.__enter__()
      return self

    def __exit__(self, *exc):
      events.append(("close", self._path))
      return self._inner.__exit__(*exc)

    def get_slice(self, key):
      gc.collect()
      still_alive = [r for r in alive if r() is not None]
      assert not still_alive, f"{len(still_alive)} earlier host tensors alive while reading {key}"
      events.append(("get", key))
      return SpySlice(self._inner.get_slice(key))

  class SpySlice:
    def __init__(self, inner):
      self._inner = inner

    def __getitem__(self, index):
      array = self._inner[index]
      alive.append(weakref.ref(array))
      return array

  real_place = jax.make_array_from_callback

  def spy_place(shape, sharding, callback, *args, **kwargs):
    events.append(("place", events[-1][1]))
    return real_place(shape, sharding, callback, *args, **kwargs)

  monkeypatch.setattr(safetensors, "safe_open", SpyHandle)
  monkeypatch.setattr(jax, "make_array_from_callback", spy_place)
  out = load_tensors(entries, {k: jax.ShapeDtypeStruct((64, 32), jnp.bfloat16) for k in tensors})
  for i in range(6):
    assert float(out[f"t{i}"][0, 0]) == i

  opens = [name for kind, name in events if kind == "open"]
  assert sorted(opens) == sorted({e.file.name for e in entries.values()})  # Each file once.
  reads = [(kind, key) for kind, key in events if kind in ("get", "place")]
  assert reads == [pair for k in sorted(tensors, key=lambda k: entries[k].file.name)
                   for pair in (("get", k), ("place", k))]
  # Every read happens inside its own file's open/close.
  current = None
  for kind, name in events:
    if kind == "open":
      current = name
    elif kind == "close":
      current = None
    else:
      assert entries[name].file.name == current


# ------------------------------------------------------------------------------------------------
# Header / index validation.


@pytest.mark.parametrize("cut", [1, 100, "all_but_4"])
def test_truncated_file(tmp_path, cut):
  save_tensors(tmp_path, {"a": np.ones((32, 32), np.float32), "b": np.ones((8,), np.float16)})
  path = tmp_path / "model.safetensors"
  size = path.stat().st_size
  new_size = 4 if cut == "all_but_4" else size - cut
  with open(path, "r+b") as f:
    f.truncate(new_size)
  msg = _error(index_checkpoint, tmp_path)
  assert str(path) in msg and "truncated" in msg and str(new_size) in msg
  if cut != "all_but_4":
    assert str(size) in msg  # The expected size too.


def test_truncated_shard_named(tmp_path):
  save_tensors(tmp_path, {f"t{i}": np.ones((16,), np.float32) for i in range(4)},
               max_shard_bytes=128)
  shard = tmp_path / "model-00002-of-00002.safetensors"
  with open(shard, "r+b") as f:
    f.truncate(shard.stat().st_size - 3)
  msg = _error(index_checkpoint, tmp_path)
  assert "model-00002-of-00002.safetensors" in msg and "truncated" in msg
  assert "00001-of" not in msg


def test_unparsable_header(tmp_path):
  junk = b"{not json"
  (tmp_path / "model.safetensors").write_bytes(len(junk).to_bytes(8, "little") + junk)
  msg = _error(index_checkpoint, tmp_path)
  assert "model.safetensors" in msg and "unparsable" in msg

  (tmp_path / "model.safetensors").write_bytes(b"PK\x03\x04 this is a zip file, not safetensors")
  msg = _error(index_checkpoint, tmp_path)
  assert "model.safetensors" in msg and "not a safetensors file" in msg

  entry = '{"dtype":"F32","shape":[1],"data_offsets":[0,4]}'
  twice = f'{{"w":{entry},"w":{entry}}}'.encode()
  (tmp_path / "model.safetensors").write_bytes(len(twice).to_bytes(8, "little") + twice + bytes(4))
  msg = _error(index_checkpoint, tmp_path)
  assert "model.safetensors" in msg and "'w' appears twice" in msg


def test_header_size_mismatch_names_key(tmp_path):
  header = json.dumps({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 12]}}).encode()
  (tmp_path / "model.safetensors").write_bytes(
      len(header).to_bytes(8, "little") + header + bytes(12))
  msg = _error(index_checkpoint, tmp_path)
  assert "'w'" in msg and "(2, 2)" in msg and "16" in msg


def test_index_missing_shard(tmp_path):
  save_tensors(tmp_path, {f"t{i}": np.ones((16,), np.float32) for i in range(4)},
               max_shard_bytes=128)
  (tmp_path / "model-00001-of-00002.safetensors").unlink()
  msg = _error(index_checkpoint, tmp_path)
  assert "model.safetensors.index.json" in msg and "model-00001-of-00002.safetensors" in msg
  assert "missing" in msg


def test_index_maps_key_to_wrong_shard_and_unlisted_key(tmp_path):
  save_tensors(tmp_path, {f"t{i}": np.ones((16,), np.float32) for i in range(4)},
               max_shard_bytes=128)
  index_path = tmp_path / "model.safetensors.index.json"
  index = json.loads(index_path.read_text())
  index["weight_map"]["t0"] = "model-00002-of-00002.safetensors"  # t0 lives in shard 1.
  index["weight_map"]["ghost"] = "model-00001-of-00002.safetensors"
  index_path.write_text(json.dumps(index))
  msg = _error(index_checkpoint, tmp_path)
  assert "'t0'" in msg and "does not contain it" in msg
  assert "'ghost'" in msg


def test_duplicate_keys_across_shards(tmp_path):
  for i in (1, 2):
    sub = tmp_path / f"s{i}"
    save_tensors(sub, {"dup": np.full((2,), i, np.float32), f"only{i}": np.ones((1,), np.float32)})
    (sub / "model.safetensors").rename(tmp_path / f"model-0000{i}-of-00002.safetensors")
  weight_map = {"dup": "model-00001-of-00002.safetensors",
                "only1": "model-00001-of-00002.safetensors",
                "only2": "model-00002-of-00002.safetensors"}
  (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
  msg = _error(index_checkpoint, tmp_path)
  assert "duplicate key 'dup'" in msg and "00001-of" in msg and "00002-of" in msg


def test_no_safetensors_file(tmp_path):
  (tmp_path / "config.json").write_text("{}")
  (tmp_path / "adapter.safetensors").write_bytes(b"")
  msg = _error(index_checkpoint, tmp_path)
  assert str(tmp_path) in msg and "model.safetensors" in msg and "index.json" in msg
  assert "adapter.safetensors" in msg
  assert "not found" in _error(index_checkpoint, tmp_path / "nope")


# ------------------------------------------------------------------------------------------------
# check_keys.


def test_check_keys_reports_everything_in_one_line():
  expected = {"a": (2, 3), "b": (4,), "c": (5,), "d": (1, 1)}
  found = {"a": (3, 2), "b": (4,), "x": (7,), "y": (8,)}
  msg = _error(check_keys, found, expected, where="qwen3_vl text")
  assert msg.startswith("qwen3_vl text:")
  assert "2 missing" in msg and "'c'" in msg and "'d'" in msg
  assert "2 unexpected" in msg and "'x'" in msg and "'y'" in msg
  assert "1 misshaped" in msg and "'a' (3, 2) vs expected (2, 3)" in msg
  assert "'b'" not in msg
  assert check_keys({"a": (2, 3)}, {"a": [2, 3]}, where="w") is None


def test_check_keys_accepts_entries_and_truncates_long_lists(tmp_path):
  save_tensors(tmp_path, {"a": np.ones((2, 3), np.float32)})
  entries = index_checkpoint(tmp_path)
  assert check_keys(entries, {"a": jax.ShapeDtypeStruct((2, 3), jnp.float32)}, where="w") is None
  expected = {f"layer.{i}.weight": (4,) for i in range(50)}
  msg = _error(check_keys, {}, expected, where="big")
  assert "50 missing" in msg and "and 42 more" in msg and len(msg) < 600


# ------------------------------------------------------------------------------------------------
# Resolving directories and hub ids.


def test_resolve_local_paths(tmp_path, monkeypatch):
  assert resolve_checkpoint_dir(str(tmp_path)) == tmp_path
  monkeypatch.chdir(tmp_path)
  (tmp_path / "ckpt").mkdir()
  assert resolve_checkpoint_dir("ckpt") == pathlib.Path("ckpt")

  def boom(*args, **kwargs):
    raise AssertionError("a local-looking path must never reach the hub")

  monkeypatch.setattr("huggingface_hub.snapshot_download", boom)
  for path in (str(tmp_path / "missing"), "./missing", "~/surely/missing/ckpt", "a/b/c"):
    msg = _error(resolve_checkpoint_dir, path)
    assert "checkpoint directory not found" in msg and path in msg
  (tmp_path / "model.safetensors").write_bytes(b"")
  msg = _error(resolve_checkpoint_dir, str(tmp_path / "model.safetensors"))
  assert "not found" in msg and "is a file" in msg


def _run_python(code: str, **env) -> subprocess.CompletedProcess:
  full_env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "JAX_PLATFORMS": "cpu", **env}
  return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full_env,
                        capture_output=True, text=True, timeout=120, check=False)


def test_resolve_unknown_hub_id_offline(tmp_path):
  repo_id = "glance-nonexistent-org/no-such-model-xyz"
  result = _run_python(f"""
      from glance_jax.io import CheckpointError, resolve_checkpoint_dir
      try:
        resolve_checkpoint_dir({repo_id!r})
      except CheckpointError as e:
        print("ERROR:", e)
      """, HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"))
  assert result.returncode == 0, result.stderr
  line = [l for l in result.stdout.splitlines() if l.startswith("ERROR:")]
  assert len(line) == 1, result.stdout + result.stderr
  assert repo_id in line[0] and "not reachable" in line[0] and "does not exist" in line[0]


# ------------------------------------------------------------------------------------------------
# Sharded placement on 8 fake CPU devices.


def test_sharded_placement_on_2x4_mesh(tmp_path):
  result = _run_python(f"""
      import numpy as np, jax, jax.numpy as jnp
      from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
      from glance_jax.io import index_checkpoint, load_tensors, save_tensors
      assert jax.device_count() == 8, jax.devices()
      mesh = Mesh(np.array(jax.devices()).reshape(2, 4), ("data", "model"))
      w = np.arange(8 * 12, dtype=np.float32).reshape(8, 12)
      v = np.arange(6 * 16, dtype=np.float32).reshape(6, 16)  # stored (out, in); loaded as v.T
      save_tensors({str(tmp_path)!r},
                   {{"w": w, "v": v.astype(jnp.bfloat16), "s": np.ones((5,), np.float32)}})
      specs = {{"w": P("data", "model"), "v": P("model", None), "s": P()}}
      shardings = {{k: NamedSharding(mesh, p) for k, p in specs.items()}}
      out = load_tensors(index_checkpoint({str(tmp_path)!r}),
                         {{"w": jax.ShapeDtypeStruct((8, 12), jnp.float32),
                           "v": jax.ShapeDtypeStruct((16, 6), jnp.bfloat16),
                           "s": jax.ShapeDtypeStruct((5,), jnp.float32)}},
                         shardings=shardings, transforms={{"v": lambda x: x.T}})
      expected = {{"w": w, "v": v.T, "s": np.ones((5,), np.float32)}}
      shard_shapes = {{"w": (4, 3), "v": (4, 6), "s": (5,)}}
      for k, arr in out.items():
        assert arr.sharding == shardings[k], (k, arr.sharding)
        assert len(arr.addressable_shards) == 8, k
        assert len({{s.device for s in arr.addressable_shards}}) == 8, k
        for s in arr.addressable_shards:
          assert s.data.shape == shard_shapes[k], (k, s.data.shape)
          np.testing.assert_array_equal(np.asarray(s.data, np.float32), expected[k][s.index])
        np.testing.assert_array_equal(np.asarray(arr, np.float32), expected[k])
      print("PLACEMENT_OK")
      """, XLA_FLAGS="--xla_force_host_platform_device_count=8")
  assert "PLACEMENT_OK" in result.stdout, result.stdout + result.stderr


def test_entry_is_plain_data(tmp_path):
  save_tensors(tmp_path, {"a": np.ones((2,), np.float64)})
  entry = index_checkpoint(tmp_path)["a"]
  assert isinstance(entry, TensorEntry) and entry.np_dtype == np.float64
  with open(entry.file, "rb") as f:  # Absolute offsets: seek and read without the header.
    f.seek(entry.start)
    assert np.frombuffer(f.read(entry.nbytes), np.float64).tolist() == [1.0, 1.0]


# ------------------------------------------------------------------------------------------------
# Two processes (jax.distributed on localhost, 4 CPU devices each): each reads only its slices.


def sharded_load_tensors() -> tuple[dict[str, np.ndarray], dict[str, tuple]]:
  """Tensors and their PartitionSpecs on a ("data", "model") mesh whose row i is process i."""
  tensors = {
      "rows": np.arange(8 * 16, dtype=np.float32).reshape(8, 16),        # split across processes
      "cols": np.arange(6 * 16, dtype=np.float32).reshape(6, 16).astype(ml_dtypes.bfloat16),
      "both": np.arange(4 * 8, dtype=np.float32).reshape(4, 8),          # split both ways
      "replicated": np.arange(5, dtype=np.float32),                      # every device holds all
  }
  specs = {"rows": ("data", None), "cols": (None, "model"), "both": ("data", "model"),
           "replicated": ()}
  return tensors, specs


def test_two_processes_read_only_their_own_slices(tmp_path):
  import socket  # pylint: disable=import-outside-toplevel
  tensors, _ = sharded_load_tensors()
  save_tensors(tmp_path, tensors)
  with socket.socket() as s:
    s.bind(("localhost", 0))
    port = s.getsockname()[1]
  env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "JAX_PLATFORMS": "cpu",
         "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
  procs = [subprocess.Popen([sys.executable, str(REPO_ROOT / "tests" / "sharded_load_check.py"),
                             str(tmp_path), f"localhost:{port}", str(i)], cwd=REPO_ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
           for i in range(2)]
  outs = [p.communicate(timeout=300)[0] for p in procs]
  assert all(p.returncode == 0 for p in procs), "\n".join(o[-3000:] for o in outs)
  reads = [json.loads(next(l for l in o.splitlines() if l.startswith("READ "))[5:]) for o in outs]
  nbytes = {k: np.asarray(v).nbytes for k, v in tensors.items()}
  # Each process: half of the row-split tensors, all of the column-split and replicated ones
  # (its 4 devices hold every column), each slice once however many local devices hold it.
  expected = nbytes["rows"] // 2 + nbytes["both"] // 2 + nbytes["cols"] + nbytes["replicated"]
  assert [r["bytes"] for r in reads] == [expected, expected], reads
  assert expected < sum(nbytes.values())
