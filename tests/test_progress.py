"""glance_jax.progress: without tqdm a counter line that messages do not break; disabled draws nothing."""

import io
import sys

from glance_jax.progress import Progress


def test_counter_without_tqdm(monkeypatch):
  monkeypatch.setitem(sys.modules, "tqdm", None)   # `from tqdm import tqdm` now raises ImportError
  out = io.StringIO()
  bar = Progress(3, "regenerate", stream=out)
  bar.update(2)
  bar.write("skipping row 7")
  bar.describe("table")
  bar.update()
  bar.set_postfix(loss=1.0)
  bar.close()
  assert out.getvalue() == "\rregenerate: 2/3\nskipping row 7\n\rtable: 3/3\n"


def test_disabled_draws_nothing_but_messages():
  out = io.StringIO()
  bar = Progress(5, "train", initial=2, enabled=False, stream=out)
  bar.update(3)
  bar.close()
  assert out.getvalue() == "" and bar.n == 5
  bar.write("note")
  assert out.getvalue() == "note\n"
