"""`python train.py --config configs/train_tiny.py [key=value ...]`: train the GLANCE head."""

from __future__ import annotations

import argparse
import logging
import sys


def parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(prog="train.py", description=__doc__)
  p.add_argument("--config", required=True, help="Python file defining get_config() -> TrainConfig")
  p.add_argument("overrides", nargs="*", help="key=value config overrides, e.g. steps=100 mesh=1,1,2 (a key "
                 "that names a parameter of the file's get_config, e.g. suite=v4, goes to get_config)")
  p.add_argument("--regenerate-only", action="store_true",
                 help="only write the target's greedy answers (one process), then exit")
  p.add_argument("--coordinator", help="host:port of process 0 for multi-process runs (jax.distributed)")
  p.add_argument("--num-processes", type=int, default=None)
  p.add_argument("--process-id", type=int, default=None)
  p.add_argument("--no-progress", action="store_true")
  return p


def main(argv=None) -> dict | None:
  args = parser().parse_args(argv)
  logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
  for noisy in ("absl", "jax._src.xla_bridge"):
    logging.getLogger(noisy).setLevel(logging.WARNING)
  import jax
  if args.coordinator or args.num_processes:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=args.coordinator, num_processes=args.num_processes,
                               process_id=args.process_id)
  from glance_jax.train.config import load_config
  from glance_jax.train import driver
  cfg = load_config(args.config, args.overrides)
  if args.regenerate_only:
    from glance_jax.qwen3_vl.inputs import Processor
    from glance_jax.config import DTYPES
    from glance_jax.qwen3_vl.target import load_target
    target = load_target(cfg.target, dtype=DTYPES[cfg.target_dtype])
    driver.run_regeneration(cfg, target, Processor.from_pretrained(str(target.path)))
    return None
  out = driver.train(cfg, progress=not args.no_progress)
  print(f"trained {out['steps']} steps (resumed from {out['resumed_from']}); head exported to {out['export']}")
  return out


def cli_main() -> None:
  try:
    main()
  except ValueError as e:
    print(f"train.py: error: {e}", file=sys.stderr)
    sys.exit(2)
