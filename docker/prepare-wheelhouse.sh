#!/usr/bin/env bash
# Fill docker/wheelhouse/ on the host with everything the image's build stage installs.
#
# Why: when the build containers cannot reach the package index (no route, or a TLS-intercepting
# egress proxy whose CA only the host trusts), the Dockerfile installs with --no-index from this
# directory instead (build arg WHEELHOUSE=1). The host's own pip does the downloading, so its
# configuration (/etc/pip.conf, PIP_* variables, proxies, CA bundle) applies unchanged.
# Binary wheels are fetched for the *target* interpreter and glibc (asked of the build image), not
# the host's; uWSGI is fetched as its source distribution because the build stage compiles it.
#
# Any failure names the command and line (scripts/lib.sh); the downloads print a line a minute.
#
# Usage: docker/prepare-wheelhouse.sh BUILD_IMAGE
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/../scripts/lib.sh"
loud_errors wheelhouse

image=${1:?usage: $0 BUILD_IMAGE}
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
out="$here/wheelhouse"
host_python=${LAB_HOST_PYTHON:-python3}
log() { printf '[wheelhouse] %s\n' "$*" >&2; }

# The image's interpreter (full version, glibc, machine) decides which wheels fit.
target=$(docker run --rm "$image" python3 -c '
import platform, sys
print("%d.%d.%d" % sys.version_info[:3], platform.libc_ver()[1], platform.machine())')
read -r pyfull glibc arch <<<"$target"
pyver=${pyfull%.*}
abi="cp${pyver/./}"
glibc_minor=${glibc#*.}

reqs=$(mktemp)
trap 'rm -f "$reqs"' EXIT
"$host_python" - "$root/pyproject.toml" >"$reqs" <<'EOF'
import sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
print("\n".join(project["dependencies"]))
print("setuptools>=68\nwheel")
# pip download evaluates python_full_version markers for the host, not the image (3.11.2 on
# bookworm): redis needs async-timeout below 3.11.3, so it is fetched whatever the host is.
print("async-timeout>=4.0.3")
EOF

stamp="$out/.stamp"
key="$(sha256sum <"$reqs" | cut -c1-16) $pyfull glibc$glibc $arch"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$key" ]]; then
  log "cached: $out matches ($key)"
  exit 0
fi

platforms=()
for ((minor = 17; minor <= glibc_minor; minor++)); do
  platforms+=(--platform "manylinux_2_${minor}_${arch}")
done
platforms+=(--platform "manylinux2014_${arch}" --platform "linux_${arch}")

start=$SECONDS
rm -rf "$out"
mkdir -p "$out"
log "downloading for $abi, glibc $glibc, $arch"
# Source-only distributions (no wheel on the index): uWSGI compiles, psycogreen is pure Python.
source_only='^(uwsgi|psycogreen)'
download_all() {  # chained with &&: run under with_progress's `||`, errexit is off in here
  "$host_python" -m pip download -d "$out" --only-binary=:all: --python-version "$pyfull" \
    --implementation cp --abi "$abi" --abi abi3 --abi none "${platforms[@]}" \
    -r <(grep -Eiv "$source_only" "$reqs") &&
    grep -Ei "$source_only" "$reqs" | while read -r requirement; do
      "$host_python" -m pip download -d "$out" --no-deps --no-binary=:all: "$requirement" || exit
    done
}
download_log=$(mktemp "${TMPDIR:-/tmp}/lab-wheelhouse.XXXXXX.log")
if ! with_progress "downloading wheels" "$download_log" download_all; then
  tail -n 30 "$download_log" >&2
  log "pip download failed (last 30 lines above; all of it: $download_log)"
  exit 1
fi
rm -f "$download_log"
echo "$key" >"$stamp"
log "$(find "$out" -mindepth 1 -maxdepth 1 ! -name '.*' | wc -l) files, $(du -sh "$out" | cut -f1), in $((SECONDS - start)) s"
