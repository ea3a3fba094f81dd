#!/usr/bin/env bash
# Build the lab image on any machine, choosing base images and package source automatically.
#
# Why: `docker build .` with the defaults needs the official Python images and the package index.
# This script keeps that path when it works and otherwise falls back, step by step:
#   1. base images: the official python:X-slim / python:X if present or pullable, else the local
#      Debian images from docker/build-base.sh (built once, then cached);
#   2. packages: the index from inside a build container if reachable, else a wheelhouse prepared
#      with the host's own pip configuration (docker/prepare-wheelhouse.sh, WHEELHOUSE=1).
# Override with LAB_BASE_IMAGE + LAB_BUILD_IMAGE, LAB_WHEELHOUSE=0|1, LAB_IMAGE, LAB_PYTHON_VERSION.
#
# A Docker Engine that does not answer, or refuses this user, is said as such before anything else
# (scripts/lib.sh's docker_problem); the image build prints a line a minute while it runs.
#
# Usage: docker/build-image.sh   (prints the image name on stdout when done)
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/../scripts/lib.sh"
loud_errors build-image
cd "$(dirname "$0")/.."

image=${LAB_IMAGE:-concurrency-lab:latest}
pyver=${LAB_PYTHON_VERSION:-3.12}
log() { printf '[build-image] %s\n' "$*" >&2; }
have_image() { docker image inspect "$1" >/dev/null 2>&1 || docker pull -q "$1" >/dev/null 2>&1; }

problem=$(docker_problem)
[[ -z $problem ]] || { log "cannot build: $problem"; exit 1; }

start=$SECONDS
if [[ -n ${LAB_BASE_IMAGE:-} ]]; then
  base=$LAB_BASE_IMAGE
  build=${LAB_BUILD_IMAGE:?LAB_BUILD_IMAGE must be set with LAB_BASE_IMAGE}
elif have_image "python:$pyver-slim" && have_image "python:$pyver"; then
  base="python:$pyver-slim"
  build="python:$pyver"
else
  log "official python:$pyver images unavailable: using local Debian base images"
  base_line=$(docker/build-base.sh)  # its failure stops here, with its own reason
  read -r -a base_args <<<"$base_line"
  base=${base_args[1]#BASE_IMAGE=}
  build=${base_args[3]#BUILD_IMAGE=}
  pyver=${base_args[5]#PYTHON_VERSION=}
fi
log "base $base, build stage $build (python $pyver) ready after $((SECONDS - start)) s"

index_reachable() {
  docker run --rm "$build" sh -c 'python3 -m venv /tmp/probe &&
    /tmp/probe/bin/pip download -q --no-deps --retries 0 --timeout 10 -d /tmp/probe/dl pip' \
    >/dev/null 2>&1
}
wheelhouse=${LAB_WHEELHOUSE:-}
if [[ -z $wheelhouse ]]; then
  if index_reachable; then wheelhouse=0; else wheelhouse=1; fi
fi
if [[ $wheelhouse == 1 ]]; then
  log "build containers cannot use the package index: installing from a host-prepared wheelhouse"
  docker/prepare-wheelhouse.sh "$build"
fi

step=$SECONDS
build_log=$(mktemp)
trap 'rm -f "$build_log"' EXIT
docker_build() {
  if ! with_progress "building the image (docker build $*)" "$build_log" \
    docker build --build-arg "BASE_IMAGE=$base" --build-arg "BUILD_IMAGE=$build" \
    --build-arg "PYTHON_VERSION=$pyver" --build-arg "WHEELHOUSE=$wheelhouse" "$@" .; then
    tail -n 60 "$build_log" >&2
    log "docker build failed (last 60 lines above)"
    exit 1
  fi
}
# The build stage gets its own tag so it stays the cache of the next build, and older, untagged
# stages and images of this project (found by their label, nothing else) can be pruned.
docker_build --target build -t "${image%:*}:build"
docker_build -t "$image"
docker image prune -f --filter label=concurrency-lab.stage >/dev/null
log "built $image in $((SECONDS - step)) s (total $((SECONDS - start)) s)"
echo "$image"
