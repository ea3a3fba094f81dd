#!/usr/bin/env bash
# One command from a fresh machine to an answer: set up, run the `quick` sweep, write the report.
# Extra arguments go to `lab run`, e.g. scripts/quickstart.sh --levels 1,10,100
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
before=$(ls -d results/*/ 2>/dev/null || true)
.venv/bin/lab run --scenario quick "$@"
run=$(ls -td results/*/ | head -n 1)
[[ "$before" == *"$run"* ]] && { echo "no new run directory found" >&2; exit 1; }
.venv/bin/lab report "$run"
