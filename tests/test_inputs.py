"""prepare_inputs vs transformers' Qwen3VLProcessor.apply_chat_template on a tiny tokenizer, plus the raw path.

transformers' Qwen3VLProcessor insists on a video processor whose base class it looks up in a registry that
is empty without torchvision; the oracle subclass below skips that one class check (the video processor is
never called for images). Everything else is the stock transformers code path.
"""

import json

import numpy as np
import PIL.Image
import pytest

from glance_jax.qwen3_vl.chat import QWEN3_VL_CHAT_TEMPLATE, Tokenizer, load_chat_template
from glance_jax.qwen3_vl.inputs import Processor, prepare_inputs, prepare_inputs_from_ids
from glance_jax.qwen3_vl.positions import get_rope_index
from glance_jax.testing.tokenizer import make_tiny_tokenizer

VS, VE, IMG, VID = 500, 501, 502, 503
MIN_PIXELS = 32 * 32


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
  d = tmp_path_factory.mktemp("ckpt")
  make_tiny_tokenizer(str(d), 512, {"<|vision_start|>": VS, "<|vision_end|>": VE, "<|image_pad|>": IMG,
                                    "<|video_pad|>": VID})
  (d / "config.json").write_text(json.dumps({
      "image_token_id": IMG, "video_token_id": VID, "vision_start_token_id": VS, "vision_end_token_id": VE,
      "vision_config": {"spatial_merge_size": 2}}))
  (d / "preprocessor_config.json").write_text(json.dumps({
      "size": {"shortest_edge": MIN_PIXELS, "longest_edge": 16777216}, "patch_size": 16,
      "temporal_patch_size": 2, "merge_size": 2, "image_mean": [0.5] * 3, "image_std": [0.5] * 3,
      "resample": 3, "rescale_factor": 1 / 255}))
  return d


@pytest.fixture(scope="module")
def proc(ckpt):
  return Processor.from_pretrained(str(ckpt))


@pytest.fixture(scope="module")
def hf_proc(ckpt):
  pytest.importorskip("torch")
  pytest.importorskip("transformers")
  from transformers import PreTrainedTokenizerFast, Qwen3VLProcessor
  from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
  from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

  class OfflineQwen3VLProcessor(Qwen3VLProcessor):
    def check_argument_for_proper_class(self, name, arg):
      if name == "video_processor":
        return type(arg)
      return super().check_argument_for_proper_class(name, arg)

  tok = PreTrainedTokenizerFast(tokenizer_file=str(ckpt / "tokenizer.json"), eos_token="<|im_end|>",
                                pad_token="<|endoftext|>")
  ip = Qwen2VLImageProcessorPil(patch_size=16, temporal_patch_size=2, merge_size=2, image_mean=[0.5] * 3,
                                image_std=[0.5] * 3, size={"shortest_edge": MIN_PIXELS, "longest_edge": 16777216})
  return OfflineQwen3VLProcessor(image_processor=ip, tokenizer=tok, video_processor=Qwen3VLVideoProcessor(),
                                 chat_template=(ckpt / "chat_template.jinja").read_text())


def _img(h, w, seed):
  return PIL.Image.fromarray(np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8))


def _messages(text, images, system=None):
  content = [{"type": "image", "image": im} for im in images] + [{"type": "text", "text": text}]
  return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": content}]


def test_processor_reads_ids(proc):
  assert (proc.image_token_id, proc.video_token_id, proc.vision_start_token_id, proc.vision_end_token_id) == (
      IMG, VID, VS, VE)
  assert proc.image_processor.min_pixels == MIN_PIXELS
  assert proc.pad_token_id == proc.tokenizer.token_id("<|endoftext|>")


def test_doc_prompt_format(proc):
  text = proc.tokenizer.render_chat(_messages("Describe this image.", [None]))
  assert text == ("<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Describe this image.<|im_end|>\n"
                  "<|im_start|>assistant\n")


