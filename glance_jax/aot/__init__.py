"""Ahead-of-time compiles of every program for real TPU topologies from a CPU host (docs/tpu.md)."""

from glance_jax.aot.topology import configure_env

configure_env()
