"""Before any load on a user's app: does every model answer alike, and which one serialises?

Each route is requested under every model and the answers compared by what must match: status
and content type always, the body by its shape (lab.run.bodyshape: the first model answers each
route twice, to learn what varies by itself); a difference is a table, never averaged away; each
write is sent twice (`lab.run.writecheck`). The connections each model's processes open to
non-loopback addresses are listed (lab.system.outbound): the sweep must not load a real service.
Then K requests go at once to the loaded route that waits longest alone (`lab.run.mixcheck`; or
`--probe-path`): a model that overlaps them takes about one request's time, one that serialises
them K times that, flagged `serialized` with a hint naming the likely cause for its kind of
worker. A route too fast to time overlap on is noted, not refused."""

from __future__ import annotations

import contextlib
import json
import os
import urllib.parse
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from rich.table import Table

from lab.backends import dbrun
from lab.backends.base import CpuLayout, NativeBackend
from lab.config.models import Knobs, Model
from lab.config.scenario import UpstreamSpec
from lab.config.userapp import Route, UserApp, fit, health_route
from lab.record import placeholders
from lab.record.errors import LabError
from lab.record.login import Login
from lab.run import bodyshape, logincheck, mixcheck, preflight, writecheck
from lab.run.preflight import Preflight, Probe
from lab.run.writecheck import Answer, fetch
from lab.system import outbound, procs
from lab.system.appvenv import AppPins

READY_TIMEOUT_S = 15.0  # the first path must answer (under 500) this soon after a start
NO_UPSTREAM = "http://127.0.0.1:9"  # the discard port: an app whose --env names no upstream
# A probe whose requests kept the server on the CPU this share of its wall time or more queued on
# the CPU, not a lock (whose waiters use none): CPU-bound, not `serialized` (under half a core).
CPU_BOUND = 0.3
POOL_READ_S = 0.005  # the connections the app holds, read this often while the probe runs
HINTS = {
    "bridged": "a one-thread bridge (WsgiToAsgi runs a worker's requests one at a time)",
    "greenlet": "a blocking call gevent cannot patch: a C driver (psycopg2 without psycogreen, "
    "mysqlclient), a C extension's own socket or sleep, or a module imported before "
    "monkey-patching",
    "coroutine": "a blocking call in the event loop (a sync driver, time.sleep, requests) "
    "inside an async view",
    "thread": "fewer threads than requests, or a lock held while waiting",
    "process": "one request per process: add processes",
    # a gevent model that serialised while its processes held connections to the lab's
    # PostgreSQL: the driver is the likeliest blocking call
    "postgres_greenlet": "the PostgreSQL driver blocks the gevent hub while it waits (psycopg2 "
    "is C: gevent cannot patch it): call psycogreen.gevent.patch_psycopg() as the app starts, "
    "use psycopg 3 (gevent-aware), or serve the app with a threaded model",
}


@dataclass(frozen=True)
class Options:
    """How the check runs: bodies compared by shape or byte for byte, how long a server gets to
    answer its first route, the mock upstream's behaviour where the app calls it, the login."""

    compare: str = "shape"
    start_timeout_s: float = READY_TIMEOUT_S
    upstream: UpstreamSpec = field(default_factory=UpstreamSpec)
    probe_k: int = 32  # the probe's width (scenario `probe_k`): wide enough to see a pool of 15
    login: Login | None = None  # each server logged into first (`lab.run.logincheck`)
    environment: AppPins | None = None  # the app's own (lab.system.appvenv); None: the lab's


@dataclass
class ModelCheck:
    model: str
    bridged: bool = False
    answers: dict[str, Answer] = field(default_factory=dict)
    probe: Probe | None = None
    serialized: bool = False
    hint: str = ""
    error: str = ""  # the server did not start, or the app failed
    remote: list[str] = field(default_factory=list)  # non-loopback far ends, and what names them
    solo_ms: dict[str, float] = field(default_factory=dict)  # each loaded route's time alone
    note: str = ""  # why it was not probed (every loaded route answers too fast to time)
    twice: dict[str, str] = field(default_factory=dict)  # a write failing only when repeated
    venv: str = ""  # the app's own environment it served from ("" = the lab's)

    def preflight(self) -> Preflight:
        """This check as the sweep's preflight record: the app's answers and its probe."""
        verify = {path: asdict(a) for path, a in self.answers.items()}
        message = f"serialized: likely {self.hint}" if self.serialized else ""
        probes = [self.probe] if self.probe else []
        return Preflight(self.model, not self.error, self.serialized, verify, probes, message)