@pytest.mark.parametrize("system", [None, "Be brief."])
def test_single_prompt_matches_hf(proc, hf_proc, system):
  images = [_img(64, 96, 0), _img(37, 203, 1)]
  prompt = "What is in the two pictures?"
  msgs = _messages(prompt, images, system)
  ref_text = hf_proc.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
  assert proc.tokenizer.render_chat(msgs) == ref_text
  ref = hf_proc.apply_chat_template(msgs, tokenize=True, return_dict=True, add_generation_prompt=True,
                                    return_tensors="np")
  got = prepare_inputs(proc, prompt, images, system=system)
  np.testing.assert_array_equal(got.input_ids, ref["input_ids"])
  assert got.input_ids.dtype == np.int32 and got.attention_mask.dtype == bool
  assert got.attention_mask.all() and got.lengths.tolist() == [ref["input_ids"].shape[1]]
  np.testing.assert_array_equal(got.pixel_values, ref["pixel_values"])
  np.testing.assert_array_equal(got.image_grid_thw, ref["image_grid_thw"])
  assert got.image_grid_thw.dtype == np.int32
  assert (got.input_ids == IMG).sum() == 6 + 6  # grids (1,4,6) and (1,2,12)
  pos, delta = get_rope_index(ref["input_ids"], ref["attention_mask"], ref["image_grid_thw"],
                              image_token_id=IMG, video_token_id=VID)
  np.testing.assert_array_equal(got.positions, pos)
  np.testing.assert_array_equal(got.rope_delta, delta)


def test_batch_matches_hf_right_padded(proc, hf_proc):
  prompts = ["Describe both.", "Any text at all in this one, please?", "No image here."]
  images = [[_img(64, 96, 0), _img(48, 48, 1)], _img(40, 120, 2), None]
  texts = [hf_proc.apply_chat_template(_messages(p, [] if im is None else im if isinstance(im, list) else [im]),
                                       tokenize=False, add_generation_prompt=True)
           for p, im in zip(prompts, images)]
  flat = [images[0][0], images[0][1], images[1]]
  ref = hf_proc(text=texts, images=flat, padding=True, padding_side="right", return_tensors="np")
  got = prepare_inputs(proc, prompts, images)
  np.testing.assert_array_equal(got.input_ids, ref["input_ids"])
  np.testing.assert_array_equal(got.attention_mask, ref["attention_mask"].astype(bool))
  np.testing.assert_array_equal(got.lengths, ref["attention_mask"].sum(1))
  np.testing.assert_array_equal(got.pixel_values, ref["pixel_values"])
  np.testing.assert_array_equal(got.image_grid_thw, ref["image_grid_thw"])
  import torch
  from transformers import Qwen3VLConfig, Qwen3VLModel
  cfg = Qwen3VLConfig(
      vision_config=dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
                         num_position_embeddings=64, deepstack_visual_indexes=[0]),
      text_config=dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=32),
      image_token_id=IMG, video_token_id=VID, vision_start_token_id=VS, vision_end_token_id=VE)
  model = Qwen3VLModel(cfg).eval()
  pos, delta = model.get_rope_index(torch.tensor(ref["input_ids"]), torch.tensor(ref["mm_token_type_ids"]),
                                    torch.tensor(ref["image_grid_thw"]),
                                    attention_mask=torch.tensor(ref["attention_mask"]))
  np.testing.assert_array_equal(got.positions, pos.numpy())
  np.testing.assert_array_equal(got.rope_delta, delta.numpy().reshape(-1))


def test_paths_and_arrays(proc, tmp_path):
  img = _img(50, 70, 3)
  img.save(tmp_path / "a.png")
  a = prepare_inputs(proc, "Hi", [tmp_path / "a.png"])
  b = prepare_inputs(proc, "Hi", np.asarray(img))
  np.testing.assert_array_equal(a.input_ids, b.input_ids)
  np.testing.assert_array_equal(a.pixel_values, b.pixel_values)


def test_text_only(proc):
  got = prepare_inputs(proc, ["Hello there.", "Hi"])
  assert got.pixel_values is None and got.image_grid_thw is None
  assert got.rope_delta.tolist() == [0, 0]
  n = int(got.lengths[0])
  np.testing.assert_array_equal(got.positions[:, 0, :n], np.broadcast_to(np.arange(n), (3, n)))
  assert (got.input_ids[1, got.lengths[1]:] == proc.pad_token_id).all()
  assert (got.positions[:, 1, got.lengths[1]:] == 0).all()


