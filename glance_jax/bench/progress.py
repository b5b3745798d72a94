"""A progress line on stderr for `decode.py bench`: tqdm when installed, else a plain counter.

Why a wrapper: the bench must run (and its tests pass) where tqdm is missing, and callers should not
care which of the two draws the line.
"""

from __future__ import annotations

import sys
from typing import TextIO


class Progress:
  """`update()` once per generate() call; `describe(text)` names what runs now (task / compile)."""

  def __init__(self, total: int, desc: str = "bench", stream: TextIO | None = None):
    self.total, self.n, self.desc = int(total), 0, desc
    self.stream = stream or sys.stderr
    try:
      from tqdm import tqdm
    except ImportError:
      self._bar = None
    else:
      self._bar = tqdm(total=self.total, desc=desc, unit="run", file=self.stream, leave=True)

  def describe(self, desc: str) -> None:
    self.desc = desc
    if self._bar is not None:
      self._bar.set_description(desc, refresh=False)

  def update(self, n: int = 1) -> None:
    self.n += n
    if self._bar is not None:
      self._bar.update(n)
    else:  # carriage return: one line that rewrites itself
      self.stream.write(f"\r{self.desc}: {self.n}/{self.total}")
      self.stream.flush()

  def write(self, line: str) -> None:
    """A message line that does not break the bar."""
    if self._bar is not None:
      self._bar.write(line, file=self.stream)
    else:
      self.stream.write(("\n" if self.n else "") + line + "\n")
      self.stream.flush()

  def close(self) -> None:
    if self._bar is not None:
      self._bar.close()
    elif self.n:
      self.stream.write("\n")
      self.stream.flush()
