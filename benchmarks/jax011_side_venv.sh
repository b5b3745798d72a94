#!/usr/bin/env bash
# The library on the lent GPU image's jax (0.11.2, which needs Python >= 3.12), checked on this CPU:
# builds a side venv from requirements*.txt with the jax pins moved to 0.11.2 (flax, tfds and
# array_record unpinned: their pins are 3.11-era wheels), then runs the README's test command in it.
#
#   bash benchmarks/jax011_side_venv.sh [VENV_DIR]        # default /tmp/venv-jax011
#
# Python 3.12 is taken from PATH or pyenv (/root/.pyenv/versions/3.12.*). torch==2.13.0 on 3.12
# comes from PyPI (the CUDA build, ~1.3 min here); it is the parity oracle only. Results and the
# one difference found: docs/benchmarking.md "jax 0.11.2".
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${1:-/tmp/venv-jax011}"
# the first candidate that runs: a pyenv shim on PATH fails when 3.12 is not the selected version
PY=""
for c in "$(command -v python3.12 || true)" $(ls -d /root/.pyenv/versions/3.12.*/bin/python3.12 2>/dev/null | sort -r); do
  if [ -n "$c" ] && "$c" --version >/dev/null 2>&1; then PY="$c"; break; fi
done
[ -n "$PY" ] || { echo "jax011_side_venv.sh: no working python3.12 on PATH or under /root/.pyenv/versions" >&2; exit 2; }
REQ="$(mktemp)"
sed -e 's/^jax==0\.10\.2/jax==0.11.2/' -e 's/^jaxlib==0\.10\.2/jaxlib==0.11.2/' \
    -e 's/^\(flax\|tensorflow-datasets\|array_record\)==.*/\1/' "$ROOT/requirements.txt" > "$REQ"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q -r "$REQ" "jax[tpu]==0.11.2" torch==2.13.0 transformers==5.24.0 \
  pytest pytest-xdist hypothesis chex==0.1.92
"$VENV/bin/python" -c "import jax, jaxlib, flax, sys; print('python', sys.version.split()[0], 'jax', jax.__version__, 'flax', flax.__version__)"
cd "$ROOT"
PYTHONPATH="$ROOT" "$VENV/bin/python" -m pytest -q -n 2 --dist loadfile -p no:cacheprovider
