"""Hostile input: every class of bad scenario, model file and CLI argument gets a clean error.

The CLI runs in-process with the sweep replaced by a stub (tests/hostile_input.py), so hundreds of
inputs take seconds and no input, however it parses, ever starts load. A clean error is exit code
2, a message on stderr, and no exception escaping (which is what a traceback would be). The
loopback rule itself is tested in tests/test_safety.py.
"""

from __future__ import annotations

import json
import math
import random
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lab.config.scenario import load_scenario
from tests.helpers import lab_cli
from tests.hostile_input import Outcome, models_doc, stubbed_lab, toml_doc

VALID_SCENARIO = {
    "description": "fuzz base",
    "models": ["gunicorn-gevent"],
    "levels": [1, 4],
    "duration_s": 1,
    "warmup_s": 0,
    "settle_s": 0.5,
    "trials": 1,
    "upstream": {"delay_ms": 20, "distribution": "fixed"},
}
VALID_MODEL = {
    "description": "a model",
    "app": "wsgi",
    "unit": "thread",
    "argv": ["{bindir}/gunicorn", "--bind", "{host}:{port}", "servers.app_wsgi:app"],
}
HOSTILE_VALUES: list[Any] = [
    -1,
    0,
    2**63 - 1,
    -(2**63),
    1e308,
    -1e-308,
    math.nan,
    math.inf,
    -math.inf,
    True,
    False,
    "",
    "x" * 5000,
    "../../etc/passwd",
    "\u202e\u0000\x7f",
    "💥",
    "{0}",
    "{",
    "a=b",
    [],
    [[]],
    [1, "a"],
    {},
    {"nested": {"deeper": [1, {"x": 2}]}},
    "127.0.0.1/8",
    "0.0.0.0",
    "10.1.2.3",
]
CLI_OPTIONS = [
    "--levels",
    "--duration",
    "--warmup",
    "--trials",
    "--delay-ms",
    "--route",
    "--knob",
    "--port",
    "--upstream-port",
    "--models",
    "--host",
    "--request-timeout",
    "--start-timeout",
    "--scenario",
    "--models-file",
    "--resume",
    "--mode",
    "--rates",
    "--max-outstanding",
    "--arrival",
]
CLI_VALUES = [
    "",
    "0",
    "-1",
    "nan",
    "inf",
    "-inf",
    "1e309",
    "9" * 40,
    "1,,2",
    ",",
    "a,b",
    "1.5",
    "0x10",
    "\u00a0",
    "💥",
    "../../etc",
    "/dev/null",
    "/",
    "workers",
    "workers=",
    "=3",
    "workers=1e3",
    "colour=3",
    "workers=-5",
    "10.0.0.1",
    "0.0.0.0",
    "::",
    "-",
    "--",
    "nginx",
    "65536",
    "-80",
]


