#!/usr/bin/env bash
# Set up concurrency-lab on a fresh machine: system packages if missing, then .venv with the lab.
# Safe to run again: it only installs what is missing or changed. Any failure prints the command
# and line that failed; a missing optional tool is one line saying what needs it and, without root,
# the command that installs it; long builds print a line a minute (scripts/lib.sh).
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
loud_errors setup
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
root_apt() { [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; }
apt_updated=
apt_install() {  # the package lists are read once per setup, however many installs follow
  [[ -n $apt_updated ]] || { apt-get update -qq && apt_updated=1; }
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
}

# Python first: nothing is installed for an interpreter the lab cannot use.
if ! command -v "$PYTHON" >/dev/null; then
  root_apt || { echo "setup: please install Python 3.11 or newer (or set PYTHON=...)" >&2; exit 1; }
  echo "setup: installing python3 with apt-get"
  apt_install python3
fi
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
  echo "setup: Python 3.11 or newer is needed ($("$PYTHON" --version) found); set PYTHON=..." >&2
  exit 1
}

need_apt=()
"$PYTHON" -c 'import venv, ensurepip' 2>/dev/null || need_apt+=(python3-venv)
command -v gcc >/dev/null || need_apt+=(gcc)  # uWSGI compiles from source
"$PYTHON" - <<'PY' 2>/dev/null || need_apt+=(python3-dev)
import sysconfig, pathlib, sys
sys.exit(0 if pathlib.Path(sysconfig.get_paths()["include"], "Python.h").exists() else 1)
PY
if ((${#need_apt[@]})); then
  root_apt || {
    echo "setup: please install: ${need_apt[*]} (e.g. sudo apt-get install ${need_apt[*]})" >&2
    exit 1
  }
  echo "setup: installing ${need_apt[*]} with apt-get"
  apt_install "${need_apt[@]}"
fi

# Optional system packages, each needed by one part of the lab only. As root with apt-get they are
# installed (one line if that fails); otherwise each missing one is a line with its install command.
#   postgresql, redis-server: the /db and /cache routes (the lab starts its own server per run,
#     lab/backends/databases.py, and needs only their programs);
#   nginx-light: the front of `lab run --front nginx` (the lab starts its own per run);
#   wrk: an independent load tool, benchmarks/upstream_capacity.py;
#   apache2-utils (ab): the blog's own client in `lab reproduce uwsgi-blog`;
#   the shell linter (package shellcheck): tests/test_scripts.py lints scripts/ and docker/ with it.
# Debian starts a package's service when it is installed and at every boot: a system database or
# nginx running beside the benchmark would take CPU from it (nginx: port 80). So those install
# with policy-rc.d forbidding service starts (scripts/lib.sh: undone on any exit), and their
# services are disabled at boot.
have() {  # a program on PATH, or where Debian puts it outside a user's PATH
  case $1 in
    initdb) compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || command -v initdb >/dev/null
      ;;
    *) command -v "$1" >/dev/null || [[ -x /usr/sbin/$1 ]] ;;
  esac
}
optional() {  # optional PROGRAM PACKAGE WHAT-NEEDS-IT [SERVICE]: install it or say how to
  local program=$1 package=$2 what=$3 service=${4:-}
  have "$program" && return 0
  if ! root_apt; then
    if command -v apt-get >/dev/null; then
      echo "setup: note: $what needs $program: sudo apt-get install $package" >&2
    else
      echo "setup: note: $what needs $program (Debian's package: $package)" >&2
    fi
    return 0
  fi
  echo "setup: installing $package with apt-get${service:+ (no service started: the lab runs one)}"
  if [[ -z $service ]]; then
    apt_install "$package" >/dev/null && return 0
  elif without_service_starts apt_install "$package" >/dev/null; then
    [[ ! -d /run/systemd/system ]] || systemctl disable --now -q "$service" 2>/dev/null || true
    return 0
  fi
  echo "setup: $package could not be installed (apt-get's error above); $what needs it" >&2
}
optional initdb postgresql "the /db route" postgresql
optional redis-server redis-server "the /cache route" redis-server
optional nginx nginx-light "lab run --front nginx" nginx
optional wrk wrk "benchmarks/upstream_capacity.py"
optional ab apache2-utils "lab reproduce uwsgi-blog (its ab cases)"
optional shellcheck shellcheck "the shell scripts' lint (tests/test_scripts.py)"

# oha (the client of Granian's benchmark page, `lab reproduce granian-long-io`) and rewrk (the
# same page's client in May 2025) are Rust programs: built with cargo where it is present, once
# (minutes of compiling, a line a minute), each skipped with one line when it cannot be.
cargo=$(command -v cargo || echo "$HOME/.cargo/bin/cargo")
for tool in oha rewrk; do
  command -v "$tool" >/dev/null || [[ -x $HOME/.cargo/bin/$tool ]] && continue
  if [[ -x $cargo ]]; then
    log=$(mktemp "${TMPDIR:-/tmp}/lab-setup-$tool.XXXXXX.log")
    echo "setup: building $tool with cargo (once; a few minutes; log: $log)"
    if with_progress "building $tool" "$log" "$cargo" install "$tool" --locked; then
      rm -f "$log"
    else
      echo "setup: $tool could not be built (cargo's output: $log);" \
        "lab reproduce granian-long-io needs it" >&2
    fi
  else
    echo "setup: note: lab reproduce granian-long-io needs $tool: with Rust's cargo," \
      "run setup again (it builds it), or: cargo install $tool --locked" >&2
  fi
done

[[ -x .venv/bin/python ]] || "$PYTHON" -m venv .venv
stamp=.venv/.lab-installed
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [[ ! -f $stamp || $(cat "$stamp") != "$want" ]]; then
  log=$(mktemp "${TMPDIR:-/tmp}/lab-setup-pip.XXXXXX.log")
  echo "setup: installing the lab and its servers into .venv (uWSGI compiles: about a minute)"
  pip_installs() {  # chained with &&: run under with_progress's `||`, errexit is off in here
    .venv/bin/python -m pip install -q --upgrade pip &&
    # An editable install of this layout (the checkout mapped under concurrency_lab.lib) makes
    # setuptools' editable_wheel print an informational notice about folders that shadow
    # packages; the checkout is meant to be imported (the .pth below), so those are silenced.
    PYTHONWARNINGS="ignore:::setuptools.command.editable_wheel" \
      .venv/bin/python -m pip install -q -e '.[dev]' &&
    # httpbin (a real Flask app the tests check) pins greenlet<3 on Python < 3.12, which gevent's
    # greenlet 3 excludes; it runs on greenlet 3, so it is installed without its pins (its own
    # dependencies are in the dev extras).
    .venv/bin/python -m pip install -q --no-deps 'httpbin>=0.10' &&
    # django-todo (docs' worked example with a database) asks for factory-boy and Faker for its
    # own tests; it serves without them (its runtime dependencies are in the dev extras).
    .venv/bin/python -m pip install -q --no-deps 'django-todo==2.7.0'
  }
  with_progress "installing into .venv" "$log" pip_installs || {
    tail -n 30 "$log" >&2
    echo "setup: pip failed (last 30 lines above; all of it: $log)" >&2
    exit 1
  }
  rm -f "$log"
  echo "$want" > "$stamp"
fi
# The dev venv imports the checkout's packages directly (tests, benchmarks, `locust -f
# loadgen/locustfile.py`); an installed wheel keeps them in concurrency_lab/lib/ instead
# (docs/architecture.md).
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
[[ -f $site/concurrency_lab_checkout.pth && $(cat "$site/concurrency_lab_checkout.pth") == "$PWD" ]] \
  || echo "$PWD" > "$site/concurrency_lab_checkout.pth"
echo "setup: ready ($(.venv/bin/lab --version))"
