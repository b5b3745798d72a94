"""One-line checkpoint errors and the message helpers every io module shares.

One line because these messages end up in logs and test output next to other failures: a
multi-line dump of 750 keys hides the two that matter, so long lists are truncated with counts.
"""

from __future__ import annotations

from collections.abc import Sequence

MAX_LISTED = 8  # problems / keys shown per category before "... and N more".


def one_line(text: str) -> str:
  return " ".join(str(text).split())


class CheckpointError(ValueError):
  """A checkpoint that cannot be found, parsed or matched; the message is always one line."""

  def __init__(self, message: str):
    super().__init__(one_line(message))


def truncated_list(items: Sequence[str], limit: int = MAX_LISTED) -> str:
  """'a, b, c' or 'a, b, ... and 7 more' so a message stays readable whatever the count."""
  shown = ", ".join(items[:limit])
  return shown if len(items) <= limit else f"{shown}, ... and {len(items) - limit} more"


def problems_message(head: str, problems: Sequence[str]) -> str:
  """'head: N problem(s): p1; p2; ... and K more' on one line."""
  n = len(problems)
  shown = "; ".join(one_line(p) for p in problems[:MAX_LISTED])
  more = f"; ... and {n - MAX_LISTED} more" if n > MAX_LISTED else ""
  return f"{head}: {n} problem{'s' if n != 1 else ''}: {shown}{more}"


def format_nbytes(n: int) -> str:
  """Human-readable byte count (binary units), e.g. 17.5 GiB, for logs and progress."""
  value = float(n)
  for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
    if abs(value) < 1024 or unit == "TiB":
      return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
    value /= 1024
  raise AssertionError("unreachable")