@dataclass(frozen=True)
class AppCheck:
    app: str
    probe_path: str
    models: tuple[ModelCheck, ...]
    differences: dict[str, dict[str, str]]  # path -> model -> answer summary
    compare: str = "shape"  # bodies compared by shape, or byte for byte (exact)
    varied: dict[str, str] = field(default_factory=dict)  # path -> how it varied by itself
    environment: AppPins | None = None  # the app's pins and venv; None: the lab's own

    def problems(self) -> list[str]:
        """Why the app cannot be compared fairly: start failures, 5xx answers, differences."""
        found = [f"{m.model}: {m.error}" for m in self.models if m.error]
        found += [
            f"{m.model} answered {path} with {a.summary()}"
            for m in self.models
            for path, a in m.answers.items()
            if a.error or a.status >= 500
        ]
        found += [f"{path} differs between models" for path in self.differences]
        found += [f"{m.model}: {said}" for m in self.models for said in m.twice.values()]
        return found

    def remote(self) -> list[str]:
        """The non-loopback connections any model's processes opened, once each."""
        return sorted({line for m in self.models for line in m.remote})

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    def route_solo_ms(self) -> dict[str, float]:
        """Each loaded route's time alone: the fastest model's best single request (0: none)."""
        return mixcheck.fastest_each([m.solo_ms for m in self.models if not m.error])


@dataclass
class Learnt:
    """Each route's template (lab.run.bodyshape), learnt from the first model that answers it."""

    compare: str = "shape"
    templates: dict[str, bodyshape.Template] = field(default_factory=dict)

    def answers(
        self, base_url: str, routes: tuple[Route, ...], sent: writecheck.Sent
    ) -> dict[str, Answer]:
        """Every route's answer from one server, its body checked against the route's template;
        a route without one yet is asked twice, to learn what varies by itself. A write's two
        answers are the ones `writecheck.sent_twice` got (`sent`): it is sent no more."""
        address = urllib.parse.urlsplit(base_url).netloc
        found = {}
        for route in routes:
            first, second = sent.get(route.label) or (fetch(base_url, route), None)
            answer, text = first[0], bodyshape.own_address_read(first[1], address)
            template = self.templates.get(route.label)
            if template is not None:
                answer = replace(answer, body=template.check(text))
            elif not answer.error:
                again = bodyshape.own_address_read((second or fetch(base_url, route))[1], address)
                learnt = bodyshape.learn(text, again, answer.content_type, self.compare)
                self.templates[route.label] = learnt
            found[route.label] = answer
        return found

    def varied(self) -> dict[str, str]:
        return {label: t.varied for label, t in self.templates.items() if t.varied}


def check_model(
    backend: NativeBackend,
    model: Model,
    bridged: bool,
    knobs: Knobs,
    routes: tuple[Route, ...],
    load: tuple[Route, ...],
    probe: Route | None,
    upstream_url: str,
    learnt: Learnt,
    login: Login | None = None,
    width: int = Options.probe_k,
) -> ModelCheck:
    """Start the model, log in (`login`), request every route, time each loaded one alone, probe
    `probe` (None: the slowest), stop, its connections read all along; failures are evidence."""
    result = ModelCheck(model.name, bridged, venv=model.venv)
    placeholders.CHECK.reseed(placeholders.CHECK_SEED)  # the same choices as the other models
    try:
        server = backend.start_server(model, knobs, upstream_url, procs.free_port())
    except procs.StartFailed as e:
        tail = e.evidence.get("log_tail")
        last = " | ".join(tail[-2:]) if isinstance(tail, list) else ""
        result.error = f"did not start ({e}); {last}"
        return result
    try:
        pid = server.proc.pid
        if login is not None:  # every route as a logged-in user sends it
            given = (routes, load, probe)
            result.error, routes, load, probe = logincheck.logged_in(server.url, login, *given)
            if result.error:
                return result
        with outbound.watching(pid) as seen, outbound.holding(pid, _postgres()) as held:
            sent = writecheck.sent_twice(server.url, routes)  # each write: twice, on fresh data
            result.twice = writecheck.failed_again(routes, sent)
            result.answers = learnt.answers(server.url, routes, sent)
            result.solo_ms = mixcheck.solo_times(server.url, (*load, *([probe] if probe else [])))
            slowest = probe or mixcheck.slowest(load, result.solo_ms)
            _probe(result, model, knobs, server.url, slowest, pid, width)
        if result.serialized and model.unit == "greenlet" and held.get("postgres"):
            result.hint = HINTS["postgres_greenlet"]
        environ = outbound.environment(server.proc.pid)
        result.remote = [outbound.advice(r, environ) for r in sorted(seen)]
    finally:
        server.stop()
    return result


