#!/usr/bin/env bash
# The README's first command as a newcomer meets it: clones this repository's committed HEAD into
# a new temporary folder (no .venv, no results/), runs scripts/quickstart.sh there with a short
# sweep and checks that it exits 0 and writes report.html; then again with --out naming a folder
# that does not exist yet. The clone is removed afterwards, however this ends.
#
# Why: quickstart once died in silence on every fresh clone (no results/ yet) while CI, running in
# a checkout that had one, stayed green. scripts/test.sh runs this (part 4); it runs alone too.
# About 3 min on 2 cores: the clone's setup.sh builds its own .venv (from pip's cache when this
# machine has set up the lab before), then two sweeps of one model at 1 and 5 users, 2 s a step.
#
# Usage: scripts/fresh-clone-check.sh [LAB-RUN-ARGS...]   (instead of the short sweep's)
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
loud_errors fresh-clone
cd "$(dirname "$0")/.."
start=$SECONDS
sweep=(--models gunicorn-gevent --levels '1,5' --duration 2 --warmup 0)
(($# == 0)) || sweep=("$@")

sha=$(git rev-parse HEAD)
if [[ -n $(git status --porcelain --untracked-files=no) ]]; then
  echo "fresh-clone: note: uncommitted changes are not in the clone; it checks commit ${sha:0:12}"
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/lab-fresh-clone.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
git -c advice.detachedHead=false clone -q --no-hardlinks . "$tmp/lab"
git -C "$tmp/lab" -c advice.detachedHead=false checkout -q --detach "$sha"
if [[ -e $tmp/lab/.venv || -e $tmp/lab/results ]]; then  # committed by mistake: not fresh
  echo "fresh-clone: FAILED: the clone already has .venv or results/ (committed?)" >&2
  exit 1
fi

# quickstart NAME REPORTS-FOLDER [ARGS...]: run it in the clone; exit 0 and one report.html
# in a new run directory in REPORTS-FOLDER, or this check fails saying which.
quickstart() {
  local name=$1 folder=$2 status=0 reports
  shift 2
  echo "fresh-clone: $name: scripts/quickstart.sh ${sweep[*]} $*"
  (cd "$tmp/lab" && bash scripts/quickstart.sh "${sweep[@]}" "$@") || status=$?
  if ((status != 0)); then
    echo "fresh-clone: FAILED: $name: scripts/quickstart.sh exited $status (its output above)" >&2
    exit 1
  fi
  reports=$(compgen -G "$folder/*/report.html" || true)
  if [[ -z $reports || $reports == *$'\n'* ]]; then
    echo "fresh-clone: FAILED: $name: expected one report.html in a run directory of $folder," \
      "found: ${reports:-none}" >&2
    exit 1
  fi
  echo "fresh-clone: $name: ok, wrote ${reports#"$tmp/lab/"} ($((SECONDS - start)) s so far)"
}
quickstart "default --out (results/ does not exist yet)" "$tmp/lab/results"
quickstart "--out naming a folder that does not exist" "$tmp/new/runs" --out "$tmp/new/runs"
echo "fresh-clone: passed in $((SECONDS - start)) s (commit ${sha:0:12}, clone removed)"
