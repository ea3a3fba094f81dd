#!/usr/bin/env bash
# CI entry for the Docker part of the lab: build the image (cached) and run the Docker tests.
#
# Why a separate entry: these tests need a Docker Engine, a Compose tool and the lab image, which
# a developer's machine or CI may lack; without an engine this prints why and exits 0, so the rest
# of CI is unaffected. With one, any failure here fails CI.
# Usage: docker/ci-smoke.sh [PYTHON]   (PYTHON: the interpreter with pytest; default .venv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."
python=${1:-${PYTHON:-.venv/bin/python}}

if ! command -v docker >/dev/null; then
  echo "SKIP docker smoke: no docker CLI on PATH"
  exit 0
fi
if ! docker info >/dev/null 2>&1; then
  echo "SKIP docker smoke: no Docker Engine reachable (docker info failed)"
  exit 0
fi
if ! docker compose version >/dev/null 2>&1 && ! command -v docker-compose >/dev/null; then
  echo "SKIP docker smoke: no Compose tool (neither 'docker compose' nor 'docker-compose')"
  exit 0
fi

start=$SECONDS
docker/build-image.sh >/dev/null
echo "docker smoke: image ready in $((SECONDS - start)) s"
LAB_DOCKER_TESTS=1 "$python" -m pytest -q tests/test_compose.py tests/test_compose_profiles.py \
  tests/test_docker_backend.py
echo "docker smoke: done in $((SECONDS - start)) s"
