"""One progress bar for every long job (checkpoint loading, regeneration, training, the bench).

tqdm draws it when installed; otherwise a plain counter line on stderr, so a job runs (and its tests
pass) without tqdm. `enabled=False` draws nothing: callers never branch on whether a bar exists.
"""

from __future__ import annotations

import sys
from typing import TextIO


class Progress:
  def __init__(self, total: int, desc: str = "", *, unit: str = "it", initial: int = 0,
               unit_scale: bool = False, enabled: bool = True, stream: TextIO | None = None):
    self.total, self.n, self.desc, self.enabled = int(total), int(initial), desc, enabled
    self.stream = stream or sys.stderr
    self._bar = None
    if enabled:
      try:
        from tqdm import tqdm
      except ImportError:
        pass
      else:
        self._bar = tqdm(total=self.total, initial=self.n, desc=desc, unit=unit, unit_scale=unit_scale,
                         file=self.stream, leave=True)

  def describe(self, desc: str) -> None:
    """Names what runs now (e.g. the task being timed)."""
    self.desc = desc
    if self._bar is not None:
      self._bar.set_description(desc, refresh=False)

  def set_postfix(self, **metrics) -> None:
    if self._bar is not None:
      self._bar.set_postfix(**metrics)

  def update(self, n: int = 1) -> None:
    self.n += n
    if self._bar is not None:
      self._bar.update(n)
    elif self.enabled:  # carriage return: one line that rewrites itself
      self.stream.write(f"\r{self.desc}: {self.n}/{self.total}")
      self.stream.flush()

  def write(self, line: str) -> None:
    """A message line that does not break the bar."""
    if self._bar is not None:
      self._bar.write(line, file=self.stream)
    else:
      self.stream.write(("\n" if self.enabled and self.n else "") + line + "\n")
      self.stream.flush()

  def close(self) -> None:
    if self._bar is not None:
      self._bar.close()
    elif self.enabled and self.n:
      self.stream.write("\n")
      self.stream.flush()
