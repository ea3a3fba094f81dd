#!/usr/bin/env bash
# Set up concurrency-lab on a fresh machine: system packages if missing, then .venv with the lab.
# Safe to run again: it only installs what is missing or changed.
set -euo pipefail
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

# Real databases behind the /db and /cache routes: the lab starts its own server per run
# (lab/backends/databases.py) and needs only their programs. Debian starts a package's service
# when it is installed and at every boot: a system database running beside the benchmark would
# take CPU and memory from it. So the install runs with policy-rc.d forbidding service starts,
# and the services are disabled at boot; a database that was already installed is left alone.
# Installed when we are root, otherwise only needed for those routes: a note, not a stop.
db_apt=()
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || command -v initdb >/dev/null \
  || db_apt+=(postgresql)
command -v redis-server >/dev/null || db_apt+=(redis-server)
install_stopped() {  # apt_install with no service started; each package's service (named as
  # the package, as postgresql's and redis-server's are) stays off at boot too
  local policy=/usr/sbin/policy-rc.d placed= status=0
  [[ -e $policy ]] || { printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && placed=1; }
  apt_install "$@" || status=$?
  [[ -z $placed ]] || rm -f "$policy"
  if [[ -d /run/systemd/system ]]; then
    systemctl disable --now -q "$@" 2>/dev/null || true
  fi
  return "$status"
}
if ((${#db_apt[@]})); then
  if root_apt; then
    echo "setup: installing ${db_apt[*]} with apt-get (no service started: the lab runs its own)"
    install_stopped "${db_apt[@]}"
  else
    echo "setup: note: the /db and /cache routes need: sudo apt-get install ${db_apt[*]}" >&2
  fi
fi

# Optional tools, each skipped with one line when it cannot be installed: wrk (an independent
# load tool) measures the upstream in benchmarks/upstream_capacity.py; ApacheBench (ab, in
# apache2-utils) is the blog's own client in `lab reproduce uwsgi-blog`.
if root_apt; then
  command -v wrk >/dev/null || apt_install wrk >/dev/null \
    || echo "setup: wrk could not be installed; benchmarks/upstream_capacity.py needs it"
  command -v ab >/dev/null || apt_install apache2-utils >/dev/null \
    || echo "setup: apache2-utils could not be installed; uwsgi-blog's ab cases need it"
fi

# oha (the client of Granian's benchmark page, `lab reproduce granian-long-io`) and rewrk (the
# same page's client in May 2025) are Rust programs: built with cargo where it is present, once
# (minutes of compiling), each skipped with one line when it cannot be.
cargo=$(command -v cargo || echo "$HOME/.cargo/bin/cargo")
for tool in oha rewrk; do
  command -v "$tool" >/dev/null || [[ -x $HOME/.cargo/bin/$tool ]] && continue
  if [[ -x $cargo ]]; then
    echo "setup: building $tool with cargo (once; a few minutes)"
    "$cargo" install "$tool" --locked >/dev/null 2>&1 \
      || echo "setup: $tool could not be built; lab reproduce granian-long-io needs it"
  else
    echo "setup: $tool not installed (no cargo); lab reproduce granian-long-io needs it"
  fi
done

# nginx (Debian's nginx-light) is the front of `lab run --front nginx`; optional. The lab starts its
# own per run (own config and prefix, 127.0.0.1): a policy-rc.d keeps the package from starting a
# system nginx on port 80, and the boot-time service is disabled.
if ! command -v nginx /usr/sbin/nginx >/dev/null && [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
  rc=/usr/sbin/policy-rc.d own_rc=0
  [[ -e $rc ]] || { printf '#!/bin/sh\nexit 101\n' >"$rc" && chmod +x "$rc" && own_rc=1; }
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light) \
    >/dev/null || echo "setup: nginx-light could not be installed; lab run --front nginx needs it"
  ((own_rc)) && rm -f "$rc"
  systemctl disable -q nginx 2>/dev/null || true
fi

[[ -x .venv/bin/python ]] || "$PYTHON" -m venv .venv
stamp=.venv/.lab-installed
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [[ ! -f $stamp || $(cat "$stamp") != "$want" ]]; then
  echo "setup: installing the lab and its servers into .venv (uWSGI compiles: about a minute)"
  .venv/bin/python -m pip install -q --upgrade pip
  # An editable install of this layout (the checkout mapped under concurrency_lab.lib) makes
  # setuptools' editable_wheel print an informational notice about folders that shadow packages;
  # the checkout is meant to be imported (the .pth below), so that module's notices are silenced.
  PYTHONWARNINGS="ignore:::setuptools.command.editable_wheel" \
    .venv/bin/python -m pip install -q -e '.[dev]'
  # httpbin (a real Flask app the tests check) pins greenlet<3 on Python < 3.12, which gevent's
  # greenlet 3 excludes; it runs on greenlet 3, so it is installed without its pins (its own
  # dependencies are in the dev extras).
  .venv/bin/python -m pip install -q --no-deps 'httpbin>=0.10'
  # django-todo (docs' worked example with a database) asks for factory-boy and Faker for its own
  # tests; it serves without them (its runtime dependencies are in the dev extras).
  .venv/bin/python -m pip install -q --no-deps 'django-todo==2.7.0'
  echo "$want" > "$stamp"
fi
# The dev venv imports the checkout's packages directly (tests, benchmarks, `locust -f
# loadgen/locustfile.py`); an installed wheel keeps them in concurrency_lab/lib/ instead
# (docs/architecture.md).
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
[[ -f $site/concurrency_lab_checkout.pth && $(cat "$site/concurrency_lab_checkout.pth") == "$PWD" ]] \
  || echo "$PWD" > "$site/concurrency_lab_checkout.pth"
echo "setup: ready ($(.venv/bin/lab --version))"
