"""Readers for the official annotation layouts (pure Python: json + PIL, no TensorFlow).

Each `read_<task>(root, split, *, on_error, verify_images)` yields `PromptRecord`s in annotation-file
order from a local copy of the dataset as its publisher distributes it (nothing is downloaded).
Why readers of our own rather than TFDS catalog builders: the catalog lacks most of these datasets
and its builders download; these readers are also the TF-free path, and the TFDS builders in
`tfds_builders.py` delegate to them so both paths yield the same records in the same order.

Layouts accepted under `root` (first match wins; `{s}` is the split):

  coco_caption  annotations/captions_{s}2017.json + {s}2017/<file_name>; s in train, val.
                One record per image; answers = its captions; id = COCO image id.
  textvqa       TextVQA_0.5.1_{s}.json (or TextVQA_0.5_{s}.json) {"data": [{question_id, question,
                image_id, answers?}]} + train_images/<image_id>.jpg for train and val (the official
                train_val_images.zip), test_images/<image_id>.jpg for test. id = question_id.
  docvqa        SP-DocVQA {"data": [{questionId, question, image: "documents/x.png", answers?}]} in
                spdocvqa_qas/{s}_v1.0_withQT.json | spdocvqa_qas/{s}_v1.0.json (current release;
                images in spdocvqa_images/x.png) or {s}/{s}_v1.0_withQT.json | {s}/{s}_v1.0.json
                (original per-split tarballs; images at {s}/documents/x.png), also directly in root.
                The image path is tried relative to the annotation file's directory, then as
                spdocvqa_images/<basename>. id = questionId.
  chartqa       ChartQA Dataset/{s}/{s}_human.json and {s}_augmented.json ([{imgname, query,
                label}]) + ChartQA Dataset/{s}/png/<imgname>; root may also be the "ChartQA
                Dataset" folder itself. id = "human-<index>" / "augmented-<index>" (the files have
                no question ids; index = position in the file). answers = [label].
  infovqa       infographicsVQA_{s}_v1.0_withQT.json | infographicsVQA_{s}_v1.0.json |
                infographicVQA_{s}_v1.0.json, in root or root/infographicsvqa_qas, {"data":
                [{questionId, question, image_local_name, answers?}]} +
                infographicsvqa_images/<image_local_name>. id = questionId.

A missing or unparsable annotation file raises (FileNotFoundError / DataError) whatever `on_error`
says; a bad entry (missing key, wrong type, image absent or, with `verify_images`, unreadable) is
reported by id and skipped or raised per `on_error`. Test splits carry no answers (answers=()).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from glance_jax.data.prompts import caption_prompt, vqa_prompt
from glance_jax.data.records import DataError, OnError, PathLike, Problems, PromptRecord, images_problem

SPLITS: dict[str, tuple[str, ...]] = {
    "coco_caption": ("train", "val"),
    "textvqa": ("train", "val", "test"),
    "docvqa": ("train", "val", "test"),
    "chartqa": ("train", "val", "test"),
    "infovqa": ("train", "val", "test"),
}


def _check_split(task: str, split: str) -> None:
  if split not in SPLITS[task]:
    raise ValueError(f"{task}: unknown split {split!r}; expected one of {SPLITS[task]}")


def _first_existing(root: PathLike, candidates: Sequence[str], what: str) -> str:
  """The first candidate (relative to root) that exists; FileNotFoundError listing all tried."""
  root = os.path.abspath(os.fspath(root))
  for c in candidates:
    p = os.path.join(root, c)
    if os.path.exists(p):
      return p
  raise FileNotFoundError(f"{what}: none of {list(candidates)} under {root}")


def _load_json(path: str) -> Any:
  try:
    with open(path, encoding="utf-8") as f:
      return json.load(f)
  except json.JSONDecodeError as e:
    raise DataError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None


def _data_list(doc: Any, path: str) -> list:
  """The {"data": [...]} list shared by TextVQA, DocVQA and InfographicVQA files."""
  if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
    raise DataError(f"{path}: expected a JSON object with a 'data' list")
  return doc["data"]


def _get(entry: Any, keys: Sequence[str], types: Sequence[type]) -> tuple[list, str | None]:
  """Values of `keys` in a dict entry (Nones when malformed), and the reason it is malformed."""
  nones = [None] * len(keys)
  if not isinstance(entry, dict):
    return nones, f"expected a JSON object, got {type(entry).__name__}"
  missing = [k for k in keys if k not in entry]
  if missing:
    return nones, f"missing key(s) {', '.join(missing)}"
  for k, t in zip(keys, types):
    if not isinstance(entry[k], t) or isinstance(entry[k], bool):
      return nones, f"{k!r} has type {type(entry[k]).__name__}"
  return [entry[k] for k in keys], None


def _answers(entry: dict) -> tuple[tuple[str, ...], str | None]:
  """Optional `answers`: a list of strings (numbers are stringified); absent -> ()."""
  a = entry.get("answers", [])
  if not isinstance(a, list) or not all(isinstance(x, (str, int, float)) for x in a):
    return (), "'answers' must be a list of strings"
  return tuple(str(x) for x in a), None


def _emit(problems: Problems, rid: Any, at: str, record: PromptRecord, verify: bool) -> bool:
  """True when the record's images are all usable; otherwise reports it and returns False."""
  msg = images_problem(record.images, verify)
  if msg:
    problems.report(rid, msg, at=at)
  return msg is None