@pytest.fixture()
def lab(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[..., Outcome]:
    """`lab run --out DIR ARGS` in-process (`lab doctor ...` as given): (exit code or
    "accepted", stderr)."""
    invoke = stubbed_lab(monkeypatch)
    out = tmp_path / "out"

    def run(*args: str) -> Outcome:
        return invoke(*(["run", "--out", str(out), *args] if args[:1] != ("doctor",) else args))

    return run


def assert_clean_error(result: tuple[int | str, str], *needles: str) -> None:
    code, err = result
    assert code == 2, err
    assert err.strip() and "Traceback" not in err
    for needle in needles:
        assert needle in err, err


@pytest.fixture()
def write(tmp_path: Path) -> Callable[[str, str | bytes], str]:
    def write_file(name: str, content: str | bytes) -> str:
        path = tmp_path / name
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        return str(path)

    return write_file


SCENARIO_CASES = [
    ("unknown-key", {"durations": 5}, "unknown key 'durations'"),
    ("wrong-type-levels", {"levels": "1,2"}, "levels: expected list"),
    ("wrong-type-duration", {"duration_s": "5"}, "duration_s: expected int or float"),
    ("float-trials", {"trials": 1.5}, "trials: expected int"),
    ("bool-as-number", {"duration_s": True}, "got a boolean"),
    ("non-string-models", {"models": [1, 2]}, "models"),
    ("zero-level", {"levels": [0]}, "positive"),
    ("negative-duration", {"duration_s": -1}, "must be above 0 and at most"),
    ("huge-duration", {"duration_s": 1e9}, "must be above 0 and at most"),
    ("nan-duration", {"duration_s": math.nan}, "finite"),
    ("inf-settle", {"settle_s": math.inf}, "finite"),
    ("error-rate-above-1", {"upstream": {"error_rate": 2}}, "error_rate"),
    ("unknown-upstream-key", {"upstream": {"dealy_ms": 5}}, "unknown key 'dealy_ms'"),
    ("upstream-not-table", {"upstream": 5}, "upstream: expected dict"),
    ("bad-distribution", {"upstream": {"distribution": "pareto"}}, "distribution"),
    ("port-out-of-range", {"server_port": 70000}, "0-65535"),
    ("model-name-traversal", {"models": ["../../etc"]}, "must be 1-64 letters"),
    ("unknown-knob", {"knobs": {"colour": 3}}, "unknown key 'colour'"),
    ("knob-too-big", {"knobs": {"processes": 10**6}}, "between"),
    ("remote-host", {"host": "10.1.2.3"}, "--allow-remote"),
    ("wildcard-host", {"host": "0.0.0.0"}, "not a loopback"),
    ("host-with-path", {"host": "a/b"}, "host: must be"),
    ("empty-models", {"models": []}, "no models"),
]


@pytest.mark.parametrize(
    ("change", "needle"), [c[1:] for c in SCENARIO_CASES], ids=[c[0] for c in SCENARIO_CASES]
)
def test_invalid_scenario_is_rejected_with_file_key_and_reason(lab, write, change, needle):
    path = write("bad.toml", toml_doc({**VALID_SCENARIO, **change}))
    assert_clean_error(lab("--scenario", path), needle)


MODEL_CASES = [
    ("unknown-key", {"colour": "red"}, "unknown key 'colour'"),
    ("missing-argv", {"argv": None}, "missing key 'argv'"),
    ("empty-argv", {"argv": []}, "non-empty list"),
    ("non-string-argv", {"argv": ["{bindir}/gunicorn", 5]}, "list of strings"),
    ("positional-placeholder", {"argv": ["{bindir}/gunicorn", "{0}"]}, "bad placeholder"),
    ("unknown-placeholder", {"argv": ["{bindir}/gunicorn", "{nope}"]}, "unknown placeholder"),
    ("lone-brace", {"argv": ["{bindir}/gunicorn", "{"]}, "bad placeholder"),
    ("nul-in-argv", {"argv": ["{bindir}/gunicorn", "a\u0000b"]}, "NUL"),
    ("env-not-string", {"env": {"A": 1}}, "env: values must be strings"),
    ("env-name-with-equals", {"env": {"A=B": "1"}}, "no '='"),
    ("bad-app", {"app": "cgi"}, "app: must be one of"),
    ("bad-unit", {"unit": "fiber"}, "unit: must be one of"),
    ("baseline-not-bool", {"baseline": "yes"}, "baseline: expected bool"),
]


@pytest.mark.parametrize(
    ("change", "needle"), [c[1:] for c in MODEL_CASES], ids=[c[0] for c in MODEL_CASES]
)
def test_invalid_model_is_rejected_with_file_key_and_reason(lab, write, change, needle):
    table = {k: v for k, v in {**VALID_MODEL, **change}.items() if v is not None}
    path = write("models.toml", models_doc({"mine": table}))
    assert_clean_error(lab("--models-file", path, "--models", "mine"), needle, "models.toml")


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("[models.x]\nargv = [\n", "malformed TOML"),
        (b"\xff\xfe\x00garbage", "not a UTF-8 text file"),
        ("a = " + "[" * 5000 + "]" * 5000, "malformed TOML"),
        ("# padding\n" * 150_000, "larger than"),
        (
            '[models."../../evil"]\ndescription = "d"\napp = "wsgi"\nunit = "thread"\n'
            'argv = ["x"]\n',
            "must be 1-64 letters",
        ),
        ("[knobs]\nworkers = 0\n", "must be positive"),
        ("[knobs]\nworkers = 1.5\n", "expected int or str"),
        ('[knobs]\nworkers = "many"\n', 'whole number or "auto"'),
    ],
    ids=[
        "malformed",
        "binary",
        "deeply-nested",
        "huge-file",
        "name-traversal",
        "zero-knob",
        "float-knob",
        "word-knob",
    ],
)
def test_hostile_models_file(lab, write, content, needle):
    path = write("models.toml", content)
    assert_clean_error(lab("--models-file", path), needle)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--host", "10.1.2.3"], "--allow-remote"),
        (["--host", "0.0.0.0"], "not a loopback"),
        (["--duration", "nan"], "finite"),
        (["--duration", "inf"], "finite"),
        (["--start-timeout", "0"], "must be positive"),
        (["--request-timeout", "-1"], "must be positive"),
        (["--warmup", "-1"], "--warmup: must be between 0 and"),
        (["--port", "70000"], "0-65535"),
        (["--models", "../etc"], "must be 1-64 letters"),
        (["--scenario", "/"], "is a directory"),
        (["--levels", "0,10"], "positive"),
        (["--levels", "-5"], "positive"),
        (["--levels", "ten"], "whole numbers"),
        (["--duration", "0"], "must be positive"),
        (["--duration", "-3"], "must be positive"),
        (["--trials", "0"], "must be positive"),
        (["--knob", "workers"], "NAME=VALUE"),
        (["--knob", "concurrency=-1"], "must be positive"),
        (["--knob", "colour=3"], "unknown key 'colour'"),
    ],
    ids=[
        "remote-host",
        "wildcard-host",
        "nan-duration",
        "inf-duration",
        "zero-start-timeout",
        "negative-request-timeout",
        "negative-warmup",
        "port-range",
        "model-traversal",
        "scenario-is-a-directory",
        "zero-level",
        "negative-level",
        "word-level",
        "zero-duration",
        "negative-duration",
        "zero-trials",
        "knob-no-value",
        "negative-knob",
        "unknown-knob",
    ],
)
def test_hostile_cli_arguments(lab, args, needle):
    assert_clean_error(lab(*args), needle)


