#!/usr/bin/env bash
# One command to set up and run every check (`.ci/run` calls exactly this), in this order:
#   1. scripts/setup.sh: .venv with the lab (uWSGI compiles: 1-2 min the first time) and, as
#      root, the system packages it lists;
#   2. as root, Debian's chromium (for the report-rendering and web UI tests), if missing;
#   3. ruff, ruff format --check and mypy (under a minute);
#   4. the whole test suite, real processes on loopback (about 20 min on 2 cores);
#   5. with a Docker Engine: builds the lab image (about 4 min on 2 cores, cached after) and runs
#      the Compose smoke and Docker-backend tests; without one it says why and skips.
# Each part says when it starts; the whole takes about 25-30 min on 2 cores the first time.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
echo "test: 1/5 setup (.venv and, as root, system packages)"
bash scripts/setup.sh

# The report test renders report.html and the web UI test drives the locust UI in Debian's
# chromium (Playwright with executable_path: no browser download); install it if we can.
if ! command -v chromium >/dev/null && [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
  echo "test: 2/5 installing chromium (Debian's) for the report-rendering and web UI tests"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) \
    || echo "test: chromium could not be installed; the rendering test will be skipped"
fi

echo "test: 3/5 lint, format and types"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy  # files and strictness: [tool.mypy] in pyproject.toml
echo "test: 4/5 the test suite (about 20 min on 2 cores)"
.venv/bin/python -m pytest -q "$@"

# The Docker part: builds the image (cached) and runs the Compose smoke and Docker-backend tests
# when a Docker Engine is reachable; otherwise it says why and skips.
echo "test: 5/5 Docker: build the image and run the smoke tests, or skip without an engine"
bash docker/ci-smoke.sh .venv/bin/python
echo "test: all passed in $(((SECONDS - start) / 60)) min"
