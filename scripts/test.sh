#!/usr/bin/env bash
# One command to set up and run every check (`.ci/run` calls exactly this), in this order:
#   1. scripts/setup.sh: .venv with the lab (uWSGI compiles: 1-2 min the first time) and, as
#      root, the system packages it lists;
#   2. as root, Debian's chromium (for the report-rendering and web UI tests), if missing;
#   3. ruff, ruff format --check and mypy (under a minute);
#   4. scripts/fresh-clone-check.sh: the README's quick start on a fresh clone of HEAD (~3 min);
#   5. the test suite in its two tiers (tests/tiers.py): the in-process tier on every core
#      (pytest-xdist, scripts/test-fast.sh: 1-2 min on 2 cores), then the tests that start real
#      processes on loopback (marker `procs`), two at a time (LAB_PROCS_WORKERS; a file per
#      worker, so a module's servers start once: about 19 min on 2 cores, against 34 one at a
#      time), then each of those that failed run again alone: two tests that time their load
#      can measure each other on 2 cores (a step flagged host_busy, a probe that times a route
#      slower), so a failure beside another test is judged by its run alone, and the closing
#      line names every test that passed only alone;
#   6. with a docker client: builds the lab image (about 4 min on 2 cores, cached after) and runs
#      the Compose smoke and Docker-backend tests (docker/ci-smoke.sh).
# Each part says when it starts; the whole takes about 30 min on 2 cores the first time.
#
# What must run, and what may be reported as not run (the closing line names every part that did
# not run; any failure prints the command and line that failed):
#   - the browser tests (tests/uibrowser.py's walk, the report rendered in chromium) must run
#     wherever chromium is installed or can be (root with apt-get): a skip there fails; elsewhere
#     they are skipped and reported. LAB_SKIP_BROWSER=1 opts out: no chromium is installed and
#     their skip is reported, not a failure.
#   - the Docker smoke must run wherever a docker client is on PATH: an engine that does not
#     answer, or refuses this user, fails (docker/ci-smoke.sh says which). Without a docker
#     client it is reported as not run. LAB_SKIP_DOCKER=1 opts out (reported as not run).
#   - the fresh-clone check runs in a git checkout; in an unpacked archive, or with
#     LAB_SKIP_FRESH_CLONE=1, it is reported as not run.
# Arguments go to pytest (part 5), e.g. scripts/test.sh -x -k report
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
loud_errors test
cd "$(dirname "$0")/.."
start=$SECONDS
not_run=()  # "what (why)", for the closing line
echo "test: 1/6 setup (.venv and, as root, system packages)"
bash scripts/setup.sh

# The report test renders report.html and the web UI test drives the locust UI in Debian's
# chromium (Playwright with executable_path: no browser download); installed if we can.
have_chromium() { command -v chromium >/dev/null || command -v chromium-browser >/dev/null; }
browser_expected=0
if [[ ${LAB_SKIP_BROWSER:-} == 1 ]]; then
  echo "test: 2/6 chromium: LAB_SKIP_BROWSER=1, none installed here; a browser test's skip is" \
    "reported, not a failure"
elif have_chromium; then
  echo "test: 2/6 chromium is installed: the browser tests must run"
  browser_expected=1
elif [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
  echo "test: 2/6 installing chromium (Debian's) for the report-rendering and web UI tests"
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }
  then
    echo "test: chromium could not be installed (apt-get's error above): the browser tests are" \
      "expected to run here, as root with apt-get (LAB_SKIP_BROWSER=1 opts out)" >&2
    exit 1
  fi
  browser_expected=1
else
  echo "test: 2/6 no chromium, and not root with apt-get to install it: the browser tests skip"
fi

echo "test: 3/6 lint, format and types"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy  # files and strictness: [tool.mypy] in pyproject.toml

if [[ ${LAB_SKIP_FRESH_CLONE:-} == 1 ]]; then
  not_run+=("fresh-clone check (LAB_SKIP_FRESH_CLONE=1)")