def _postgres() -> dict[int, str]:
    """The lab's PostgreSQL's port, where the run serves one (lab.backends.dbrun exports it)."""
    port = urllib.parse.urlsplit(os.environ.get("LAB_DB_URL", "")).port
    return {port: "postgres"} if port else {}


def _probe(
    result: ModelCheck, model: Model, knobs: Knobs, url: str, probe: Route, pid: int, width: int
) -> None:
    k = min(model.capacity(knobs), width) if model.unit != "process" else 1
    single_ms = result.solo_ms.get(probe.label, 0.0)
    cpu_s = preflight.server_cpu_s(pid)
    with outbound.holding(pid, _postgres(), interval_s=POOL_READ_S) as held:
        probed = mixcheck.probe_route(url, probe, k, single_ms) if k >= 2 else None
    if isinstance(probed, str):
        result.note = probed
    elif probed is not None:
        result.probe = probed = _pooled(probed, max(held.values(), default=0))
        cpu_s = preflight.server_cpu_s(pid) - cpu_s
        result.serialized = not probed.passed and cpu_s < CPU_BOUND * probed.wall_s
        if not probed.passed and not result.serialized:  # the CPU's cap, not a pool's
            result.probe = replace(probed, cap=None)
            result.note = (
                f"CPU-bound, not serialised: its {k} requests kept the server on the CPU "
                f"{cpu_s:.2f} s of {probed.wall_s:.2f} s (a lock's waiters use none); the sweep "
                "measures it"
            )
        if result.serialized:
            result.hint = HINTS["bridged" if result.bridged else model.unit]


def _pooled(probe: Probe, most: int) -> Probe:
    """A probe short of its K while the app held `most` (2 to K - 1, and no fewer than the
    overlap: a reading that missed the peak says less) connections to the lab's PostgreSQL: the
    cap is that pool's size, over the answers' waves, which blur on a busy machine."""
    short = probe.overlap < preflight.PARTIAL * probe.k
    if short and max(2, preflight.PARTIAL * probe.overlap) <= most < probe.k:
        return replace(probe, cap=float(most))
    return probe


def differences(checks: tuple[ModelCheck, ...], paths: list[str]) -> dict[str, dict[str, str]]:
    """Routes (labels) whose status or content type is not the same under every model, or whose
    body departs from the route's template under one."""
    found = {}
    for path in paths:
        answers = {m.model: m.answers[path] for m in checks if path in m.answers}
        kinds = {a.kind() for a in answers.values()}
        if len(kinds) > 1 or any(a.body for a in answers.values()):
            found[path] = {name: a.summary() for name, a in answers.items()}
    return found


