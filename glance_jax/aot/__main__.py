import sys

from glance_jax.aot.cli import main

sys.exit(main())