# ---------------------------------------------------------------- COCO-Caption2017

def coco_annotation(root: PathLike, split: str) -> str:
  _check_split("coco_caption", split)
  return _first_existing(root, [f"annotations/captions_{split}2017.json", f"captions_{split}2017.json"],
                         f"COCO-Caption2017 {split} annotations")


def read_coco(root: PathLike, split: str, *, on_error: OnError = "skip",
              verify_images: bool = False) -> Iterator[PromptRecord]:
  """COCO-Caption2017: one caption prompt per image, its captions as answers, id = image id."""
  path = coco_annotation(root, split)
  ann_dir = os.path.dirname(path)
  base = os.path.dirname(ann_dir) if os.path.basename(ann_dir) == "annotations" else ann_dir
  image_dir = os.path.join(base, f"{split}2017")
  doc = _load_json(path)
  if not isinstance(doc, dict) or not isinstance(doc.get("images"), list) \
      or not isinstance(doc.get("annotations"), list):
    raise DataError(f"{path}: expected a JSON object with 'images' and 'annotations' lists")
  ann_problems = Problems(path, on_error)
  captions: dict[int, list[str]] = {}
  for i, ann in enumerate(doc["annotations"]):
    (image_id, caption), msg = _get(ann, ("image_id", "caption"), (int, str))
    if msg:
      ann_problems.report(ann.get("id") if isinstance(ann, dict) else None, f"annotation: {msg}",
                          at=f"annotations[{i}]")
      continue
    captions.setdefault(image_id, []).append(caption.strip())
  ann_problems.summarize(len(doc["annotations"]), "caption annotations")
  problems = Problems(path, on_error)
  total = 0
  for i, im in enumerate(doc["images"]):
    total += 1
    (image_id, file_name), msg = _get(im, ("id", "file_name"), (int, str))
    at = f"images[{i}]"
    if msg:
      problems.report(im.get("id") if isinstance(im, dict) else None, msg, at=at)
      continue
    rec = PromptRecord(id=str(image_id), task="coco_caption", split=split, prompt=caption_prompt(),
                       images=(os.path.join(image_dir, file_name),),
                       answers=tuple(captions.get(image_id, ())))
    if _emit(problems, image_id, at, rec, verify_images):
      yield rec
  problems.summarize(total)


# ---------------------------------------------------------------- the {"data": [...]} VQA family

def _read_vqa_list(task: str, path: str, split: str, on_error: OnError, verify: bool,
                   id_key: str, image_of: Callable[[dict], str], image_key: str) -> Iterator[PromptRecord]:
  """Shared loop for TextVQA / DocVQA / InfographicVQA: one record per question."""
  problems = Problems(path, on_error)
  data = _data_list(_load_json(path), path)
  for i, e in enumerate(data):
    at = f"data[{i}]"
    rid = e.get(id_key) if isinstance(e, dict) else None
    (qid, question, _), msg = _get(e, (id_key, "question", image_key), ((int, str), str, str))
    answers = ()
    if not msg:
      answers, msg = _answers(e)
    if msg:
      problems.report(rid, msg, at=at)
      continue
    rec = PromptRecord(id=str(qid), task=task, split=split, prompt=vqa_prompt(question),
                       images=(image_of(e),), answers=answers)
    if _emit(problems, qid, at, rec, verify):
      yield rec
  problems.summarize(len(data))


def textvqa_annotation(root: PathLike, split: str) -> str:
  _check_split("textvqa", split)
  return _first_existing(root, [f"TextVQA_0.5.1_{split}.json", f"TextVQA_0.5_{split}.json"],
                         f"TextVQA {split} annotations")


def read_textvqa(root: PathLike, split: str, *, on_error: OnError = "skip",
                 verify_images: bool = False) -> Iterator[PromptRecord]:
  """TextVQA 0.5.1: one VQA prompt per question; val images live in train_images (official zip)."""
  path = textvqa_annotation(root, split)
  image_dir = os.path.join(os.path.dirname(path), "test_images" if split == "test" else "train_images")
  yield from _read_vqa_list("textvqa", path, split, on_error, verify_images, "question_id",
                            lambda e: os.path.join(image_dir, f"{e['image_id']}.jpg"), "image_id")


