"""Testbed suite versions: "v1" (suite.py, the first testbed), "v2" (suite_v2.py, issue 14:
uncertain fields in every task) and "v3" (suite_v3.py: v2 with a caption whose uncertainty runs over
several tokens) and "v4" (suite_v4.py: v3 with a longer caption). A built testbed directory records its
version in suite.json; a directory without one is v1 (the testbed shipped before versions)."""

from __future__ import annotations

import json
import pathlib
from types import ModuleType

VERSIONS = ("v1", "v2", "v3", "v4")
MARKER = "suite.json"


def get(version: str) -> ModuleType:
  """The suite module of a version (TASKS, GROUNDED, QUESTIONS, SIZES, render, write_task)."""
  if version == "v1":
    from glance_jax.testbed import suite
    return suite
  if version == "v2":
    from glance_jax.testbed import suite_v2
    return suite_v2
  if version == "v3":
    from glance_jax.testbed import suite_v3
    return suite_v3
  if version == "v4":
    from glance_jax.testbed import suite_v4
    return suite_v4
  raise ValueError(f"unknown testbed suite version {version!r}; expected one of {VERSIONS}")


def read_version(testbed_dir: str | pathlib.Path) -> str:
  """The suite version a built testbed directory was made with ("v1" when it records none)."""
  path = pathlib.Path(testbed_dir) / MARKER
  if not path.is_file():
    return "v1"
  try:
    version = json.loads(path.read_text())["suite_version"]
  except (ValueError, KeyError, TypeError) as e:
    raise ValueError(f"{path}: expected {{\"suite_version\": ...}} ({type(e).__name__}: {e})") from None
  get(version)  # an unknown version is an error here, naming it
  return version


def write_version(testbed_dir: str | pathlib.Path, version: str) -> None:
  get(version)
  path = pathlib.Path(testbed_dir)
  path.mkdir(parents=True, exist_ok=True)
  (path / MARKER).write_text(json.dumps({"suite_version": version}) + "\n")
