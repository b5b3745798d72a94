"""(text, images) -> model-ready numpy arrays: chat prompt, placeholder expansion, padding, 3-D positions.

Mirrors what transformers' `Qwen3VLProcessor` + `apply_chat_template` + `get_rope_index` produce: the
prompt is rendered with the checkpoint's chat template (images before the text in one user turn), each
`<|image_pad|>` is expanded to t*h*w // merge**2 copies, rows are right-padded, and positions follow
transformers' `Qwen3VLModel.get_rope_index` (qwen3_vl/positions.py: text runs count up on all three
axes, an image's tokens take (t, h, w) grid positions after the text before it).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence

import numpy as np
import PIL.Image

from glance_jax.qwen3_vl.chat import Tokenizer
from glance_jax.qwen3_vl.positions import get_rope_index
from glance_jax.qwen3_vl.processor import ImageLike, ImageProcessor

_ID_KEYS = ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")
_ID_TOKENS = ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>")


@dataclasses.dataclass(frozen=True)
class ModelInputs:
  """Host arrays for one prefill. Rows are right-padded; `lengths[b]` real tokens come first."""

  input_ids: np.ndarray             # int32 [B, S]
  attention_mask: np.ndarray        # bool [B, S]
  positions: np.ndarray             # int32 [3, B, S]; padded slots 0
  rope_delta: np.ndarray            # int32 [B]; generated token i of row b sits at i + rope_delta[b]
  pixel_values: np.ndarray | None   # float32 [N, C*T*P*P] (1536), images of all rows in order
  image_grid_thw: np.ndarray | None  # int32 [n_images, 3]
  lengths: np.ndarray               # int32 [B]


@dataclasses.dataclass(frozen=True)
class Processor:
  """Everything the host side needs: tokenizer (+ chat template), image processor and special token ids."""

  tokenizer: Tokenizer
  image_processor: ImageProcessor
  image_token_id: int
  video_token_id: int
  vision_start_token_id: int
  vision_end_token_id: int
  # A text-only Qwen3 checkpoint (model_type "qwen3"): no images; its own chat template is rendered
  # with enable_thinking=False (the non-thinking mode the released DFlash heads were trained on).
  text_only: bool = False
  chat_kwargs: dict = dataclasses.field(default_factory=dict)

  @property
  def pad_token_id(self) -> int:
    """Filler for padded slots (never attended): <|endoftext|> if present, else 0."""
    pad = self.tokenizer.pad_token_id
    return 0 if pad is None else pad

  @classmethod
  def from_pretrained(cls, checkpoint_dir: str, *, image_token_id: int | None = None,
                      video_token_id: int | None = None, vision_start_token_id: int | None = None,
                      vision_end_token_id: int | None = None) -> "Processor":
    """Loads tokenizer.json (+ chat template) and preprocessor_config.json from a checkpoint directory.

    Token ids come from the keyword arguments, else config.json's top level, else the tokenizer's lookup of
    <|image_pad|>, <|video_pad|>, <|vision_start|>, <|vision_end|>. A missing preprocessor_config.json means
    the Qwen3-VL defaults. A text-only Qwen3 config.json (model_type "qwen3") gives a text-only processor:
    vision ids -1, prompts rendered with enable_thinking=False. An id that disagrees with the tokenizer raises, since the chat template emits the
    token by its text.
    """
    tokenizer = Tokenizer.from_pretrained(checkpoint_dir)
    if os.path.isfile(os.path.join(checkpoint_dir, "preprocessor_config.json")):
      image_processor = ImageProcessor.from_pretrained(checkpoint_dir)
    else:
      image_processor = ImageProcessor()
    config_path = os.path.join(checkpoint_dir, "config.json")
    config = {}
    if os.path.isfile(config_path):
      try:
        with open(config_path, encoding="utf-8") as f:
          config = json.load(f)
      except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"cannot read {config_path}: {e}") from None
      if config.get("model_type") == "qwen3":
        return cls(tokenizer, image_processor, -1, -1, -1, -1, text_only=True,
                   chat_kwargs={"enable_thinking": False})
      merge = (config.get("vision_config") or {}).get("spatial_merge_size")
      if merge is not None and merge != image_processor.merge_size:
        raise ValueError(f"{config_path}: vision_config.spatial_merge_size={merge} but the image processor's "
                         f"merge_size={image_processor.merge_size}")
    given = dict(zip(_ID_KEYS, (image_token_id, video_token_id, vision_start_token_id, vision_end_token_id)))
    ids = {}
    for key, text in zip(_ID_KEYS, _ID_TOKENS):
      from_tok = tokenizer.maybe_token_id(text)
      value = given[key] if given[key] is not None else config.get(key, from_tok)
      if value is None:
        raise ValueError(f"{key} is not given, not in {config_path}, and the tokenizer has no {text}")
      if from_tok is not None and from_tok != value:
        raise ValueError(f"{key}={value} but the tokenizer maps {text} to {from_tok}")
      ids[key] = int(value)
    return cls(tokenizer, image_processor, **ids)

  def num_image_tokens(self, grid_thw: Sequence[int]) -> int:
    t, h, w = (int(v) for v in grid_thw)
    return t * h * w // self.image_processor.merge_size ** 2


def _is_single_image(x) -> bool:
  return isinstance(x, (str, os.PathLike, np.ndarray, PIL.Image.Image))


def _images_per_row(images, batch: int, single: bool) -> list[list[ImageLike]]:
  """None | image | [images] (one row) or [None | image | [images]] * B (batch) -> B lists of images."""
  if images is None:
    return [[] for _ in range(batch)]
  if single:
    return [[images] if _is_single_image(images) else list(images)]
  if _is_single_image(images) or len(images) != batch:
    raise ValueError(f"images must be a list with one entry (None, an image or a list of images) per prompt; "
                     f"got {type(images).__name__} for {batch} prompts")
  return [[] if x is None else [x] if _is_single_image(x) else list(x) for x in images]


def _expand_row(processor: Processor, row: Sequence[int], grids: np.ndarray, b: int) -> list[int]:
  """Expands each run of <|image_pad|> to its grid's token count; a run is 1 token or already expanded."""
  image_id = processor.image_token_id
  if processor.video_token_id in row:
    raise ValueError(f"row {b}: video placeholders are not supported by prepare_inputs")
  runs, k = [], 0  # (start, length) of each placeholder run
  while k < len(row):
    if row[k] == image_id:
      start = k
      while k < len(row) and row[k] == image_id:
        k += 1
      runs.append((start, k - start))
    else:
      k += 1
  if len(runs) != len(grids):
    raise ValueError(f"row {b}: prompt has {len(runs)} image placeholders but {len(grids)} images were given")
  out, prev = [], 0
  for i, ((start, length), grid) in enumerate(zip(runs, grids)):
    need = processor.num_image_tokens(grid)
    if length not in (1, need):
      raise ValueError(f"row {b}: image placeholder run {i} at index {start} has {length} tokens but grid "
                       f"{tuple(int(v) for v in grid)} needs {need} (or 1 to expand)")
    out += list(row[prev:start]) + [image_id] * need
    prev = start + length
  return out + list(row[prev:])


