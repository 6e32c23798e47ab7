#!/usr/bin/env bash
# The GPU check (scripts/gpu_check.py): one short run on one GPU, or `--dry-run` on CPU at toy sizes.
#   scripts/gpu_check.sh [--dry-run] [--out runs/gpu_check.json] [--budget-s 360] [--shapes qwen2.5-0.5b,qwen2.5-1.5b]
# On a machine without this project's dependencies (no network), wheels in .whl/ are installed
# into a private folder first and the checkout is installed without dependencies, so the task
# families' entry points are registered; configs/README.md ("GPU check") says which wheels to bring.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
if compgen -G ".whl/*.whl" >/dev/null; then
  SITE="${RLC_SITE:-/tmp/rl_compaction_site}"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi
# probed from outside the checkout, as gpu_check.py imports it: the checkout's own folder (and an
# rl_compaction.egg-info left there by another environment's editable install) must not count
if ! (cd / && "$PY" -c 'import sys; from rl_compaction.harness.tasks import family_names; sys.exit(not family_names())') 2>/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-build-isolation -e .
fi
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
exec "$PY" scripts/gpu_check.py "$@"
