"""`decode.py bench`: speed, losslessness and the entropy law of every decoding method over task files.

  tasks.py     task files -> BenchTask, every problem captured (file, line, id) instead of raised
  runner.py    methods, padding, warm-up of every compiled shape, interleaved timing
  report.py    statistics, SCHEMA / validate_report, markdown tables, plots
  cli.py       the command line (`python decode.py bench --help`)
"""

from glance_jax.bench.report import SCHEMA, SCHEMA_VERSION, validate_report

__all__ = ["SCHEMA", "SCHEMA_VERSION", "validate_report"]