def run(
    app: UserApp,
    models: list[Model],
    knobs: Knobs,
    routes: tuple[Route, ...],
    load: tuple[Route, ...],
    probe: Route | None,
    run_dir: Path,
    options: Options | None = None,
    upstream_url: str | None = None,
) -> AppCheck:
    """Check the app under every model that can serve it; written to run_dir/appcheck.json.
    `load`: the routes the sweep loads (one, or a mix); `probe`: the route probed, None for
    the slowest loaded one, as the first model that answers times them (then the same for
    every model). The lab's mock upstream runs beside it where the app's --env names it
    (`upstream_url`: one already running, as for the import check)."""
    options = options or Options()
    fitted = [(m.name, fit(app, m)) for m in models]
    unfit = [name for name, f in fitted if f is None]
    if unfit:
        raise LabError(
            f"--app {app.target} is an ASGI app; WSGI servers cannot run it: drop "
            f"{', '.join(unfit)} from --models"
        )
    backend = NativeBackend(run_dir, CpuLayout(), ready_timeout_s=options.start_timeout_s)
    learnt = Learnt(options.compare)
    checks: list[ModelCheck] = []
    try:
        if upstream_url is None:
            upstream_url = NO_UPSTREAM
            if names_upstream(app.env):
                upstream_url = backend.start_upstream(options.upstream, procs.free_port()).url
        backend.ready_path = health_route(routes).path
        for model, bridged in (f for _, f in fitted if f is not None):
            dbrun.fresh_copy(f"{model.name} (check)")  # each model from the same data
            args = (knobs, routes, load, probe, upstream_url, learnt, options.login)
            checks.append(check_model(backend, model, bridged, *args, options.probe_k))
            if probe is None and (times := checks[-1].solo_ms):
                probe = mixcheck.slowest(load, times)
    finally:
        backend.close()
    labels = [r.label for r in routes]
    found = differences(tuple(checks), labels)
    probed = probe.label if probe else "-"
    given = (options.compare, learnt.varied(), options.environment)
    result = AppCheck(app.target, probed, tuple(checks), found, *given)
    (run_dir / "appcheck.json").write_text(result.to_json() + "\n")
    return result


def names_upstream(env: tuple[tuple[str, str], ...]) -> bool:
    return any("{upstream_" in value for _, value in env)


@contextlib.contextmanager
def upstream(env: tuple[tuple[str, str], ...], run_dir: Path, options: Options) -> Iterator[str]:
    """The lab's mock upstream for the import check and the check, where the app's environment
    names it (else the discard port), stopped when the block ends."""
    if not names_upstream(env):
        yield NO_UPSTREAM
        return
    backend = NativeBackend(run_dir, CpuLayout(), ready_timeout_s=options.start_timeout_s)
    try:
        yield backend.start_upstream(options.upstream, procs.free_port()).url
    finally:
        backend.close()


def render(result: AppCheck) -> list[Table]:
    """The verdict per model, and a table per path whose answers differ."""
    verdict = Table(title=f"{result.app}: every model, probe on {result.probe_path}")
    for column in ("model", "answers", "probe", "verdict"):
        verdict.add_column(column)
    for m in result.models:
        answers = "ok" if all(a.status < 500 and not a.error for a in m.answers.values()) else "5xx"
        probe = (
            f"{m.probe.k} at once in {m.probe.wall_s:.2f} s, overlap {m.probe.overlap}"
            if m.probe
            else "-"
        )
        verdict_text = m.error or (f"serialized: likely {m.hint}" if m.serialized else "concurrent")
        verdict_text = m.note if m.note and not m.error else verdict_text
        if m.probe and m.probe.cap is not None and not m.serialized and not m.note:
            verdict_text = f"concurrent up to a cap of about {m.probe.cap:g} at once"
        if m.bridged:
            verdict_text = f"bridged (WSGI through WsgiToAsgi); {verdict_text}"
        verdict.add_row(m.model, answers, probe, verdict_text)
    tables = [verdict, _routes(result)]
    for path, by_model in result.differences.items():
        diff = Table(title=f"{path}: answers differ between models")
        diff.add_column("model")
        diff.add_column("status, content type, size, body digest; how the body differs")
        for name, summary in by_model.items():
            diff.add_row(name, summary)
        tables.append(diff)
    if remote := result.remote():
        away = Table(title="connections to non-loopback addresses while the app was checked")
        away.add_column("far end, and what to point elsewhere")
        for line in remote:
            away.add_row(line)
        tables.append(away)
    return tables


def _routes(result: AppCheck) -> Table:
    """Each route: how its answers were compared, and what varied when one model answered it
    twice (that part is not compared)."""
    how = "shape; what varied by itself is not compared" if result.compare == "shape" else "bytes"
    table = Table(title=f"routes: status and content type always; bodies by {how}")
    for column in ("route", "varied when one model answered twice", "alike under every model"):
        table.add_column(column)
    labels = dict.fromkeys(label for m in result.models for label in m.answers)
    for label in labels:
        alike = "no" if label in result.differences else "yes"
        table.add_row(label, result.varied.get(label, "no"), alike)
    return table
