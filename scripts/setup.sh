#!/usr/bin/env bash
# Set up concurrency-lab on a fresh machine: system packages if missing, then .venv with the lab.
# Safe to run again: it only installs what is missing or changed.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
need_apt=()
command -v "$PYTHON" >/dev/null || need_apt+=(python3)
"$PYTHON" -c 'import venv, ensurepip' 2>/dev/null || need_apt+=(python3-venv)
command -v gcc >/dev/null || need_apt+=(gcc)  # uWSGI compiles from source
# Real databases behind the /db and /cache routes (lab/backends/databases.py starts them per run): installed
# when we are root, otherwise only needed for those routes, so a note instead of a stop.
db_apt=()
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || command -v initdb >/dev/null \
  || db_apt+=(postgresql)
command -v redis-server >/dev/null || db_apt+=(redis-server)
if ((${#db_apt[@]})); then
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    need_apt+=("${db_apt[@]}")
  else
    echo "setup: note: the /db and /cache routes need: sudo apt-get install ${db_apt[*]}" >&2
  fi
fi
"$PYTHON" - <<'PY' 2>/dev/null || need_apt+=(python3-dev)
import sysconfig, pathlib, sys
sys.exit(0 if pathlib.Path(sysconfig.get_paths()["include"], "Python.h").exists() else 1)
PY
if ((${#need_apt[@]})); then
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    echo "setup: installing ${need_apt[*]} with apt-get"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}"
  else
    echo "setup: please install: ${need_apt[*]} (e.g. sudo apt-get install ${need_apt[*]})" >&2
    exit 1
  fi
fi

"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
  echo "setup: Python 3.11 or newer is needed ($("$PYTHON" --version) found); set PYTHON=..." >&2
  exit 1
}

# wrk (an independent load tool) measures the upstream in benchmarks/upstream_capacity.py; optional.
if ! command -v wrk >/dev/null && [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk) >/dev/null \
    || echo "setup: wrk could not be installed; benchmarks/upstream_capacity.py needs it"
fi
# ApacheBench (ab, in apache2-utils) is the blog's own client in `lab reproduce uwsgi-blog`;
# optional: without it those cases are skipped with one line.
if ! command -v ab >/dev/null && [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq apache2-utils) \
    >/dev/null || echo "setup: apache2-utils could not be installed; uwsgi-blog's ab cases need it"
fi

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
  echo "$want" > "$stamp"
fi
# The dev venv imports the checkout's packages directly (tests, benchmarks, `locust -f
# loadgen/locustfile.py`); an installed wheel keeps them in concurrency_lab/lib/ instead
# (docs/architecture.md).
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
[[ -f $site/concurrency_lab_checkout.pth && $(cat "$site/concurrency_lab_checkout.pth") == "$PWD" ]] \
  || echo "$PWD" > "$site/concurrency_lab_checkout.pth"
echo "setup: ready ($(.venv/bin/lab --version))"
