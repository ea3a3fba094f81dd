#!/usr/bin/env bash
# Assemble the lab's base images from Debian packages, for machines that cannot pull images.
#
# Why: the Dockerfile's defaults are the official Python images, but a machine without a reachable
# container registry has no way to get them. This script builds two equivalent local images with
# debootstrap instead, from the Debian mirror this machine's own apt is configured with (read at run
# time from /etc/apt/sources.list and /etc/apt/sources.list.d/, never written down here):
#   runtime image: python3 + venv + CA certificates        (stands in for python:X-slim)
#                  + PostgreSQL and Redis servers           (the Compose `databases` profile)
#   build image:   the runtime image + gcc and Python headers (stands in for python:X)
# It is idempotent: images that already exist are kept unless --force is given.
#
# Usage: docker/build-base.sh [--force] [--print-args]
#   --print-args  print the matching `docker build --build-arg ...` flags and exit 0
# Environment: LAB_BASE_SUITE (default: this host's VERSION_CODENAME), LAB_BASE_REPO (image name).
# Any failure names the command and line (scripts/lib.sh); debootstrap and the package installs
# print a line a minute while they run (their output goes to a log shown on failure).
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/../scripts/lib.sh"
loud_errors build-base

SUITE=${LAB_BASE_SUITE:-$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")}
REPO=${LAB_BASE_REPO:-concurrency-lab-base}
RUNTIME_PACKAGES="python3,python3-venv,ca-certificates"
DB_PACKAGES="postgresql redis-server"  # the Compose `databases` profile's servers
FRONT_PACKAGES="nginx-light"  # `lab run --front nginx` (the lab starts its own, per run)
BUILD_PACKAGES="gcc libc6-dev python3-dev"
# The tags name the package lists, so a changed list builds new images instead of reusing old ones.
LISTS=$(printf '%s|%s|%s|%s' "$RUNTIME_PACKAGES" "$DB_PACKAGES" "$FRONT_PACKAGES" "$BUILD_PACKAGES" \
  | sha256sum | cut -c1-8)
RUNTIME_TAG="$REPO:$SUITE-$LISTS"
BUILD_TAG="$REPO:$SUITE-$LISTS-build"

force=0
print_args=0
for arg in "$@"; do
  case "$arg" in
    --force) force=1 ;;
    --print-args) print_args=1 ;;
    *) echo "usage: $0 [--force] [--print-args]" >&2; exit 2 ;;
  esac
done

log() { printf '[build-base] %s\n' "$*" >&2; }
have_image() { docker image inspect "$1" >/dev/null 2>&1; }

