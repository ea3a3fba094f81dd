#!/usr/bin/env bash
# CI entry for the Docker part of the lab: build the image (cached) and run the Docker tests.
#
# Why a separate entry: these tests need a Docker Engine, a Compose tool and the lab image. Where
# there is no docker client at all this prints "SKIP docker smoke: ..." and exits 0 (so does
# LAB_SKIP_DOCKER=1, the explicit opt-out); scripts/test.sh names it as not run. Where a docker
# client exists the smoke is expected to run: an engine that does not answer, a permission error
# on its socket or a missing Compose tool fails with the reason, as does any test.
# Usage: docker/ci-smoke.sh [PYTHON]   (PYTHON: the interpreter with pytest; default .venv/bin/python)
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/../scripts/lib.sh"
loud_errors ci-smoke
cd "$(dirname "$0")/.."
python=${1:-${PYTHON:-.venv/bin/python}}

if [[ ${LAB_SKIP_DOCKER:-} == 1 ]]; then
  echo "SKIP docker smoke: LAB_SKIP_DOCKER=1"
  exit 0
fi
if ! command -v docker >/dev/null; then
  echo "SKIP docker smoke: no docker client on PATH (nothing to test; install Docker to run it)"
  exit 0
fi
problem=$(docker_problem)
if [[ -n $problem ]]; then
  echo "docker smoke: FAILED: $problem (LAB_SKIP_DOCKER=1 skips the smoke)" >&2
  exit 1
fi
if ! docker compose version >/dev/null 2>&1 && ! command -v docker-compose >/dev/null; then
  echo "docker smoke: FAILED: no Compose tool (neither 'docker compose' nor 'docker-compose')" >&2
  exit 1
fi

start=$SECONDS
docker/build-image.sh >/dev/null
echo "docker smoke: image ready in $((SECONDS - start)) s"
log=$(mktemp "${TMPDIR:-/tmp}/lab-ci-smoke.XXXXXX.log")
trap 'rm -f "$log"' EXIT
LAB_DOCKER_TESTS=1 "$python" -m pytest -q tests/test_compose.py tests/test_compose_profiles.py \
  tests/test_docker_backend.py 2>&1 | tee "$log"
# Here every Docker test is expected to run: one skipped for a Docker reason (tests/docker_env.py's
# docker_skip_reason) means the engine, the Compose tool or the image went missing under them.
if grep -E '^SKIPPED .*(Docker Engine|Compose tool|docker CLI|image .* missing|opt-in)' "$log" >&2
then
  echo "docker smoke: FAILED: Docker tests skipped where they must run (the lines above)" >&2
  exit 1
fi
echo "docker smoke: done in $((SECONDS - start)) s"
