"""Tokenizer wrapper and chat-template rendering, without transformers.

`Tokenizer` wraps a `tokenizers.Tokenizer` loaded from a checkpoint's `tokenizer.json` and carries the
checkpoint's chat template. Rendering mirrors transformers' `apply_chat_template`: a sandboxed jinja2
environment with `trim_blocks` and `lstrip_blocks`, the `tojson` filter without HTML escaping, and the
`raise_exception` / `strftime_now` globals, so a template renders to the same string as in transformers.
"""

from __future__ import annotations

import datetime
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment
import tokenizers

# The Qwen3-VL Instruct chat template (Qwen/Qwen3-VL-8B-Instruct): no default system prompt; every image
# item renders as <|vision_start|><|image_pad|><|vision_end|> where it appears in the content list.
# Used only when a checkpoint ships no template of its own.
QWEN3_VL_CHAT_TEMPLATE = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}
        {%- if messages[0].content is string %}
            {{- messages[0].content }}
        {%- else %}
            {%- for content in messages[0].content %}
                {%- if 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '\\n\\n' }}
    {%- endif %}
    {{- "# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\\n' }}
        {%- if messages[0].content is string %}
            {{- messages[0].content }}
        {%- else %}
            {%- for content in messages[0].content %}
                {%- if 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- set image_count = namespace(value=0) %}
{%- set video_count = namespace(value=0) %}
{%- for message in messages %}
    {%- if message.role == "user" %}
        {{- '<|im_start|>' + message.role + '\\n' }}
        {%- if message.content is string %}
            {{- message.content }}
        {%- else %}
            {%- for content in message.content %}
                {%- if content.type == 'image' or 'image' in content or 'image_url' in content %}
                    {%- set image_count.value = image_count.value + 1 %}
                    {%- if add_vision_id %}Picture {{ image_count.value }}: {% endif -%}
                    <|vision_start|><|image_pad|><|vision_end|>
                {%- elif content.type == 'video' or 'video' in content %}
                    {%- set video_count.value = video_count.value + 1 %}
                    {%- if add_vision_id %}Video {{ video_count.value }}: {% endif -%}
                    <|vision_start|><|video_pad|><|vision_end|>
                {%- elif 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role + '\\n' }}
        {%- if message.content is string %}
            {{- message.content }}
        {%- else %}
            {%- for content_item in message.content %}
                {%- if 'text' in content_item %}
                    {{- content_item.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and message.content) or (not loop.first) %}
                    {{- '\\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {%- if message.content is string %}
            {{- message.content }}
        {%- else %}
            {%- for content in message.content %}
                {%- if content.type == 'image' or 'image' in content or 'image_url' in content %}
                    {%- set image_count.value = image_count.value + 1 %}
                    {%- if add_vision_id %}Picture {{ image_count.value }}: {% endif -%}
                    <|vision_start|><|image_pad|><|vision_end|>
                {%- elif content.type == 'video' or 'video' in content %}
                    {%- set video_count.value = video_count.value + 1 %}
                    {%- if add_vision_id %}Video {{ video_count.value }}: {% endif -%}
                    <|vision_start|><|video_pad|><|vision_end|>
                {%- elif 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

Message = Mapping[str, Any]


class _GenerationTag(jinja2.ext.Extension):
  """Accepts `{% generation %}...{% endgeneration %}` (used by some templates) and renders the body as is."""

  tags = {"generation"}

  def parse(self, parser):
    lineno = next(parser.stream).lineno
    body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
    return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

  def _render(self, caller):
    return caller()


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -> str:
  # jinja's own tojson escapes HTML characters; transformers overrides it with plain json.dumps.
  return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise_exception(message: str):
  raise jinja2.exceptions.TemplateError(message)


_TEMPLATE_CACHE: dict[str, jinja2.Template] = {}


def compile_chat_template(template: str) -> jinja2.Template:
  """Compiles `template` in the same jinja environment transformers uses (cached by text)."""
  compiled = _TEMPLATE_CACHE.get(template)
  if compiled is None:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[_GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    compiled = _TEMPLATE_CACHE[template] = env.from_string(template)
  return compiled


def render_chat_template(template: str, messages: Sequence[Message], add_generation_prompt: bool = True,
                         **kwargs: Any) -> str:
  """Renders HF-style `messages` (role, content = str or [{type: image|text, ...}]) with `template`.

  Extra kwargs (e.g. `add_vision_id=True`, `tools=[...]`, special-token strings) are template variables.
  """
  for i, m in enumerate(messages):
    if not isinstance(m, Mapping) or "role" not in m:
      raise ValueError(f"chat message {i} must be a dict with a 'role' key, got {m!r:.80}")
  kwargs.setdefault("tools", None)
  kwargs.setdefault("documents", None)
  return compile_chat_template(template).render(
      messages=[dict(m) for m in messages], add_generation_prompt=add_generation_prompt, **kwargs)


def _read_json(path: str) -> dict:
  try:
    with open(path, encoding="utf-8") as f:
      return json.load(f)
  except (OSError, json.JSONDecodeError) as e:
    raise ValueError(f"cannot read JSON file {path}: {e}") from None


def load_chat_template(checkpoint_dir: str) -> str | None:
  """The checkpoint's chat template: chat_template.jinja, then chat_template.json, then tokenizer_config.json."""
  path = os.path.join(checkpoint_dir, "chat_template.jinja")
  if os.path.isfile(path):
    with open(path, encoding="utf-8") as f:
      return f.read()
  path = os.path.join(checkpoint_dir, "chat_template.json")
  if os.path.isfile(path):
    template = _read_json(path).get("chat_template")
    if template:
      return _pick_template(template, path)
  path = os.path.join(checkpoint_dir, "tokenizer_config.json")
  if os.path.isfile(path):
    template = _read_json(path).get("chat_template")
    if template:
      return _pick_template(template, path)
  return None


def _pick_template(template: str | list, path: str) -> str:
  """A template field is a string, or a list of {name, template} of which "default" is used."""
  if isinstance(template, str):
    return template
  named = {t.get("name"): t.get("template") for t in template if isinstance(t, Mapping)}
  if "default" not in named:
    raise ValueError(f"{path}: 'chat_template' is a list without a 'default' entry (names: {sorted(named)})")
  return named["default"]


class Tokenizer:
  """A checkpoint's `tokenizer.json` plus its chat template and named special tokens.

  `encode` adds no special tokens by default: Qwen prompts carry their own `<|im_start|>` markers, and
  transformers tokenizes rendered chat text with `add_special_tokens=False`.
  """

  def __init__(self, tokenizer: tokenizers.Tokenizer, chat_template: str | None = None,
               special_tokens: Mapping[str, str] | None = None):
    self.tokenizer = tokenizer
    self.chat_template = chat_template if chat_template is not None else QWEN3_VL_CHAT_TEMPLATE
    # e.g. {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}: exposed to the chat template.
    self.special_tokens = dict(special_tokens or {})

  @classmethod
  def from_pretrained(cls, checkpoint_dir: str) -> "Tokenizer":
    """Loads `tokenizer.json`, the chat template (fallback: QWEN3_VL_CHAT_TEMPLATE) and tokenizer_config names."""
    path = os.path.join(checkpoint_dir, "tokenizer.json")
    if not os.path.isfile(path):
      raise ValueError(f"tokenizer file not found: {path}")
    try:
      tok = tokenizers.Tokenizer.from_file(path)
    except Exception as e:  # tokenizers raises a bare Exception on malformed files.
      raise ValueError(f"cannot load tokenizer {path}: {e}") from None
    special = {}
    config_path = os.path.join(checkpoint_dir, "tokenizer_config.json")
    if os.path.isfile(config_path):
      config = _read_json(config_path)
      for key in ("bos_token", "eos_token", "pad_token", "unk_token"):
        value = config.get(key)
        if isinstance(value, Mapping):  # serialized AddedToken
          value = value.get("content")
        if isinstance(value, str):
          special[key] = value
    return cls(tok, load_chat_template(checkpoint_dir), special)

  @property
  def vocab_size(self) -> int:
    """Size including added tokens (ids may still be sparse)."""
    return self.tokenizer.get_vocab_size(with_added_tokens=True)

  def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
    return self.tokenizer.encode(text, add_special_tokens=add_special_tokens).ids

  def encode_batch(self, texts: Sequence[str], add_special_tokens: bool = False) -> list[list[int]]:
    return [e.ids for e in self.tokenizer.encode_batch(list(texts), add_special_tokens=add_special_tokens)]

  def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
    return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

  def maybe_token_id(self, token: str) -> int | None:
    """Id of a single token given by its text (e.g. "<|image_pad|>"), or None if it is not in the vocab."""
    return self.tokenizer.token_to_id(token)

  def token_id(self, token: str) -> int:
    """Id of a single token given by its text; ValueError if the vocab lacks it."""
    i = self.tokenizer.token_to_id(token)
    if i is None:
      raise ValueError(f"token {token!r} is not in the tokenizer vocab")
    return i

  @property
  def eos_token_id(self) -> int | None:
    """tokenizer_config's eos_token, else <|im_end|> (the Instruct turn terminator)."""
    return self.maybe_token_id(self.special_tokens.get("eos_token", "<|im_end|>"))

  @property
  def pad_token_id(self) -> int | None:
    """tokenizer_config's pad_token, else <|endoftext|>."""
    return self.maybe_token_id(self.special_tokens.get("pad_token", "<|endoftext|>"))

  def render_chat(self, messages: Sequence[Message], add_generation_prompt: bool = True, **kwargs: Any) -> str:
    """Renders messages with this checkpoint's chat template (special-token strings are template variables)."""
    return render_chat_template(self.chat_template, messages, add_generation_prompt,
                                **{**self.special_tokens, **kwargs})

  def apply_chat_template(self, messages: Sequence[Message], add_generation_prompt: bool = True,
                          **kwargs: Any) -> list[int]:
    """render_chat + encode (no special tokens added), as transformers' apply_chat_template(tokenize=True)."""
    return self.encode(self.render_chat(messages, add_generation_prompt, **kwargs))
