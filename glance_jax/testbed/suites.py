"""Testbed suite versions: one module each, registered here by version.

A suite module (suite_v4.py is the model) defines VERSION, TASKS, GROUNDED, OPEN, QUESTIONS, SIZES,
its records (`STREAM`, a glance_jax/testbed/stream.py Stream, and its bound `record`, `render`,
`train_record`, `write_task`, `draw_record`, `reserved_scenes`), `record_index`, HELDOUT_RESERVED,
TARGET_TRAIN (the build's target recipe: TargetTrainConfig fields; init_from=<version> continues that
version's target), ANSWER_TOKENS (a max_new_tokens that covers every answer) and `reading(answer)`
(the answer's grounded part, which evaluation scores). Adding a version = its module
+ one line in _MODULES.

A built testbed directory records its version in suite.json ({"suite_version": ...}).
"""

from __future__ import annotations

import importlib
import json
import pathlib
from types import ModuleType

_MODULES = {
    "v4": "glance_jax.testbed.suite_v4",
    "v5": "glance_jax.testbed.suite_v5",
    "v5b": "glance_jax.testbed.suite_v5b",   # v5 with the caption's forks: shipped stops 45-49
    "v5c": "glance_jax.testbed.suite_v5c",   # v5b with forks in runs in every explanation (stop 47)
    "v5d": "glance_jax.testbed.suite_v5d",   # v5c with the lines cut to forks, longer caption lists (stop 48)
    "v5e": "glance_jax.testbed.suite_v5e",   # v5d with no lines opener, verbs of few pieces (stop 48)
    "v5f": "glance_jax.testbed.suite_v5f",   # v5e with the lines one verb and lists of two or three (stop 49)
    "v5g": "glance_jax.testbed.suite_v5g",   # v5f with the lines lists of two to four: shipped stops 50-51
    "v5h": "glance_jax.testbed.suite_v5h",   # v5g with the lines read in their clauses, unequal forks (stop 51)
    "v5i": "glance_jax.testbed.suite_v5i",   # v5h with each lines clause led by its words (stop 51)
    "v5j": "glance_jax.testbed.suite_v5j",   # v5g with the lines' answers opened by "Read:" (stop 51)
    "v5k": "glance_jax.testbed.suite_v5k",   # v5j with the lines' lists of two to five (stop 51)
    "v5l": "glance_jax.testbed.suite_v5l",   # v5j with the lines' lists of 2, 3, 4, 4: shipped since stop 52
    "v5m": "glance_jax.testbed.suite_v5m",   # v5l with the caption's sentences bare adjective lists (stop 52)
}
VERSIONS = tuple(_MODULES)
DEFAULT = "v5l"         # the version testbed/ ships (its suite.json; tests/test_testbed.py checks)
MARKER = "suite.json"


def get(version: str) -> ModuleType:
  """The suite module of a version."""
  if version not in _MODULES:
    raise ValueError(f"unknown testbed suite version {version!r}; expected one of {VERSIONS}")
  return importlib.import_module(_MODULES[version])


def read_version(testbed_dir: str | pathlib.Path) -> str:
  """The suite version a built testbed directory was made with (its suite.json)."""
  path = pathlib.Path(testbed_dir) / MARKER
  if not path.is_file():
    raise ValueError(f"{path}: not found; a built testbed records its suite version there "
                     f"(this code builds {', '.join(VERSIONS)})")
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

