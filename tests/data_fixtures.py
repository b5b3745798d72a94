"""Tiny fake copies of each dataset's official on-disk layout, for tests (no downloads).

Each `make_<task>(root, malformed=False)` writes annotation JSON in the publisher's structure and a
few tiny PIL images, and returns {split: [expected ids in order]} for the well-formed entries. With
`malformed=True` it also adds, to the train split, entries missing a required key or whose image
file is absent; `BAD_IDS[task]` lists their ids in the order a reader reports them.
"""

from __future__ import annotations

import json
import os

import PIL.Image

BAD_IDS = {
    "coco_caption": ("7777", "902", "903"),  # caption-less annotation; image absent; no file_name
    "textvqa": ("9001", "9002"),
    "docvqa": ("9001", "9002"),
    "chartqa": ("human-2", "human-3"),
    "infovqa": ("9001", "9002"),
}


def make_image(path: str, color=(200, 30, 30), size=(12, 8)) -> str:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  fmt = "JPEG" if path.endswith((".jpg", ".jpeg")) else "PNG"
  PIL.Image.new("RGB", size, color).save(path, format=fmt)
  return path


def _dump(path: str, obj) -> None:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w", encoding="utf-8") as f:
    json.dump(obj, f)


def make_coco(root: str, malformed: bool = False) -> dict[str, list[str]]:
  out = {}
  for split, ids in (("train", [101, 102, 103]), ("val", [201, 202])):
    images = [{"license": 1, "file_name": f"{i:012d}.jpg", "height": 8, "width": 12, "id": i}
              for i in ids]
    anns = [{"image_id": i, "id": 10 * i + k, "caption": f"Caption {k} of image {i}. "}
            for i in ids for k in range(2)]
    for im in images:
      make_image(os.path.join(root, f"{split}2017", im["file_name"]))
    if malformed and split == "train":
      images.append({"file_name": "000000000902.jpg", "id": 902})  # image never written
      images.append({"id": 903})  # no file_name
      anns.append({"image_id": 101, "id": 7777})  # annotation without caption
    _dump(os.path.join(root, "annotations", f"captions_{split}2017.json"),
          {"info": {}, "licenses": [], "images": images, "annotations": anns})
    out[split] = [str(i) for i in ids]
  return out


def make_textvqa(root: str, malformed: bool = False) -> dict[str, list[str]]:
  out = {}
  for split, qids in (("train", [1, 2, 3]), ("val", [11, 12])):
    data = []
    for q in qids:
      image_id = f"img{q:04x}"
      make_image(os.path.join(root, "train_images", f"{image_id}.jpg"))
      data.append({"question": f"what is written on sign {q}?", "image_id": image_id,
                   "image_classes": ["Sign"], "answers": [f"word{q}"] * 10, "question_id": q,
                   "set_name": split})
    if malformed and split == "train":
      data.append({"image_id": "img0001", "question_id": 9001, "answers": []})  # no question
      data.append({"question": "q?", "image_id": "absent", "question_id": 9002, "answers": ["a"]})
    _dump(os.path.join(root, f"TextVQA_0.5.1_{split}.json"),
          {"dataset_type": split, "dataset_name": "textvqa", "dataset_version": "0.5.1", "data": data})
    out[split] = [str(q) for q in qids]
  test = [{"question": "what brand?", "image_id": "t0001", "question_id": 50, "set_name": "test"}]
  make_image(os.path.join(root, "test_images", "t0001.jpg"))
  _dump(os.path.join(root, "TextVQA_0.5.1_test.json"), {"dataset_type": "test", "data": test})
  out["test"] = ["50"]
  return out


def make_docvqa(root: str, malformed: bool = False, layout: str = "split_dirs") -> dict[str, list[str]]:
  """layout "split_dirs": {s}/{s}_v1.0_withQT.json + {s}/documents/; "qas": spdocvqa_qas + _images."""
  out = {}
  for split, qids in (("train", [337, 338]), ("val", [49153, 49154, 49155])):
    data = [{"questionId": q, "question": f"What is the date in letter {q}?",
             "question_types": ["handwritten"], "image": f"documents/doc{q}_1.png", "docId": q,
             "answers": [f"1/{q % 28 + 1}/1970"], "data_split": split} for q in qids]
    if malformed and split == "train":
      data.append({"questionId": 9001, "question": "no image key?", "answers": ["x"]})
      data.append({"questionId": 9002, "question": "image absent?", "image": "documents/none.png",
                   "answers": ["x"]})
    if layout == "split_dirs":
      ann, image_dir = os.path.join(root, split, f"{split}_v1.0_withQT.json"), os.path.join(root, split)
    else:
      ann = os.path.join(root, "spdocvqa_qas", f"{split}_v1.0_withQT.json")
      image_dir = os.path.join(root, "spdocvqa_images")
    for e in data[:len(qids)]:
      rel = e["image"] if layout == "split_dirs" else os.path.basename(e["image"])
      make_image(os.path.join(image_dir, rel), color=(255, 255, 255), size=(10, 14))
    _dump(ann, {"dataset_name": "docvqa", "dataset_split": split, "dataset_version": "1.0", "data": data})
    out[split] = [str(q) for q in qids]
  return out


def make_chartqa(root: str, malformed: bool = False, wrapper: bool = True) -> dict[str, list[str]]:
  """wrapper=True puts splits under root/"ChartQA Dataset" as the official release does."""
  base = os.path.join(root, "ChartQA Dataset") if wrapper else root
  out = {}
  for split in ("train", "val", "test"):
    human = [{"imgname": f"{split}_h{i}.png", "query": f"What is the value of bar {i}?", "label": str(i)}
             for i in range(2)]
    augmented = [{"imgname": f"{split}_a0.png", "query": "Which year is highest?", "label": 2019}]
    for e in human + augmented:
      make_image(os.path.join(base, split, "png", e["imgname"]))
    if malformed and split == "train":
      human.append({"imgname": f"{split}_h0.png", "label": "1"})  # no query
      human.append({"imgname": "missing.png", "query": "q?", "label": "1"})
    _dump(os.path.join(base, split, f"{split}_human.json"), human)
    _dump(os.path.join(base, split, f"{split}_augmented.json"), augmented)
    out[split] = ["human-0", "human-1", "augmented-0"]
  return out


def make_infovqa(root: str, malformed: bool = False) -> dict[str, list[str]]:
  out = {}
  names = {"train": "infographicsVQA_train_v1.0.json", "val": "infographicsVQA_val_v1.0_withQT.json"}
  for split, qids in (("train", [98313, 98314]), ("val", [65718])):
    data = [{"questionId": q, "question": f"Which platform has audience {q}?",
             "image_local_name": f"{q}.jpeg", "image_url": "", "answers": ["pinterest", "Pinterest"],
             "data_split": split} for q in qids]
    for e in data:
      make_image(os.path.join(root, "infographicsvqa_images", e["image_local_name"]))
    if malformed and split == "train":
      data.append({"questionId": 9001, "image_local_name": f"{qids[0]}.jpeg", "answers": []})
      data.append({"questionId": 9002, "question": "q?", "image_local_name": "gone.jpeg"})
    _dump(os.path.join(root, "infographicsvqa_qas", names[split]),
          {"dataset_name": "infographicVQA", "dataset_split": split, "data": data})
    out[split] = [str(q) for q in qids]
  return out


MAKERS = {"coco_caption": make_coco, "textvqa": make_textvqa, "docvqa": make_docvqa,
          "chartqa": make_chartqa, "infovqa": make_infovqa}
