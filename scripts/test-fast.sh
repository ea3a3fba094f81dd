#!/usr/bin/env bash
# The in-process tier: every test that starts no process (claims, verdict, points, parsing, docs,
# architecture), on every core with pytest-xdist. tests/tiers.py marks `procs` each test that
# starts a process (a server, the upstream, the lab CLI, a load generator) and fails an unmarked
# one that starts one anyway, so this tier never waits on a process. About 4 min of CPU: 2-3 min
# on 2 idle cores. scripts/test.sh runs it, then the process tier, then the rest of CI.
# Arguments go to pytest, e.g. scripts/test-fast.sh -x -k claims
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
loud_errors test-fast
cd "$(dirname "$0")/.."
.venv/bin/python -m pytest -q -n auto -m "not procs" "$@"