build_args() {
  local pyver
  pyver=$(docker run --rm "$RUNTIME_TAG" python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  printf -- '--build-arg BASE_IMAGE=%s --build-arg BUILD_IMAGE=%s --build-arg PYTHON_VERSION=%s\n' \
    "$RUNTIME_TAG" "$BUILD_TAG" "$pyver"
}

# First mirror URI serving "$SUITE" from the one-line and deb822 apt sources of this machine.
apt_mirror() {
  local files=()
  [[ -f /etc/apt/sources.list ]] && files+=(/etc/apt/sources.list)
  shopt -s nullglob
  files+=(/etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources)
  shopt -u nullglob
  ((${#files[@]})) || return 0
  awk -v suite="$SUITE" '
    function has_word(list, w,   n, i, parts) {
      n = split(list, parts, /[ \t]+/)
      for (i = 1; i <= n; i++) if (parts[i] == w) return 1
      return 0
    }
    function flush() {
      if (!found && has_word(types, "deb") && has_word(suites, suite) && enabled != "no") {
        split(uris, u, /[ \t]+/); print u[1]; found = 1
      }
      types = uris = suites = ""; enabled = "yes"
    }
    FNR == 1 { flush(); deb822 = (FILENAME ~ /\.sources$/) }
    /^[ \t]*#/ { next }
    deb822 && /^[ \t]*$/ { flush(); next }
    deb822 {
      key = tolower($1); sub(/:$/, "", key); val = $0; sub(/^[^:]*:[ \t]*/, "", val)
      if (key == "types") types = val
      else if (key == "uris") uris = val
      else if (key == "suites") suites = val
      else if (key == "enabled") enabled = tolower(val)
      next
    }
    !deb822 && $1 == "deb" {
      line = $0; sub(/\[[^]]*\]/, "", line); sub(/^[ \t]+/, "", line); split(line, f, /[ \t]+/)
      if (!found && f[3] == suite) { print f[2]; found = 1 }
    }
    END { flush() }
  ' "${files[@]}"
}

# Export the proxy apt itself uses (if any), so debootstrap reaches the mirror the same way.
apt_proxy() {
  apt-config dump 2>/dev/null | awk -F'"' '/^Acquire::http::Proxy /{print $2; exit}'
}

problem=$(docker_problem)
[[ -z $problem ]] || { log "cannot build: $problem"; exit 1; }

if ((print_args)); then
  if ! have_image "$RUNTIME_TAG" || ! have_image "$BUILD_TAG"; then
    log "base images missing"
    exit 1
  fi
  build_args
  exit 0
fi

if ((!force)) && have_image "$RUNTIME_TAG" && have_image "$BUILD_TAG"; then
  log "cached: $RUNTIME_TAG and $BUILD_TAG already exist (use --force to rebuild)"
  build_args
  exit 0
fi

if [[ $(id -u) != 0 ]]; then
  log "building the base images needs root (debootstrap, chroot); or set LAB_BASE_IMAGE and" \
    "LAB_BUILD_IMAGE for docker/build-image.sh to images this machine has"
  exit 1
fi
if ! command -v debootstrap >/dev/null; then
  log "installing debootstrap from this machine's apt sources"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap \
    >/dev/null
fi

mirror=$(apt_mirror)
[[ -n "$mirror" ]] || { log "no apt source for suite '$SUITE' in /etc/apt; set LAB_BASE_SUITE"; exit 1; }
proxy=$(apt_proxy)
[[ -n "$proxy" ]] && export http_proxy="$proxy"
log "suite $SUITE from this machine's apt mirror: $mirror"

start=$SECONDS
root=$(mktemp -d /var/tmp/lab-base.XXXXXX)
steps_log=$(mktemp /var/tmp/lab-base-log.XXXXXX)
cleanup() {
  status=$?
  ((status == 0)) || { tail -n 40 "$steps_log" >&2; log "failed (last 40 lines of its log above)"; }
  mountpoint -q "$root/proc" && umount "$root/proc"
  rm -rf "$root" "$steps_log"
}
trap cleanup EXIT

log "debootstrap of $SUITE (a few minutes; log: $steps_log)"
with_progress "running debootstrap" "$steps_log" \
  debootstrap --variant=minbase --include="$RUNTIME_PACKAGES" "$SUITE" "$root" "$mirror"
mount -t proc proc "$root/proc"
in_root() { chroot "$root" env DEBIAN_FRONTEND=noninteractive "$@" >>"$steps_log" 2>&1; }
apt_install() {
  with_progress "installing $*" "$steps_log" in_root apt-get install -y -q --no-install-recommends "$@"
}
strip_apt() { in_root apt-get clean; rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin; }
import_root() {
  umount "$root/proc"
  tar --numeric-owner -C "$root" -c . | docker import \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["/bin/bash"]' \
    - "$1" >/dev/null
  mount -t proc proc "$root/proc"
  log "imported $1"
}

# uWSGI links libpython dynamically (the official images ship it in /usr/local/lib), so the runtime
# image needs Debian's shared libpython for the interpreter version debootstrap installed.
pyver=$(chroot "$root" python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
in_root apt-get update -q
apt_install "libpython$pyver"
# A chroot shares this host's network: policy-rc.d keeps the packages from starting a service
# (nginx on the host's port 80) while they install.
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d" && chmod +x "$root/usr/sbin/policy-rc.d"
# shellcheck disable=SC2086 # a list of package names
apt_install $DB_PACKAGES $FRONT_PACKAGES
rm -f "$root/usr/sbin/policy-rc.d"
rm -rf "$root"/var/lib/postgresql/*/main "$root"/etc/postgresql/*/main  # the lab runs its own
strip_apt
import_root "$RUNTIME_TAG"

in_root apt-get update -q
# shellcheck disable=SC2086 # a list of package names
apt_install $BUILD_PACKAGES
strip_apt
import_root "$BUILD_TAG"

log "built both base images in $((SECONDS - start)) s"
build_args
