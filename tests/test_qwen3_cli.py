"""`decode.py --model <text-only Qwen3> --head <DFlash head> --prompt ...` with no image: the prompt is
rendered with the checkpoint's own chat template with thinking disabled, and glance emits AR's tokens."""

import numpy as np
import pytest

from glance_jax.config import tiny_config
from glance_jax.cli.decode import main
from glance_jax.head import HeadConfig, save_head
from glance_jax.head.model import abstract_head
from glance_jax.qwen3_vl.inputs import Processor, build_messages, prepare_inputs
from glance_jax.qwen3_vl.weights import abstract_model
from glance_jax.testing.checkpoint import write_checkpoint
from glance_jax.testing.random_weights import lively

# Qwen3's template behaviour that matters here (written for this test): string content, and an empty
# think block after the generation prompt when enable_thinking is false.
QWEN3_STYLE_TEMPLATE = (
    "{%- for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{ '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}")


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
  root = tmp_path_factory.mktemp("cli")
  cfg = tiny_config(text_only=True, tie=True)
  params = lively(abstract_model(cfg)[1], 3)
  write_checkpoint(root / "qwen3", cfg, params, chat_template=QWEN3_STYLE_TEMPLATE)
  hc = HeadConfig.for_target(cfg, num_layers=2, block_size=8)
  save_head(root / "head", hc, lively(abstract_head(hc)[1], 4))
  return root


def test_text_only_processor_renders_without_thinking(ckpt):
  proc = Processor.from_pretrained(str(ckpt / "qwen3"))
  assert proc.text_only and proc.chat_kwargs == {"enable_thinking": False}
  text = proc.tokenizer.render_chat(build_messages("hi", 0, text_only=True), **proc.chat_kwargs)
  assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
  inputs = prepare_inputs(proc, "hi")
  assert inputs.pixel_values is None and (inputs.positions[0] == np.arange(inputs.input_ids.shape[1])).all()
  with pytest.raises(ValueError, match="text-only Qwen3"):
    prepare_inputs(proc, "hi", np.zeros((32, 32, 3), np.uint8))


def test_decode_cli_with_a_text_only_model_and_head_equals_ar(ckpt):
  common = ["--model", str(ckpt / "qwen3"), "--prompt", "the quick brown fox", "--max-new-tokens", "12"]
  ar = main(common + ["--method", "ar"])
  gl = main(common + ["--head", str(ckpt / "head"), "--method", "glance", "--budget", "7"])
  assert gl["tokens"] == ar["tokens"] and len(ar["tokens"]) > 0
