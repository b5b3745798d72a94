"""Where the shipped testbed lives: testbed/ at the repository root (target/, head/, tasks/), or, after
`pip install .`, the package data glance_jax/testbed/shipped/ (pyproject.toml maps testbed/ there)."""

from __future__ import annotations

import pathlib

REPO = pathlib.Path(__file__).resolve().parents[2]
_INSTALLED = pathlib.Path(__file__).resolve().parent / "shipped"
SHIPPED = REPO / "testbed" if (REPO / "testbed").is_dir() or not _INSTALLED.is_dir() else _INSTALLED
TARGET = SHIPPED / "target"
HEAD = SHIPPED / "head"
TASKS = SHIPPED / "tasks"
EAGLE3 = SHIPPED / "eagle3"      # the EAGLE-3 rival trained on the head's rows (midlayer format), where built
DRAFT = SHIPPED / "draft"        # the two-model rival's draft model (HF layout), where built


def available() -> bool:
  """True when the shipped target, head and held-out task files are all present."""
  return (TARGET / "config.json").is_file() and (HEAD / "config.json").is_file() and TASKS.is_dir()


def suite():
  """The suite module the shipped testbed was built with (its suite.json; glance_jax/testbed/suites.py)."""
  from glance_jax.testbed import suites
  return suites.get(suites.read_version(SHIPPED))


def task_files() -> list[pathlib.Path]:
  """The shipped held-out task files, one per task, grounded first."""
  return [TASKS / f"{t}_heldout.jsonl" for t in suite().TASKS]


def rival(kind: str) -> str | None:
  """The shipped rival's directory ("eagle3" or "draft") when the shipped testbed has one, else None."""
  path = {"eagle3": EAGLE3, "draft": DRAFT}[kind]
  return str(path) if (path / "config.json").is_file() else None