def _build(processor: Processor, rows: list[list[int]], row_images: list[list[ImageLike]]) -> ModelInputs:
  flat = [img for imgs in row_images for img in imgs]
  if flat:
    pixel_values, grid = processor.image_processor(flat)  # float32 [N, 1536], int64 [n, 3]
  else:
    pixel_values, grid = None, np.zeros((0, 3), np.int64)
  expanded, at = [], 0
  for b, (row, imgs) in enumerate(zip(rows, row_images)):
    expanded.append(_expand_row(processor, row, grid[at:at + len(imgs)], b))
    at += len(imgs)
  lengths = np.asarray([len(r) for r in expanded], np.int32)
  if lengths.size == 0 or lengths.min() == 0:
    raise ValueError(f"every row needs at least one token, got lengths {lengths.tolist()}")
  batch, seq = len(expanded), int(lengths.max())
  input_ids = np.full((batch, seq), processor.pad_token_id, np.int32)
  for b, r in enumerate(expanded):
    input_ids[b, :len(r)] = r
  attention_mask = np.arange(seq)[None, :] < lengths[:, None]  # bool [B, S], right padding
  positions, rope_delta = get_rope_index(
      input_ids, attention_mask, grid if flat else None, None, image_token_id=processor.image_token_id,
      video_token_id=processor.video_token_id, spatial_merge_size=processor.image_processor.merge_size)
  return ModelInputs(input_ids=input_ids, attention_mask=attention_mask, positions=positions,
                     rope_delta=rope_delta, pixel_values=pixel_values,
                     image_grid_thw=grid.astype(np.int32) if flat else None, lengths=lengths)


