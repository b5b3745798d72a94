"""Trace counting for the one-compile tests, without a counter in the library.

`traced(module, name, static_argnames, donate_argnames, n=None)` swaps `module.name`, a jax.jit-ed
function, for a fresh jit of its own Python function (`__wrapped__`) with the same static and
donated arguments, wrapped to record each trace's static arguments (and, with n, to fail past n
traces: chex.assert_max_traces). Callers that look the function up through the module at call
time (generate does) run the checked program; the swap is undone on exit.
"""

from __future__ import annotations

import contextlib
import functools
import inspect

import chex
import jax


@contextlib.contextmanager
def traced(module, name: str, static_argnames: tuple[str, ...], donate_argnames: tuple[str, ...] = (),
           n: int | None = None):
  original = getattr(module, name)
  fn = original.__wrapped__
  names = list(inspect.signature(fn).parameters)
  seen: list[dict] = []

  @functools.wraps(fn)
  def recording(*args, **kwargs):
    bound = dict(zip(names, args)) | kwargs
    seen.append({k: bound[k] for k in static_argnames if k in bound})
    return fn(*args, **kwargs)

  body = chex.assert_max_traces(recording, n) if n is not None else recording
  chex.clear_trace_counter()
  setattr(module, name, jax.jit(body, static_argnames=static_argnames, donate_argnames=donate_argnames))
  try:
    yield seen
  finally:
    setattr(module, name, original)
