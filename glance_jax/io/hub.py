"""Resolving a checkpoint argument: a local directory, or a Hugging Face hub repo id to download."""

from __future__ import annotations

import os
import pathlib
import re

from glance_jax.io.errors import CheckpointError, one_line

_HUB_PATTERNS = ["*.json", "*.safetensors", "*.jinja", "*.txt", "tokenizer*"]
_REPO_ID_RE = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")


def _looks_local(text: str) -> bool:
  """True when `text` is meant as a filesystem path, so a typo must not trigger a hub download."""
  if os.path.exists(os.path.expanduser(text)):
    return True
  if text.startswith(("/", "./", "../", "~")) or text in (".", ".."):
    return True
  seps = {os.sep} | ({os.altsep} if os.altsep else set())
  if any(s in text for s in seps):
    return not _REPO_ID_RE.match(text)
  return False


def resolve_checkpoint_dir(path_or_repo_id: str) -> pathlib.Path:
  """An existing local directory, or the local snapshot of a Hugging Face hub repo.

  Only the files a model needs are downloaded (configs, weights, tokenizer, chat template),
  not e.g. the `*.bin`/`*.pth` duplicates some repos also carry.
  """
  text = os.fspath(path_or_repo_id)
  if not text:
    raise CheckpointError("checkpoint directory not found: empty path / repo id")
  local = pathlib.Path(text).expanduser()
  if local.is_dir():
    return local
  if _looks_local(text):
    if local.exists():
      raise CheckpointError(
          f"checkpoint directory not found: {text} is a file, expected the directory holding "
          f"the model's *.safetensors and config.json")
    raise CheckpointError(f"checkpoint directory not found: {text}")
  try:
    import huggingface_hub  # pylint: disable=import-outside-toplevel
  except ImportError as e:
    raise CheckpointError(
        f"'{text}' is not a local directory and huggingface_hub is not installed, so it cannot be "
        f"fetched as a hub repo id (pip install huggingface_hub)") from e
  try:
    return pathlib.Path(
        huggingface_hub.snapshot_download(text, allow_patterns=list(_HUB_PATTERNS)))
  except Exception as e:  # Offline, DNS, 401/404, bad id: all mean "no checkpoint here".
    raise CheckpointError(
        f"could not fetch hub repo '{text}': the Hugging Face hub was not reachable (offline or "
        f"no network) or the repo does not exist / is not accessible "
        f"({type(e).__name__}: {one_line(str(e))[:300]})") from e