def build_messages(prompt: str, num_images: int, system: str | None = None, *,
                   text_only: bool = False) -> list[dict]:
  """One user turn with `num_images` image items first, then the text (the Qwen3-VL cookbook layout).
  text_only: the content is the plain string (Qwen3's text template renders list content as empty)."""
  messages = [{"role": "system", "content": system}] if system is not None else []
  if text_only:
    return messages + [{"role": "user", "content": prompt}]
  content = [{"type": "image"} for _ in range(num_images)] + [{"type": "text", "text": prompt}]
  return messages + [{"role": "user", "content": content}]


def prepare_inputs(processor: Processor, prompts: str | Sequence[str],
                   images: ImageLike | Sequence | None = None, *, system: str | None = None) -> ModelInputs:
  """Turns one prompt or a batch of prompts (with their images) into right-padded ModelInputs.

  prompts: a string (one row) or a list of strings (a batch). images: for one prompt, None, an image or a
  list of images; for a batch, one entry per prompt, each None, an image or a list of images. Images are
  PIL images, uint8 [H, W, 3] arrays or file paths. Each row is rendered with the chat template as one user
  turn (images first, then the text; optional system turn; generation prompt appended), tokenized, and
  every <|image_pad|> expanded to its grid's t*h*w // merge**2 tokens. pixel_values hold all images in row
  order. Raises ValueError if a row's placeholder count differs from its number of images.
  """
  single = isinstance(prompts, str)
  prompt_list = [prompts] if single else list(prompts)
  row_images = _images_per_row(images, len(prompt_list), single)
  _check_text_only(processor, row_images)
  texts = [processor.tokenizer.render_chat(build_messages(p, len(imgs), system, text_only=processor.text_only),
                                           **processor.chat_kwargs)
           for p, imgs in zip(prompt_list, row_images)]
  return _build(processor, processor.tokenizer.encode_batch(texts), row_images)


def prepare_inputs_from_ids(processor: Processor, input_ids: Sequence[int] | Sequence[Sequence[int]],
                            images: ImageLike | Sequence | None = None) -> ModelInputs:
  """Raw mode: token ids already rendered by the caller -> ModelInputs.

  input_ids: one row (list of ints) or a batch (list of lists). Each image's placeholder is either a single
  <|image_pad|> (expanded here) or an already expanded run of exactly t*h*w // merge**2 tokens. images
  follow prepare_inputs' layout (per row). Raises ValueError on a placeholder/image count mismatch or a run
  whose length disagrees with its grid.
  """
  single = len(input_ids) > 0 and np.ndim(input_ids[0]) == 0
  rows = [[int(i) for i in input_ids]] if single else [[int(i) for i in r] for r in input_ids]
  row_images = _images_per_row(images, len(rows), single)
  _check_text_only(processor, row_images)
  return _build(processor, rows, row_images)


def _check_text_only(processor: Processor, row_images: list[list[ImageLike]]) -> None:
  if processor.text_only and any(row_images):
    n = sum(len(r) for r in row_images)
    raise ValueError(f"the checkpoint is a text-only Qwen3 (model_type 'qwen3'), but {n} image(s) were given")
