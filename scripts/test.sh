#!/usr/bin/env bash
# One command to set up and run every check: lint, the test suite (real processes on loopback),
# and the Docker smoke test when a Docker Engine is reachable. `.ci/run` calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

# The report test renders report.html and the web UI test drives the locust UI in Debian's
# chromium (Playwright with executable_path: no browser download); install it if we can.
if ! command -v chromium >/dev/null && [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
  echo "test: installing chromium for the report rendering test"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) \
    || echo "test: chromium could not be installed; the rendering test will be skipped"
fi

.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy  # files and strictness: [tool.mypy] in pyproject.toml
.venv/bin/python -m pytest -q "$@"

# The Docker part: builds the image (cached) and runs the Compose smoke and Docker-backend tests
# when a Docker Engine is reachable; otherwise it says why and skips.
bash docker/ci-smoke.sh .venv/bin/python
