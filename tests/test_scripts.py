"""The shell scripts fail loudly and clean up after themselves: the real scripts and the real
helpers of scripts/lib.sh, run in bash.

Why: a newcomer's first command once ended in silence (scripts/quickstart.sh on a fresh clone,
with no results/ yet), setup.sh said nothing about the tools it could not install, an interrupted
setup could leave /usr/sbin/policy-rc.d refusing every service start on the machine, and a
Docker permission error read as "no Docker" (issue 43). Where the machine itself would decide the
outcome (root, the tools installed, Docker's socket), a test arranges that state for real: an
unprivileged user, a PATH without some programs, a socket this user may not use. The whole
quick start on a fresh clone is scripts/fresh-clone-check.sh, which scripts/test.sh runs.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LIB = ROOT / "scripts" / "lib.sh"
SCRIPTS = sorted([*ROOT.glob("scripts/*.sh"), *ROOT.glob("docker/*.sh")])
NOBODY = 65534
DOCKER = shutil.which("docker")
needs_docker_client = pytest.mark.skipif(DOCKER is None, reason="no docker client on PATH")


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def helper(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`code` in bash after scripts/lib.sh, under loud_errors (as every script runs)."""
    argv = ["bash", "-c", f'source "{LIB}"; loud_errors t; {code}']
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=60, env={**os.environ, **env}
    )


def unprivileged(argv: list[str]) -> list[str]:
    """As root, the same command as the user nobody; otherwise as it is (already unprivileged)."""
    if os.geteuid() != 0:
        return argv
    if shutil.which("setpriv") is None:
        pytest.skip("root without setpriv (util-linux): no way to run as an unprivileged user")
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv]


@pytest.fixture()
def public() -> Iterator[Path]:
    """A copy of scripts/, docker/ and pyproject.toml that the unprivileged user can read and
    write (pytest's own temporary folders are private to the user running it)."""
    top = Path(tempfile.mkdtemp(prefix="lab-test-scripts."))
    try:
        for folder in ("scripts", "docker"):
            (top / folder).mkdir()
            for script in (ROOT / folder).glob("*.sh"):
                shutil.copy(script, top / folder)
        shutil.copy(ROOT / "pyproject.toml", top)
        for sub in ("home", "tmp"):
            (top / sub).mkdir()
        if os.geteuid() == 0:
            for path in [top, *top.rglob("*")]:
                os.chown(path, NOBODY, NOBODY)
        yield top
    finally:
        shutil.rmtree(top, ignore_errors=True)


def path_without(where: Path, hidden: set[str]) -> str:
    """A PATH of one folder holding every program of this PATH but the hidden ones."""
    folder = where / "bin"
    folder.mkdir()
    for entry in os.environ["PATH"].split(os.pathsep):
        for program in sorted(Path(entry).glob("*")) if Path(entry).is_dir() else []:
            if program.name not in hidden and not (folder / program.name).exists():
                (folder / program.name).symlink_to(program)
    return str(folder)


@pytest.mark.parametrize("path", SCRIPTS, ids=rel)
def test_every_script_parses(path: Path) -> None:
    done = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="no shellcheck (setup.sh, as root)")
def test_every_script_passes_shellcheck() -> None:
    argv = ["shellcheck", "-x", *(rel(p) for p in SCRIPTS)]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-4000:]


@pytest.mark.parametrize("path", [p for p in SCRIPTS if p != LIB], ids=rel)
def test_every_script_names_what_failed(path: Path) -> None:
    text = path.read_text()
    assert re.search(r"^source .*scripts/lib\.sh\"?$|^source .*/lib\.sh\"$", text, re.M), rel(path)
    assert re.search(r"^loud_errors [\w-]+$", text, re.M), f"{rel(path)} does not call loud_errors"


def test_a_failed_command_is_named_with_its_place(tmp_path: Path) -> None:
    script = tmp_path / "demo.sh"
    script.write_text(
        f'source "{LIB}"\nloud_errors demo\n'
        'check() { grep -q absent "$1"; }\n'
        "value=$(check /dev/null)\n"
        "echo not reached\n"
    )
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 1
    assert "not reached" not in done.stdout
    assert f"demo: failed (exit 1) at {script}:3 in check, called at {script}:4: grep -q" in (
        done.stderr
    ), done.stderr


def test_quickstart_reaches_lab_run_without_its_out_folder(tmp_path: Path) -> None:
    """The folder --out names does not exist yet (results/ on a fresh clone): quickstart must get
    as far as `lab run`, here stopped by a bad --levels (its usage error, exit 2) and named."""
    missing = tmp_path / "not" / "yet"
    argv = ["bash", "scripts/quickstart.sh", "--out", str(missing), "--levels", "nonsense"]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Invalid value for '--levels'" in done.stderr
    (named,) = [line for line in done.stderr.splitlines() if line.startswith("quickstart: ")]
    assert named.startswith("quickstart: failed (exit 2) at scripts/quickstart.sh:")
    assert named.endswith('.venv/bin/lab run --scenario quick "$@"'), named