def test_raw_ids_single_or_expanded_placeholders(proc):
  images = [_img(64, 96, 0), _img(32, 32, 1)]
  chat = prepare_inputs(proc, "Describe.", images)
  single = proc.tokenizer.encode(proc.tokenizer.render_chat(_messages("Describe.", images)))
  raw = prepare_inputs_from_ids(proc, single, images)
  expanded = prepare_inputs_from_ids(proc, [chat.input_ids[0].tolist()], [images])
  for got in (raw, expanded):
    np.testing.assert_array_equal(got.input_ids, chat.input_ids)
    np.testing.assert_array_equal(got.positions, chat.positions)
    np.testing.assert_array_equal(got.rope_delta, chat.rope_delta)
    np.testing.assert_array_equal(got.pixel_values, chat.pixel_values)


def test_placeholder_count_mismatch(proc):
  with pytest.raises(ValueError, match="prompt has 2 image placeholders but 1 images were given"):
    prepare_inputs(proc, "look: <|image_pad|>", _img(32, 32, 0))
  with pytest.raises(ValueError, match="row 1: prompt has 0 image placeholders but 1 images"):
    prepare_inputs_from_ids(proc, [[1, 2, IMG, 3], [4, 5]], [_img(32, 32, 0), _img(32, 32, 1)])
  with pytest.raises(ValueError, match="has 3 tokens but grid \\(1, 4, 6\\) needs 6"):
    prepare_inputs_from_ids(proc, [1, VS, IMG, IMG, IMG, VE], _img(64, 96, 0))
  with pytest.raises(ValueError, match="one entry .* per prompt"):
    prepare_inputs(proc, ["a", "b"], [_img(32, 32, 0)])


def test_chat_template_precedence(tmp_path, ckpt):
  d = tmp_path / "t"
  d.mkdir()
  (d / "tokenizer.json").write_text((ckpt / "tokenizer.json").read_text())
  assert Tokenizer.from_pretrained(str(d)).chat_template == QWEN3_VL_CHAT_TEMPLATE  # fallback
  assert load_chat_template(str(d)) is None
  (d / "tokenizer_config.json").write_text(json.dumps({"chat_template": "C"}))
  assert load_chat_template(str(d)) == "C"
  (d / "chat_template.json").write_text(json.dumps({"chat_template": "B"}))
  assert load_chat_template(str(d)) == "B"
  (d / "chat_template.jinja").write_text("A")
  assert load_chat_template(str(d)) == "A"


def test_tokenizer_roundtrip_and_lookup(proc):
  tok = proc.tokenizer
  text = "<|im_start|>user\nhéllo, wörld 42!<|im_end|>\n"
  assert tok.decode(tok.encode(text)) == text
  assert tok.token_id("<|image_pad|>") == IMG and tok.token_id("<|vision_start|>") == VS
  assert tok.eos_token_id == tok.token_id("<|im_end|>")
  assert tok.vocab_size == 512
  with pytest.raises(ValueError, match="not in the tokenizer vocab"):
    tok.token_id("<|nope|>")


def test_tiny_tokenizer_loads_in_transformers(ckpt):
  pytest.importorskip("transformers")
  from transformers import AutoTokenizer, PreTrainedTokenizerFast
  ours = Tokenizer.from_pretrained(str(ckpt))
  text = ours.render_chat(_messages("Is the cat on the table?", [None]))
  for hf_tok in (PreTrainedTokenizerFast(tokenizer_file=str(ckpt / "tokenizer.json")),
                 AutoTokenizer.from_pretrained(str(ckpt))):
    assert hf_tok(text, add_special_tokens=False)["input_ids"] == ours.encode(text)
    assert hf_tok.convert_tokens_to_ids("<|image_pad|>") == IMG


def test_processor_rejects_disagreeing_ids(ckpt):
  with pytest.raises(ValueError, match="image_token_id=7 but the tokenizer maps <\\|image_pad\\|> to 502"):
    Processor.from_pretrained(str(ckpt), image_token_id=7)
