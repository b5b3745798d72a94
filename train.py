"""Train the GLANCE block head on the frozen target's own generations. See --help."""

from glance_jax.train.cli import cli_main

if __name__ == "__main__":
  cli_main()