def wait_for(path: Path, proc: subprocess.Popen[str], timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def _default_stop_signals() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def placed_then(policy: Path, sig: signal.Signals | None) -> subprocess.Popen[str]:
    """without_service_starts around a long sleep, stopped by `sig` once policy-rc.d is placed
    and the command runs (SIGINT to the whole process group, as Ctrl-C in a terminal sends it).
    The command says it started: a signal sent while bash was still forking it could reach
    bash alone, which then waited out the whole sleep (a CI run timed out so)."""
    started = policy.with_name("started")
    long = f'sh -c \'touch "$1"; exec sleep 60\' sh "{started}"'
    code = f'source "{LIB}"; loud_errors t; without_service_starts {long}; echo not reached'
    proc = subprocess.Popen(
        ["bash", "-c", code],
        env={**os.environ, "POLICY_RC_D": str(policy)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        # Each stop signal's default action, even where this test runs with it ignored (SIGINT in
        # a background job of a non-interactive shell, SIGHUP under nohup): bash keeps an ignored
        # signal ignored, and so do the sh and sleep it starts (a run under nohup waited out the
        # sleep).
        preexec_fn=_default_stop_signals,
    )
    wait_for(started, proc)
    assert policy.read_text().endswith("exit 101\n")
    if sig is not None:
        os.killpg(proc.pid, sig)
    return proc


STOPS = [
    ("ctrl-c", signal.SIGINT),
    ("sigterm", signal.SIGTERM),
    ("sighup", signal.SIGHUP),
]


@pytest.mark.parametrize(("name", "sig"), STOPS, ids=[n for n, _ in STOPS])
def test_policy_rc_d_is_removed_when_interrupted(
    tmp_path: Path, name: str, sig: signal.Signals
) -> None:
    policy = tmp_path / "policy-rc.d"
    proc = placed_then(policy, sig)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode != 0 and "not reached" not in out
    assert not policy.exists(), f"policy-rc.d left behind after {name}"


def test_policy_rc_d_is_removed_when_the_install_fails(tmp_path: Path) -> None:
    policy = tmp_path / "policy-rc.d"
    done = helper(
        "without_service_starts sh -c 'test -x \"$POLICY_RC_D\" && exit 3'", POLICY_RC_D=str(policy)
    )
    assert done.returncode == 3, done.stderr  # 3: the command saw policy-rc.d in place
    assert not policy.exists()
    assert "t: failed (exit 3)" in done.stderr


def test_policy_rc_d_left_by_a_killed_setup_is_removed_next_time(tmp_path: Path) -> None:
    policy = tmp_path / "policy-rc.d"
    proc = placed_then(policy, signal.SIGKILL)
    proc.communicate(timeout=30)
    assert policy.exists()  # nothing outlives SIGKILL: hence the mark
    done = helper("without_service_starts true", POLICY_RC_D=str(policy))
    assert done.returncode == 0, done.stderr
    assert not policy.exists()


def test_a_policy_rc_d_not_ours_is_left_alone(tmp_path: Path) -> None:
    policy = tmp_path / "policy-rc.d"
    theirs = "#!/bin/sh\n# the image's own\nexit 101\n"
    policy.write_text(theirs)
    done = helper("without_service_starts true", POLICY_RC_D=str(policy))
    assert done.returncode == 0, done.stderr
    assert policy.read_text() == theirs


def test_a_long_step_prints_a_line_every_interval_and_keeps_its_status(tmp_path: Path) -> None:
    log = tmp_path / "step.log"
    step = "sh -c 'echo first; sleep 4; echo second; exit 3'"
    start = time.monotonic()
    done = helper(f'with_progress "counting" "{log}" {step}', LAB_PROGRESS_EVERY="1")
    assert done.returncode == 3, done.stderr
    assert time.monotonic() - start < 30
    ticks = [line for line in done.stderr.splitlines() if line.startswith("t: still counting (")]
    assert len(ticks) >= 2, done.stderr
    assert ticks[0].endswith("; last: first)"), ticks[0]
    assert log.read_text() == "first\nsecond\n"


MISSING_TOOLS = {
    "wrk",
    "ab",
    "redis-server",
    "nginx",
    "initdb",
    "shellcheck",
    "cargo",
    "oha",
    "rewrk",
}


def failing_cargo(home: Path) -> None:
    """A cargo in the user's ~/.cargo/bin (where setup looks) whose every build fails."""
    cargo = home / ".cargo" / "bin" / "cargo"
    cargo.parent.mkdir(parents=True)
    cargo.write_text('#!/bin/sh\necho "   Compiling $2 v0.0.0"\necho "error: no" >&2\nexit 101\n')
    cargo.chmod(0o755)
    if os.geteuid() == 0:
        for path in (home / ".cargo", cargo.parent, cargo):
            os.chown(path, NOBODY, NOBODY)


@pytest.mark.skipif(not Path("/usr/bin/python3").exists(), reason="no Debian python3 to run with")
@pytest.mark.parametrize("cargo", ["none", "fails"], ids=["no-cargo", "cargo-fails"])
def test_setup_without_root_names_each_missing_tool_and_failure(public: Path, cargo: str) -> None:
    """Without root, each optional tool missing is a line with the command that installs it; a
    cargo build that fails is a line naming its log; then pip, given no index here, fails, and
    that failure is named with its log."""
    if cargo == "fails":
        failing_cargo(public / "home")
    env = {
        "PATH": path_without(public, MISSING_TOOLS),
        "HOME": str(public / "home"),
        "TMPDIR": str(public / "tmp"),
        "PYTHON": "/usr/bin/python3",  # the shims of a user's own Python may be private to it
        "PIP_NO_INDEX": "1",
        "PIP_CONFIG_FILE": os.devnull,  # no find-links from a config file either
        "LANG": "C.UTF-8",
    }
    argv = unprivileged(["bash", str(public / "scripts" / "setup.sh")])
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    err = done.stderr
    assert done.returncode == 1, done.stdout + err
    expected = ["redis-server", "wrk", "apache2-utils", "shellcheck"]
    if not Path("/usr/sbin/nginx").exists():  # outside PATH, where setup also looks
        expected.append("nginx-light")
    if not list(Path("/usr/lib").glob("postgresql/*/bin/initdb")):
        expected.append("postgresql")
    for package in expected:
        assert f": sudo apt-get install {package}\n" in err, f"no line for {package}:\n{err}"
    for tool in ("oha", "rewrk"):
        if cargo == "none":
            assert f"or: cargo install {tool} --locked\n" in err, err
            continue
        (log,) = re.findall(rf"setup: {tool} could not be built \(cargo's output: (\S+)\);", err)
        assert Path(log).read_text() == f"   Compiling {tool} v0.0.0\nerror: no\n"
    (failed,) = re.findall(r"setup: pip failed \(last 30 lines above; all of it: (\S+)\)", err)
    assert Path(failed).is_file() and Path(failed).parent == public / "tmp"


@pytest.fixture()
def refusing_socket(public: Path) -> Iterator[Path]:
    """A listening Unix socket the unprivileged user may not connect to (mode 000)."""
    path = public / "docker.sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        server.listen()
        path.chmod(0)
        yield path


def docker_env(public: Path, host: str) -> dict[str, str]:
    return {**os.environ, "DOCKER_HOST": host, "HOME": str(public / "home"), "LAB_SKIP_DOCKER": ""}


@needs_docker_client
@pytest.mark.parametrize(
    "script", ["docker/ci-smoke.sh", "docker/build-image.sh"], ids=["ci-smoke", "build-image"]
)
def test_a_docker_permission_error_is_named_and_fails(
    public: Path, refusing_socket: Path, script: str
) -> None:
    argv = unprivileged(["bash", str(public / script)])
    env = docker_env(public, f"unix://{refusing_socket}")
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "SKIP" not in done.stdout and "debootstrap" not in done.stderr
    assert "permission denied on the Docker socket" in done.stderr, done.stderr


@needs_docker_client
def test_docker_smoke_fails_when_the_engine_does_not_answer(public: Path) -> None:
    env = docker_env(public, f"unix://{public / 'absent.sock'}")
    argv = ["bash", str(public / "docker" / "ci-smoke.sh")]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "docker smoke: FAILED: the Docker Engine does not answer" in done.stderr


SKIPS = [
    ("no-client", {"PATH": "WITHOUT_DOCKER"}, "SKIP docker smoke: no docker client on PATH"),
    ("opted-out", {"LAB_SKIP_DOCKER": "1"}, "SKIP docker smoke: LAB_SKIP_DOCKER=1"),
]


@pytest.mark.parametrize(("name", "env", "said"), SKIPS, ids=[s[0] for s in SKIPS])
def test_docker_smoke_skips_only_without_a_client_or_when_told(
    public: Path, name: str, env: dict[str, str], said: str
) -> None:
    if env.get("PATH") == "WITHOUT_DOCKER":
        env = {"PATH": path_without(public, {"docker", "docker-compose"})}
    argv = ["bash", str(public / "docker" / "ci-smoke.sh")]
    done = subprocess.run(
        argv, env={**os.environ, **env}, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith(said), done.stdout


def test_test_sh_counts_every_browser_skip() -> None:
    """scripts/test.sh tells a browser test's skip from others by a reason naming chromium or
    playwright: every such skip in the suite must keep saying so, or the count would miss it."""
    sources = {p.name: p.read_text() for p in (ROOT / "tests").glob("*.py")}
    reasons = [r for text in sources.values() for r in re.findall(CHROMIUM_SKIP, text)]
    assert len(reasons) >= 2, "the chromium skips were not found"
    assert all("chromium" in reason.lower() for reason in reasons), reasons
    assert 'importorskip("playwright.sync_api")' in sources["test_webui.py"]
    assert "count 'chromium|playwright'" in (ROOT / "scripts" / "test.sh").read_text()


CHROMIUM_SKIP = r'skipif\(\s*CHROMIUM is None,\s*reason="([^"]+)"'