elif git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "test: 4/6 the README's quick start on a fresh clone (about 3 min)"
  bash scripts/fresh-clone-check.sh
else
  not_run+=("fresh-clone check (not a git checkout)")
fi

echo "test: 5/6 the test suite: the in-process tier on every core, then the process tier"
# pytest's summary (-ra in pyproject.toml) lists each skip as "SKIPPED [COUNT] FILE:LINE: REASON";
# every pytest run goes through this log, which the closing line counts from.
log=$(mktemp "${TMPDIR:-/tmp}/lab-test-pytest.XXXXXX.log")
tier() {  # one tier's pytest; exit 5 (no test selected) is no failure: ARGS may pick one tier
  local rc=0
  "$@" || rc=$?
  ((rc == 5)) || return "$rc"
}
tier bash scripts/test-fast.sh "$@" 2>&1 | tee "$log"
alone_log=$(mktemp "${TMPDIR:-/tmp}/lab-test-alone.XXXXXX")
trap 'rm -f "$log" "$alone_log" "$alone_log.beside"' EXIT
procs_tier() {  # the process tier beside each other, then its failures alone (part 5 above)
  local rc=0 beside="$alone_log.beside"
  # --durations: the slowest tests named in every CI log, where the 30-minute aim is won or lost
  .venv/bin/python -m pytest -q -m procs -n "${LAB_PROCS_WORKERS:-2}" --dist loadfile \
    --durations 25 "$@" \
    | tee "$beside" || rc=$?
  ((rc == 1)) || return "$rc"  # 1: tests failed; anything else (interrupted, usage) is final
  # the summary's "FAILED NODEID - REASON" lines (-ra in pyproject.toml): the tests to run alone
  sed -n 's/^FAILED \([^ ]*\).*/\1/p' "$beside" >"$alone_log"
  echo "test: the process tier's $(wc -l <"$alone_log") failures, each run again alone"
  .venv/bin/python -m pytest -q -m procs --last-failed --last-failed-no-failures none "$@"
}
tier procs_tier "$@" 2>&1 | tee -a "$log"

echo "test: 6/6 Docker: build the image and run the smoke tests"
if [[ ${LAB_SKIP_DOCKER:-} == 1 ]]; then
  not_run+=("Docker smoke (LAB_SKIP_DOCKER=1)")
elif ! command -v docker >/dev/null; then
  not_run+=("Docker smoke (no docker client)")
else
  bash docker/ci-smoke.sh .venv/bin/python 2>&1 | tee -a "$log"
fi

count() {  # the tests skipped for a reason matching the (lower-case) regex $1
  awk -v re="$1" '/^SKIPPED \[/ && tolower($0) ~ re { sub(/^SKIPPED \[/, ""); n += $0 + 0 }
    END { print n + 0 }' "$log"
}
# The browser tests' reasons name chromium or playwright (tests/uibrowser.py, test_webui.py,
# test_analysis_report.py); the Docker tests skip in part 5 by design (part 6 runs them).
browser_skips=$(count 'chromium|playwright')
other_skips=$(($(count .) - browser_skips - $(count 'opt-in: run docker/ci-smoke.sh')))
if ((browser_skips)); then
  if ((browser_expected)); then
    echo "test: FAILED: $browser_skips browser tests skipped where they are expected to run" \
      "(chromium is installed; their reasons are in the summary above)" >&2
    exit 1
  fi
  not_run+=("$browser_skips browser tests (no chromium)")
fi

took="$(((SECONDS - start) / 60)) min"
if [[ -s $alone_log ]]; then
  echo "test: passed only when run alone (failed beside another test; timed load on" \
    "$(nproc) cores): $(paste -sd' ' "$alone_log")"
fi
skipped=""
((other_skips == 0)) || skipped="; $other_skips other tests skipped (their reasons are above)"
if ((${#not_run[@]})); then
  joined=$(printf '%s; ' "${not_run[@]}")
  echo "test: passed in $took, but NOT RUN here: ${joined%; }$skipped"
else
  echo "test: all passed in $took$skipped"
fi
