"""Prompt data: official-layout readers, bad-input reporting, task files, TFDS without TensorFlow.

Every dataset is a tiny fake copy of its official layout written into tmp_path (tests/data_fixtures.py);
nothing is downloaded.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import sys

import pytest

from glance_jax import data as gd
from glance_jax.data import records as rec_mod
from tests.data_fixtures import BAD_IDS, MAKERS, make_chartqa, make_docvqa, make_image

OFFICIAL = sorted(MAKERS)
VQA_SUFFIX = "\n" + gd.VQA_INSTRUCTION


def _check_records(records, task, split, ids):
  assert [r.id for r in records] == ids
  for r in records:
    assert (r.task, r.split) == (task, split)
    assert r.images and all(os.path.isabs(p) and os.path.isfile(p) for p in r.images)
    if task == "coco_caption":
      assert r.prompt == gd.CAPTION_PROMPT
    else:
      assert r.prompt.endswith(VQA_SUFFIX) and len(r.prompt) > len(VQA_SUFFIX)


@pytest.mark.parametrize("task", OFFICIAL)
def test_reader_official_layout(task, tmp_path):
  expected = MAKERS[task](str(tmp_path))
  assert gd.available_splits(task, tmp_path) == tuple(expected)
  for split, ids in expected.items():
    records = list(gd.TASKS[task](tmp_path, split, on_error="raise", verify_images=True))
    _check_records(records, task, split, ids)
    assert records == gd.load_records(task, tmp_path, split, data_dir=tmp_path / "no_tfds")


def test_reader_contents(tmp_path):
  """Spot checks of the fields each layout maps to prompt / image / answers."""
  root = str(tmp_path)
  MAKERS["coco_caption"](root)
  r = next(gd.read_coco(root, "val"))
  assert r.images == (os.path.join(root, "val2017", "000000000201.jpg"),)
  assert r.answers == ("Caption 0 of image 201.", "Caption 1 of image 201.")  # stripped
  MAKERS["textvqa"](root)
  r = next(gd.read_textvqa(root, "val"))
  assert r.prompt == "what is written on sign 11?" + VQA_SUFFIX
  assert r.images == (os.path.join(root, "train_images", "img000b.jpg"),)  # val images in train_images
  assert r.answers == ("word11",) * 10
  assert next(gd.read_textvqa(root, "test")).answers == ()  # test split: no answers
  MAKERS["chartqa"](root)
  by_id = {r.id: r for r in gd.read_chartqa(root, "test")}
  assert by_id["augmented-0"].answers == ("2019",)  # numeric labels become strings
  assert by_id["human-1"].images == (os.path.join(root, "ChartQA Dataset", "test", "png", "test_h1.png"),)
  MAKERS["infovqa"](root)
  r = next(gd.read_infovqa(root, "val"))  # the _withQT file name variant
  assert (r.id, r.answers) == ("65718", ("pinterest", "Pinterest"))


def test_docvqa_qas_layout_and_chartqa_unwrapped(tmp_path):
  ids = make_docvqa(str(tmp_path / "d"), layout="qas")
  records = list(gd.read_docvqa(tmp_path / "d", "val", on_error="raise"))
  _check_records(records, "docvqa", "val", ids["val"])
  assert os.path.dirname(records[0].images[0]) == str(tmp_path / "d" / "spdocvqa_images")
  ids = make_chartqa(str(tmp_path / "c"), wrapper=False)
  _check_records(list(gd.read_chartqa(tmp_path / "c", "val", on_error="raise")), "chartqa", "val",
                 ids["val"])


@pytest.mark.parametrize("task", OFFICIAL)
def test_malformed_entries_skipped_or_raised(task, tmp_path, caplog):
  expected = MAKERS[task](str(tmp_path), malformed=True)
  with caplog.at_level(logging.WARNING, logger="glance_jax.data.records"):
    records = gd.load_records(task, tmp_path, "train")
  assert [r.id for r in records] == expected["train"]
  warned = [m for m in caplog.messages if m.endswith("; skipped")]
  assert len(warned) == len(BAD_IDS[task])
  for bad, msg in zip(BAD_IDS[task], warned):
    assert f"id '{bad}'" in msg
  assert any("image file not found" in m for m in warned)
  assert any(m.endswith("records (see warnings above)") for m in caplog.messages)  # a summary line
  with pytest.raises(gd.DataError, match=f"id '{BAD_IDS[task][0]}'") as info:
    gd.load_records(task, tmp_path, "train", on_error="raise")
  assert "\n" not in str(info.value)
  assert ".json" in str(info.value)  # names the annotation file


def test_bad_files_and_arguments(tmp_path):
  with pytest.raises(FileNotFoundError, match="TextVQA val annotations"):
    list(gd.read_textvqa(tmp_path, "val"))
  assert gd.available_splits("textvqa", tmp_path) == ()
  (tmp_path / "TextVQA_0.5.1_val.json").write_text("{not json")
  with pytest.raises(gd.DataError, match="not valid JSON"):
    list(gd.read_textvqa(tmp_path, "val"))  # a broken file is fatal whatever on_error says
  (tmp_path / "TextVQA_0.5.1_val.json").write_text("[]")
  with pytest.raises(gd.DataError, match="'data' list"):
    list(gd.read_textvqa(tmp_path, "val"))
  with pytest.raises(ValueError, match="unknown split"):
    gd.load_records("coco_caption", tmp_path, "test")
  with pytest.raises(ValueError, match="unknown task"):
    gd.load_records("vqav2", tmp_path, "val")
  with pytest.raises(ValueError, match="on_error"):
    gd.load_records("synthetic", tmp_path, "val", on_error="ignore")


def test_verify_images_catches_unreadable_file(tmp_path, caplog):
  MAKERS["infovqa"](str(tmp_path))
  (tmp_path / "infographicsvqa_images" / "98313.jpeg").write_bytes(b"not an image")
  assert len(gd.load_records("infovqa", tmp_path, "train")) == 2  # existence only by default
  with caplog.at_level(logging.WARNING):
    records = gd.load_records("infovqa", tmp_path, "train", verify_images=True)
  assert [r.id for r in records] == ["98314"]
  assert any("id '98313'" in m and "not a readable image" in m for m in caplog.messages)


def test_synthetic_records(tmp_path):
  train = gd.load_records("synthetic", tmp_path, "train", on_error="raise", verify_images=True)
  assert [r.id for r in train] == ["train-0", "train-1", "train-2", "train-3", "train-pair"]
  assert len(train[-1].images) == 2 and train[-1].answers == ("no",)
  assert train[1].prompt == "What color is the circle?" + VQA_SUFFIX and train[1].answers == ("green",)
  mtime = os.path.getmtime(train[0].images[0])
  again = gd.load_records("synthetic", tmp_path, "validation", limit=1)  # alias, limit
  assert [r.id for r in again] == ["val-0"]
  assert gd.load_records("synthetic", tmp_path, "train") == train
  assert os.path.getmtime(train[0].images[0]) == mtime  # rendered once, reused


def test_task_file_round_trip(tmp_path):
  MAKERS["textvqa"](str(tmp_path / "ds"))
  out = tmp_path / "tasks" / "textvqa_val.jsonl"
  assert gd.export_task_file("textvqa", tmp_path / "ds", "val", out, limit=1) == 1
  assert gd.read_task_file(out, on_error="raise") == gd.load_records("textvqa", tmp_path / "ds", "val")[:1]
  records = gd.load_records("synthetic", tmp_path / "ds", "train")
  assert gd.write_task_file(records, out, relative=True) == len(records)
  rows = [json.loads(line) for line in out.read_text().splitlines()]
  assert set(rows[0]) == {"id", "task", "split", "prompt", "images", "answers"}
  assert not os.path.isabs(rows[0]["images"][0])
  assert gd.read_task_file(out) == records  # relative paths resolve against the file's directory
  assert [p.name for p in out.parent.iterdir()] == [out.name]  # no temp files left behind


def test_task_file_bad_rows(tmp_path, caplog):
  image = make_image(str(tmp_path / "a.png"))
  good = {"id": "ok", "task": "t", "split": "val", "prompt": "p", "images": [image], "answers": ["x"]}
  rows = [
      json.dumps(good),
      "{broken",
      json.dumps({k: v for k, v in good.items() if k != "prompt"} | {"id": "noprompt"}),
      json.dumps(good | {"id": "badtype", "images": image}),
      json.dumps(good | {"id": "noimage", "images": [str(tmp_path / "gone.png")]}),
      json.dumps(good),  # duplicate id
      "",
      json.dumps(good | {"id": "noanswers", "images": ["a.png"], "extra": 1}),  # relative, extra key
  ]
  path = tmp_path / "t.jsonl"
  path.write_text("\n".join(rows) + "\n")
  with caplog.at_level(logging.WARNING, logger="glance_jax.data.records"):
    records = gd.read_task_file(path)
  assert [r.id for r in records] == ["ok", "noanswers"]
  assert records[1].images == (image,) and records[0].answers == ("x",)
  warned = [m for m in caplog.messages if m.endswith("; skipped")]
  expected = [(2, "?", "invalid JSON"), (3, "'noprompt'", "missing key(s) prompt"),
              (4, "'badtype'", "'images' must be a list"), (5, "'noimage'", "image file not found"),
              (6, "'ok'", "duplicate id")]
  assert len(warned) == len(expected)
  for (line, rid, what), msg in zip(expected, warned):
    assert msg.startswith(f"{path}:{line}: id {rid}: {what}"), msg
  with pytest.raises(ValueError, match=r"t\.jsonl:2: id \?: invalid JSON"):
    gd.read_task_file(path, on_error="raise")
  assert issubclass(gd.DataError, ValueError) and rec_mod.DataError is gd.DataError


# ---------------------------------------------------------------- TFDS (without TensorFlow)

_TFDS_MISSING = [m for m in ("tensorflow_datasets", "array_record") if importlib.util.find_spec(m) is None]
needs_tfds = pytest.mark.skipif(bool(_TFDS_MISSING), reason=f"TFDS path needs {_TFDS_MISSING} installed")


@pytest.fixture
def no_tensorflow():
  """Runs the test only where TensorFlow is not installed, and checks it stayed unimported: the
  TFDS path must build and read without it. (Blocking the import where TF is installed does not
  work: tfds and etils probe `find_spec("tensorflow")` / sys.modules and then take TF code paths.)"""
  if importlib.util.find_spec("tensorflow") is not None:
    pytest.skip("TensorFlow is installed here, so this run cannot show the TF-free path")
  yield
  assert "tensorflow" not in sys.modules


@needs_tfds
def test_synthetic_tfds_end_to_end(tmp_path, monkeypatch, no_tensorflow):
  import tensorflow_datasets as tfds
  raw = {s: gd.load_records("synthetic", tmp_path, s) for s in gd.SPLITS["synthetic"]}
  builder = gd.prepare_tfds("synthetic", tmp_path)
  assert builder.is_prepared() and set(builder.info.splits) == {"train", "val"}
  assert builder.info.splits["train"].num_examples == len(raw["train"])
  source = tfds.data_source("glance_synthetic", data_dir=tmp_path / "_tfds", split="train")
  ex = source[4]
  assert ex["id"] == b"train-pair" and len(ex["images"]) == 2
  assert not os.path.isabs(ex["images"][0].decode())  # stored relative to the root

  def no_raw(*args, **kwargs):
    raise AssertionError("raw reader used although a TFDS copy is prepared")

  monkeypatch.setitem(gd.TASKS, "synthetic", no_raw)
  for split, records in raw.items():
    assert gd.load_records("synthetic", tmp_path, split) == records  # same records, same order
  assert gd.load_records("synthetic", tmp_path, "train", limit=2) == raw["train"][:2]


@needs_tfds
def test_official_builder_uses_manual_dir_and_skips_bad_rows(tmp_path, caplog, no_tensorflow):
  import tensorflow_datasets as tfds
  from glance_jax.data.tfds_builders import TextVqa
  root = tmp_path / "textvqa"
  expected = MAKERS["textvqa"](str(root), malformed=True)
  builder = TextVqa(data_dir=str(tmp_path / "tfds"))  # ArrayRecord by default: TFRecord needs TF
  with caplog.at_level(logging.WARNING, logger="glance_jax.data.records"):
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(manual_dir=str(root)))
  assert builder.info.file_format.value == "array_record"
  assert any("id '9002'" in m for m in caplog.messages)
  assert set(builder.info.splits) == {"train", "val", "test"}
  for split, ids in expected.items():
    records = gd.load_records("textvqa", root, split, data_dir=tmp_path / "tfds")
    assert [r.id for r in records] == ids
    assert records == list(gd.read_textvqa(root, split))
  os.remove(records[0].images[0])  # an image vanished after preparing: reported by id on reading
  with pytest.raises(gd.DataError, match="id '50'.*image file not found"):
    gd.load_records("textvqa", root, "test", data_dir=tmp_path / "tfds", on_error="raise")
