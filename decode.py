"""Decode with a Qwen3-VL target and a GLANCE head. `python decode.py` runs the embedded default."""

from glance_jax.cli.decode import cli_main

if __name__ == "__main__":
  cli_main()
