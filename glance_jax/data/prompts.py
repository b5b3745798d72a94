"""Prompt templates: the one place that says what the target is asked for each task.

Why one place: the draft head is trained on the target's own greedy answers to these exact prompts,
and the benchmarks must ask the same way, so a template change here changes both. Prompts are
copied into exported task files and prepared TFDS copies: after a change, re-export the former and
bump `tasks.TFDS_VERSION` (or delete <root>/_tfds) for the latter. The wording follows the paper-style / LLaVA-style
evaluation instructions used for Qwen-VL models: a one-sentence caption for COCO, and for VQA-style
tasks the question followed by a short-answer instruction on its own line.
"""

from __future__ import annotations

CAPTION_PROMPT = "Describe this image in one sentence."
VQA_INSTRUCTION = "Answer the question using a single word or phrase."


def caption_prompt() -> str:
  """The captioning prompt (COCO-Caption)."""
  return CAPTION_PROMPT


def vqa_prompt(question: str) -> str:
  """`question` (whitespace-trimmed), a newline, then the short-answer instruction."""
  return f"{question.strip()}\n{VQA_INSTRUCTION}"