def test_resume_of_a_directory_that_is_not_a_run(lab, tmp_path):
    assert_clean_error(lab("--resume", str(tmp_path)), "not a run directory")


def test_remote_host_is_allowed_only_with_the_flag_and_then_loudly(lab):
    code, err = lab("--host", "10.1.2.3", "--allow-remote", "--models", "gunicorn-gevent")
    assert code == "accepted" and "WARNING" in err and "--allow-remote" in err


def fuzz_scenario(rng: random.Random) -> str:
    doc: dict[str, Any] = json.loads(json.dumps(VALID_SCENARIO))
    keys = [
        *VALID_SCENARIO,
        "settle_s",
        "route",
        "mode",
        "knobs",
        "host",
        "probe_k",
        "cpu_n",
        "server_port",
        "request_timeout_s",
        "start_timeout_s",
        "zzz",
        "upstream",
    ]
    for _ in range(rng.randint(1, 3)):
        key = rng.choice(keys)
        value = rng.choice(HOSTILE_VALUES)
        if key == "upstream" and isinstance(value, dict):
            value = {
                rng.choice(["delay_ms", "error_rate", "stall_ms", "x"]): rng.choice(HOSTILE_VALUES)
            }
        doc[key] = value
    text = toml_doc(doc)
    if rng.random() < 0.3:  # byte-level damage too
        pos = rng.randrange(len(text))
        damage = rng.choice(['"', "[", "]", "=", "\n", "{", "\\", "\x00", "\u00ff"])
        text = text[:pos] + damage + text[pos + 1 :]
    return text


def fuzz_models(rng: random.Random) -> str:
    table: dict[str, Any] = dict(VALID_MODEL)
    for _ in range(rng.randint(1, 2)):
        key = rng.choice([*VALID_MODEL, "env", "baseline", "zzz"])
        table[key] = rng.choice(HOSTILE_VALUES)
    name = rng.choice(["mine", "../x", "", "a" * 100, "ok-name", "💥"])
    return models_doc({name: table})


FUZZ_CASES = 250


def test_fuzzed_scenarios_models_and_arguments_never_crash(lab, write):
    """Random hostile input, seeded: every outcome is a clean error or a valid (stubbed) run."""
    rng = random.Random(20261122)
    outcomes: dict[str, int] = {}
    for i in range(FUZZ_CASES):
        cases = [
            (
                "--scenario",
                write(f"s{i}.toml", fuzz_scenario(rng)),
                "--models-file",
                write(f"m{i}.toml", fuzz_models(rng)),
                "--models",
                "gunicorn-gevent",
            ),
            tuple(
                arg
                for _ in range(rng.randint(1, 4))
                for arg in (rng.choice(CLI_OPTIONS), rng.choice(CLI_VALUES))
            ),
        ]
        for args in cases:
            code, err = lab(*args)
            assert code in (2, "accepted"), (args, code, err)
            assert code == "accepted" or (err.strip() and "Traceback" not in err), (args, err)
            outcomes[str(code)] = outcomes.get(str(code), 0) + 1
    print(f"fuzz outcomes over {2 * FUZZ_CASES} inputs: {outcomes}")
    assert outcomes.get("2", 0) > FUZZ_CASES  # most hostile input is refused, none crashes


def test_a_real_subprocess_prints_no_traceback(write, tmp_path):
    path = write("nan.toml", toml_doc({**VALID_SCENARIO, "duration_s": math.nan}))
    done = subprocess.run(
        lab_cli("run", "--scenario", path, "--out", str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "nan.toml" in done.stderr and "duration_s" in done.stderr and "finite" in done.stderr


def test_standard_measures_every_model_quick_shows() -> None:
    """`standard` is the scenario for trusting a difference `quick` shows: it must have them all."""
    quick, standard = load_scenario("quick"), load_scenario("standard")
    assert set(quick.models) <= set(standard.models)
    assert standard.trials > 1