def docvqa_annotation(root: PathLike, split: str) -> str:
  _check_split("docvqa", split)
  names = [f"{split}_v1.0_withQT.json", f"{split}_v1.0.json"]
  return _first_existing(root, [f"spdocvqa_qas/{n}" for n in names] + [f"{split}/{n}" for n in names]
                         + names, f"DocVQA {split} annotations")


def read_docvqa(root: PathLike, split: str, *, on_error: OnError = "skip",
                verify_images: bool = False) -> Iterator[PromptRecord]:
  """SP-DocVQA: one VQA prompt per question, in either official layout (see module docstring)."""
  path = docvqa_annotation(root, split)
  ann_dir = os.path.dirname(path)
  flat_dir = os.path.join(os.path.abspath(os.fspath(root)), "spdocvqa_images")

  def image_of(e: dict) -> str:
    nested = os.path.normpath(os.path.join(ann_dir, e["image"]))
    flat = os.path.join(flat_dir, os.path.basename(e["image"]))
    return flat if not os.path.exists(nested) and os.path.exists(flat) else nested

  yield from _read_vqa_list("docvqa", path, split, on_error, verify_images, "questionId", image_of,
                            "image")


def infovqa_annotation(root: PathLike, split: str) -> str:
  _check_split("infovqa", split)
  names = [f"infographicsVQA_{split}_v1.0_withQT.json", f"infographicsVQA_{split}_v1.0.json",
           f"infographicVQA_{split}_v1.0.json"]
  return _first_existing(root, names + [f"infographicsvqa_qas/{n}" for n in names],
                         f"InfographicVQA {split} annotations")


def read_infovqa(root: PathLike, split: str, *, on_error: OnError = "skip",
                 verify_images: bool = False) -> Iterator[PromptRecord]:
  """InfographicVQA: one VQA prompt per question; images in infographicsvqa_images/."""
  path = infovqa_annotation(root, split)
  image_dir = os.path.join(os.path.abspath(os.fspath(root)), "infographicsvqa_images")
  yield from _read_vqa_list("infovqa", path, split, on_error, verify_images, "questionId",
                            lambda e: os.path.join(image_dir, e["image_local_name"]), "image_local_name")


# ---------------------------------------------------------------- ChartQA

_CHARTQA_SUBSETS = ("human", "augmented")


def chartqa_annotations(root: PathLike, split: str) -> list[str]:
  """The split's existing {split}_human.json / {split}_augmented.json (at least one)."""
  _check_split("chartqa", split)
  found = []
  for sub in _CHARTQA_SUBSETS:
    try:
      found.append(_first_existing(root, [f"ChartQA Dataset/{split}/{split}_{sub}.json",
                                          f"{split}/{split}_{sub}.json"], ""))
    except FileNotFoundError:
      pass
  if not found:
    raise FileNotFoundError(f"ChartQA {split} annotations: no {split}_human.json or "
                            f"{split}_augmented.json under {root} or '{root}/ChartQA Dataset'/{split}")
  return found


def read_chartqa(root: PathLike, split: str, *, on_error: OnError = "skip",
                 verify_images: bool = False) -> Iterator[PromptRecord]:
  """ChartQA: human questions first, then augmented; id = "<subset>-<index in its file>"."""
  for path in chartqa_annotations(root, split):
    sub = os.path.basename(path)[len(split) + 1:-len(".json")]
    png_dir = os.path.join(os.path.dirname(path), "png")
    doc = _load_json(path)
    if not isinstance(doc, list):
      raise DataError(f"{path}: expected a JSON list of {{imgname, query, label}}")
    problems = Problems(path, on_error)
    for i, e in enumerate(doc):
      rid, at = f"{sub}-{i}", f"[{i}]"
      (imgname, query, label), msg = _get(e, ("imgname", "query", "label"), (str, str, (str, int, float)))
      if msg:
        problems.report(rid, msg, at=at)
        continue
      rec = PromptRecord(id=rid, task="chartqa", split=split, prompt=vqa_prompt(query),
                         images=(os.path.join(png_dir, imgname),), answers=(str(label),))
      if _emit(problems, rid, at, rec, verify_images):
        yield rec
    problems.summarize(len(doc))


# Annotation locators: (root, split) -> path(s), raising FileNotFoundError when the split is absent.
LOCATORS: dict[str, Callable[[PathLike, str], Any]] = {
    "coco_caption": coco_annotation,
    "textvqa": textvqa_annotation,
    "docvqa": docvqa_annotation,
    "chartqa": chartqa_annotations,
    "infovqa": infovqa_annotation,
}
