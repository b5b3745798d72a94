"""Decode with a Qwen3-VL target. `python decode.py` runs the embedded default; see --help."""

from glance_jax.decode.cli import main

if __name__ == "__main__":
  main()
