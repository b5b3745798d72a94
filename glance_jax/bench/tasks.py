"""Task files for `decode.py bench`: one JSONL task file (glance_jax/data/records.py) per task, read
with every problem captured instead of raised, so one bad file or row never stops the others.

A problem is a dict {file, line, id, task, message, fatal}: `fatal` when the whole task cannot run
(file missing or unreadable, no usable rows), else one skipped row (line and id from the reader's
`file:line: id 'x': problem` message).
"""

from __future__ import annotations

import ast
import dataclasses
import logging
import os
import re
from typing import Any

from glance_jax.data.records import PromptRecord, read_task_file

# records.Problems logs each skipped row as "<file>:<line>: id '<id>': <problem>; skipped".
_ROW_MESSAGE = re.compile(r"^(?P<file>.*):(?P<line>\d+): id (?P<id>'.*'|\?): (?P<msg>.*?)(; skipped)?$")


@dataclasses.dataclass
class BenchTask:
  """One task's usable prompts (in file order, at most `limit`) and where they came from."""
  name: str
  file: str
  records: list[PromptRecord]
  skipped_rows: int = 0


def problem(message: str, *, file: str | None = None, line: int | None = None, id: str | None = None,
            task: str | None = None, fatal: bool = False) -> dict[str, Any]:
  return {"file": file, "line": line, "id": id, "task": task, "message": message, "fatal": fatal}


class _Capture(logging.Handler):
  """Collects the reader's per-row warnings (it logs and skips; we also want them in the report)."""

  def __init__(self):
    super().__init__(logging.WARNING)
    self.messages: list[str] = []

  def emit(self, record: logging.LogRecord) -> None:
    self.messages.append(record.getMessage())


def _row_problem(text: str, path: str) -> dict[str, Any] | None:
  m = _ROW_MESSAGE.match(text)
  if m is None:
    return None  # the reader's closing "skipped k of n" summary; we count rows ourselves
  rid = None if m["id"] == "?" else ast.literal_eval(m["id"])
  return problem(f"{text.removesuffix('; skipped')}; row skipped", file=path, line=int(m["line"]),
                 id=rid)


def load_task(path: str, limit: int | None = None) -> tuple[BenchTask | None, list[dict[str, Any]]]:
  """(task or None, problems). None (with a fatal problem) when nothing in the file can run."""
  path = os.fspath(path)
  logger = logging.getLogger("glance_jax.data.records")
  capture = _Capture()
  logger.addHandler(capture)
  try:
    records = read_task_file(path, on_error="skip", verify_images=True)
  except FileNotFoundError:
    return None, [problem(f"{path}: task file not found", file=path, fatal=True)]
  except (OSError, UnicodeDecodeError) as e:
    return None, [problem(f"{path}: cannot read task file ({type(e).__name__}: {e})", file=path,
                          fatal=True)]
  finally:
    logger.removeHandler(capture)
  problems = [p for p in (_row_problem(t, path) for t in capture.messages) if p is not None]
  if not records:
    why = f"all {len(problems)} rows were skipped" if problems else "no rows"
    return None, problems + [problem(f"{path}: no usable prompts ({why})", file=path, fatal=True)]
  names = sorted({r.task for r in records})
  name = names[0] if len(names) == 1 else os.path.splitext(os.path.basename(path))[0]
  for p in problems:
    p["task"] = name
  if limit is not None:
    records = records[:limit]
  return BenchTask(name=name, file=path, records=records, skipped_rows=len(problems)), problems


def load_tasks(paths: list[str], limit: int | None = None
               ) -> tuple[list[BenchTask], list[dict[str, Any]]]:
  """Every file's task (names made unique: a repeated task name gets `#2`, `#3`, ...) and all
  problems, in file order."""
  tasks: list[BenchTask] = []
  problems: list[dict[str, Any]] = []
  for path in paths:
    task, probs = load_task(path, limit)
    if task is not None:
      taken = {t.name for t in tasks}
      base, k = task.name, 2
      while task.name in taken:
        task.name, k = f"{base}#{k}", k + 1
      for p in probs:
        p["task"] = task.name
      tasks.append(task)
    problems.extend(probs)
  return tasks, problems
