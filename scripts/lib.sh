# shellcheck shell=bash
# Shared by the lab's shell scripts (scripts/*.sh, docker/*.sh): sourced, never run.
#
# Why: a script that stops under `set -e` says nothing about why; a long step whose output is
# discarded looks hung; a Docker permission error read as "no Docker" sends people the wrong way.
# Each of those was a newcomer's first experience once (issue 43), so every script uses these.
#   loud_errors NAME        strict mode; a failed command prints "NAME: failed (exit S) at F:L: CMD"
#   with_progress WHAT LOG CMD...   CMD's output into LOG, a line on stderr every minute it runs
#   docker_problem          why the Docker Engine cannot be used here (empty output: it can)
#   without_service_starts CMD...   CMD with Debian's package service starts refused (policy-rc.d)

# Strict mode for the calling script (errexit also inside functions and $(...)), and an ERR trap
# naming the failed command, its exit status, file and line (and the calls that led there): no
# failure ends a script in silence. A failure inside $(...) is named there and again at the line
# that used it.
loud_errors() {
  set -Eeuo pipefail
  shopt -s inherit_errexit
  LOUD_NAME=$1
  trap 'loud_failure "$?" "$BASH_COMMAND"' ERR
}
loud_failure() {
  local i where="${BASH_SOURCE[1]:-$0}:${BASH_LINENO[0]}"
  [[ ${FUNCNAME[1]:-main} == main || ${FUNCNAME[1]} == source ]] || where+=" in ${FUNCNAME[1]}"
  for ((i = 2; i < ${#FUNCNAME[@]}; i++)); do
    [[ ${FUNCNAME[i]} == source ]] \
      || where+=", called at ${BASH_SOURCE[i]:-$0}:${BASH_LINENO[i - 1]}"
  done
  printf '%s: failed (exit %s) at %s: %s\n' "$LOUD_NAME" "$1" "$where" "$2" >&2
}

# Run CMD with its output appended to LOG, printing "NAME: still WHAT (N s; last: LOG'S LAST LINE)"
# every minute (LAB_PROGRESS_EVERY seconds); returns CMD's status. CMD stays in the foreground
# (Ctrl-C stops it as usual); the ticker is a background loop that ends when CMD does, or when this
# script is gone. CMD runs as the left side of `||`, where bash turns errexit off: a function given
# as CMD chains its steps with &&.
with_progress() {
  local what=$1 log=$2 ticker status=0
  shift 2
  (
    trap - ERR
    started=$SECONDS next=${LAB_PROGRESS_EVERY:-60}
    while sleep 1 && kill -0 $$ 2>/dev/null; do
      ((SECONDS - started >= next)) || continue
      next=$((next + ${LAB_PROGRESS_EVERY:-60}))
      last=$(tail -n 1 "$log" 2>/dev/null | tr -d '\r' | cut -c1-100) || last=
      printf '%s: still %s (%d s%s)\n' "${LOUD_NAME:-lab}" "$what" $((SECONDS - started)) \
        "${last:+; last: $last}" >&2
    done
  ) &
  ticker=$!
  "$@" >>"$log" 2>&1 || status=$?
  kill "$ticker" 2>/dev/null || true
  wait "$ticker" 2>/dev/null || true
  return "$status"
}

# Empty when the Docker Engine answers; otherwise one line saying why not, with Docker's own words:
# no client, a permission error on the socket (not the same thing as no engine), or no engine.
docker_problem() {
  local out
  command -v docker >/dev/null || { echo "no docker client on PATH"; return 0; }
  out=$(docker info --format '{{.ServerVersion}}' 2>&1) && return 0
  out=$(printf '%s' "$out" | grep -v '^\s*$' | tail -n 1)
  case $out in
    *"permission denied"*)
      echo "permission denied on the Docker socket ($(id -un) is not in the docker group, or" \
        "DOCKER_HOST names a socket this user cannot use): $out" ;;
    *) echo "the Docker Engine does not answer (docker info: $out)" ;;
  esac
}

# Debian's maintainer scripts start a package's service at install unless /usr/sbin/policy-rc.d
# exits 101. The lab starts its own databases and nginx per run, so setup installs them with one in
# place; left behind, it would refuse every service start on the machine from then on. So the file
# is marked, removed by a trap on any exit (an error, Ctrl-C, SIGTERM, SIGHUP), and one left by a
# setup killed with SIGKILL (no trap outlives that) is recognised by its mark and removed next time.
# A policy-rc.d that is not ours is left alone (and, being there, already does the job or not).
# POLICY_RC_D: the file (tests point it elsewhere).
POLICY_RC_D=${POLICY_RC_D:-/usr/sbin/policy-rc.d}
POLICY_MARK="# placed by concurrency-lab's scripts while they install packages; removed after"
remove_policy() {
  if [[ -f $POLICY_RC_D ]] && grep -qxF "$POLICY_MARK" "$POLICY_RC_D"; then rm -f "$POLICY_RC_D"; fi
}
without_service_starts() {  # the caller's EXIT trap is replaced while CMD runs, then restored
  local status=0 previous
  previous=$(trap -p EXIT)
  remove_policy
  if [[ ! -e $POLICY_RC_D ]]; then
    trap remove_policy EXIT
    printf '#!/bin/sh\n%s\nexit 101\n' "$POLICY_MARK" >"$POLICY_RC_D"
    chmod +x "$POLICY_RC_D"
  fi
  "$@" || status=$?
  remove_policy
  eval "${previous:-trap - EXIT}"
  return "$status"
}
