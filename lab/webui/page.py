"""The lab page of the locust web UI, and saving a run: load it as a second locustfile.

    locust -f loadgen/locustfile.py,lab/webui/page.py --class-picker  # the UI (lab ui does this)
    locust -f loadgen/locustfile.py,lab/webui/page.py --headless -u 20 -t 30s --lab-out results

Why a second locustfile: the users (loadgen/) must not import the lab, while this page needs the
lab's process meters and result format. It adds a "Lab" tab to locust's UI and a page at /lab:
per-model throughput against the ideal (users / delay), p50/p99 from HdrHistograms, server CPU and
RSS, the upstream's in-flight count, live flags, and a button that saves the run as a result
directory. Headless runs with --lab-out save the same directory when locust quits.

As a master (Compose), the page rolls its workers once a second: each answers with its requests
per model (`loadgen.fanout.ModelsReport`), which go into the same recorder, and with its CPU, so
`client_saturated` watches the busiest generator process, not the idle master.
"""

from __future__ import annotations

import json
import logging
import os
import random
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

import gevent
import psutil
from flask import Blueprint, Response, jsonify, render_template, request
from locust import events
from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

from lab.record.errors import LabError
from lab.system import http_client, procstats
from lab.system.sampling import Meter, Reading
from lab.webui import frames
from lab.webui.liveflags import SERVER_CORES_ENV, Live, flags
from lab.webui.save import UiRun, save_run
from loadgen import fanout
from loadgen.live import LiveRecorder
from loadgen.runparams import RunParams, request_for

UPSTREAM_ENV = "LAB_UPSTREAM_URL"
HISTORY_S = 120  # seconds of throughput the page's chart shows
HOST_RESULTS_ENV = "LAB_HOST_RESULTS"  # Compose: where --lab-out is mounted from, on the host
SETTLE_WAIT_S = 10.0  # a master's segment waits this long at most for its workers' user reports
SAVE_HINT = (
    "The results directory must be writable by locust (under Compose: export LAB_UID=$(id -u) "
    "LAB_GID=$(id -g) before docker compose up, or make ./results writable for uid 10001)"
)
log = logging.getLogger("concurrency-lab")


class LabPage:
    """The live state behind the page: recorder, meters, latest samples."""

    def __init__(self, environment: Environment) -> None:
        self.env = environment
        self.recorder = LiveRecorder(Path(tempfile.mkdtemp(prefix="lab-ui-")), time.monotonic)
        targets = {c.__name__: c.host or "" for c in environment.user_classes}
        self.meters = procstats.meters(targets)
        self.front_meters = procstats.meters(targets, front=True)  # nginx, for fronted models
        self.samples: dict[str, Reading] = {}
        self.front_samples: dict[str, Reading] = {}
        self.client = psutil.Process()
        self.client.cpu_percent()
        self.client_cpu = 0.0  # the busiest locust process: this one or a worker
        self.worker_cpu: dict[str, float] = {}  # worker -> CPU% in its latest report
        self.rolls = 0
        self.t0 = time.monotonic()
        self.history: deque[dict[str, Any]] = deque(maxlen=HISTORY_S)  # the page's chart
        self.upstream_url = os.environ.get(UPSTREAM_ENV, "http://upstream:8080")
        self.upstream: dict[str, float] = {}
        self.saved: list[str] = []
        self.settling: tuple[dict[str, int], float] | None = None  # a master's users, since when

    @property
    def params(self) -> RunParams:
        return RunParams.of(self.env.parsed_options)

    def tick(self) -> None:
        """Once a second: sample the servers, their fronts, locust and the upstream; close the
        interval."""
        _sample(self.meters, self.samples)
        _sample(self.front_meters, self.front_samples)
        self.client_cpu = max([self.client.cpu_percent(), *self.worker_cpu.values()])
        self.worker_cpu = {}
        try:
            _, raw, _ = http_client.get(self.upstream_url, "/stats", timeout_s=1.0)
            self.upstream = json.loads(raw)
        except (OSError, ValueError):
            self.upstream = {}
        self.recorder.roll(self._extra)
        self._begin_when_reported()
        self.history.append(self._moment())
        if isinstance(self.env.runner, MasterRunner):  # their answers go into the next roll
            self.rolls += 1
            self.env.runner.send_message(fanout.ROLL, {"seq": self.rolls})

    def settled(self) -> None:
        """locust's spawning_complete: a segment begins with the users now running. A master
        fires it after waiting a second at most (LOCUST_WAIT_FOR_WORKERS_REPORT_AFTER_RAMP_UP)
        for its workers to report the users they started: on a slow machine the reports come
        later, and a segment begun with what they had reported by then holds too few users or
        no model at all (nothing to save). So a master's segment begins at the first tick whose
        reports match the users it dispatched."""
        runner = self.env.runner
        if not isinstance(runner, MasterRunner):
            self.recorder.begin(self.users())
            return
        self.settling = (_running(runner.target_user_classes_count), time.monotonic())
        self._begin_when_reported()

    def _begin_when_reported(self) -> None:
        """Begin the segment a master settled on once its workers report those users (after
        SETTLE_WAIT_S: with what they report, and a warning)."""
        if self.settling is None:
            return
        dispatched, since = self.settling
        reported = _running(self.users())
        if reported != dispatched:
            if time.monotonic() - since < SETTLE_WAIT_S:
                return
            log.warning("lab: workers report %s of the users dispatched, %s", reported, dispatched)
        self.settling = None
        self.recorder.begin(reported)

    def stopped(self) -> None:
        """locust's test_stop: the running segment ends (one still waiting for reports never
        begins)."""
        self.settling = None
        self.recorder.finish()

    def nothing_measured(self) -> str:
        """Why there is nothing to save yet, in one line."""
        if self.settling is None:
            return "nothing measured yet: start a swarm first"
        dispatched, _ = self.settling
        reported = sum(_running(self.users()).values())
        return (
            f"nothing measured yet: locust's workers have reported {reported} of the "
            f"{sum(dispatched.values())} users started; save again in a few seconds"
        )

    def _moment(self) -> dict[str, Any]:
        """This second for the chart: each model's live rps and its ideal (None: no ideal)."""
        rows = self.rows()
        models = {r["model"]: {"rps": r["rps"], "ideal": r["ideal_rps"] or None} for r in rows}
        return {"t": round(time.monotonic() - self.t0, 1), "models": models}

    def on_worker_report(self, msg: Any, **_: Any) -> None:
        report = fanout.ModelsReport.from_data(msg.data)
        for model, interval in report.intervals().items():
            self.recorder.intervals.add(model, interval)
        self.worker_cpu[str(msg.node_id)] = report.cpu_pct

    def _extra(self, model: str) -> dict[str, float]:
        now = self.samples.get(model, Reading(-1.0))
        front = self.front_samples.get(model, Reading(-1.0, -1.0))
        return {
            "server_cpu_pct": now.cpu_pct,
            "server_rss_mb": now.rss_mb,
            "server_pss_mb": now.pss_mb,
            "front_cpu_pct": front.cpu_pct,
            "front_rss_mb": front.rss_mb,
            "client_cpu_pct": self.client_cpu,
            "upstream_inflight": float(self.upstream.get("inflight", -1)),
        }

    def users(self) -> dict[str, int]:
        runner = self.env.runner
        if isinstance(runner, MasterRunner):  # the workers run the users
            return dict(runner.reported_user_classes_count)
        return dict(runner.user_classes_count) if runner is not None else {}

    def rows(self) -> list[dict[str, Any]]:
        """One row per model offered (before a start) or chosen (after one) in the picker."""
        delay_s = self.params.mean_delay_s
        counts = self.users()
        out = []
        for cls in sorted(self.env.user_classes, key=lambda c: c.__name__):
            model = cls.__name__
            users = counts.get(model, 0)
            live = self.recorder.live(model)
            ideal = round(users / delay_s, 1) if delay_s else 0.0
            now = self.samples.get(model)
            cpu, pss = (now.cpu_pct, now.pss_mb) if now else (None, None)
            front = self.front_samples.get(model)
            raised = flags(self._live(users, live, ideal, cpu))
            out.append(
                {
                    "model": model,
                    "your_app": getattr(cls, "runs_app", ""),
                    "users": users,
                    **live,
                    "ideal_rps": ideal,
                    "efficiency": round(min(live["rps"] / ideal, 1.0), 2) if ideal else None,
                    "server_cpu_pct": cpu,
                    "server_pss_mb": pss,
                    "front_cpu_pct": front.cpu_pct if front else None,
                    "flags": ", ".join(f"{k} ({v})" for k, v in raised.items()),
                }
            )
        return out

    def _live(self, users: int, live: dict[str, float], ideal: float, cpu: float | None) -> Live:
        """One model's live figures for the rule table: its server's cores (`lab ui` says;
        the knobs' default process, else), the upstream's own loop lag."""
        cores = float(os.environ.get(SERVER_CORES_ENV) or 1.0)
        return Live(
            users,
            live["rps"],
            ideal,
            cpu,
            self.client_cpu,
            cores,
            live.get("p50_ms"),
            live.get("errors_per_s", 0.0),
            self.upstream,
        )

    def data(self) -> dict[str, Any]:
        p = self.params
        return {
            "models": self.rows(),
            "upstream": self.upstream,
            "client_cpu_pct": self.client_cpu,
            "delay_ms": p.delay_ms,
            "distribution": p.distribution,
            "route": p.route,
            "saved": self.saved,
            "history": list(self.history),
        }

    def save(self, out: Path) -> Path:
        segments = [*self.recorder.done, *self.recorder.snapshot()]
        backend = "native" if os.environ.get(procstats.PIDS_ENV) else "compose"
        path = request_for(self.params, random.Random(0)).path
        run_dir = save_run(out, segments, UiRun(self.params, path, backend, sys.argv))
        self.saved.append(str(run_dir))
        return run_dir


def _running(users: dict[str, int]) -> dict[str, int]:
    """The models with users, and how many."""
    return {model: n for model, n in users.items() if n > 0}


def _sample(meters: dict[str, Meter], into: dict[str, Reading]) -> None:
    """Each meter's reading into `into`; a gone process shows nothing rather than stop the page."""
    for model, meter in meters.items():
        try:
            into[model] = meter.sample()
        except Exception:  # the process is gone
            into.pop(model, None)


def blueprint(page: LabPage, out: Path) -> Blueprint:
    bp = Blueprint("lab", __name__, template_folder="templates", url_prefix="/lab")

    @bp.get("/")
    def index() -> str:
        return render_template("lab.html")

    @bp.get("/data")
    def data() -> Response:
        return jsonify(page.data())

    @bp.get("/profile")
    def profiled() -> tuple[Response, int]:
        """Where one model's time goes over the next few seconds (lab.webui.frames)."""
        model = request.args.get("model", "")
        try:
            seconds = frames.seconds_asked(request.args.get("seconds"))
        except LabError as e:
            return jsonify({"problem": str(e)}), 400
        meter = page.meters.get(model)
        if meter is None:
            known = ", ".join(sorted(page.meters)) or "none"
            said = f"no server to sample for {model!r} (measured: {known})"
            return jsonify({"problem": said}), 404
        return jsonify({"model": model, **frames.of_meter(meter, seconds)}), 200

    @bp.post("/save")
    def save() -> Response | tuple[Response, int]:
        if not any(page.recorder.done) and not page.recorder.snapshot():
            return jsonify({"ok": False, "message": page.nothing_measured()})
        try:
            saved = page.save(out)
        except (LabError, OSError) as e:
            return jsonify({"ok": False, "message": f"not saved: {e}. {SAVE_HINT}"})
        except Exception as e:  # a bug: said in one line (the page shows it), traced in the log
            log.exception("lab: saving the run failed")
            said = " ".join(f"not saved: {type(e).__name__}: {e}".split())
            return jsonify({"ok": False, "message": said}), 500
        host_dir = os.environ.get(HOST_RESULTS_ENV, "")
        host_path = str(Path(host_dir) / saved.name) if host_dir else ""
        return jsonify({"ok": True, "path": str(saved), "host_path": host_path})

    return bp


def _extend_locust_ui(page: LabPage, web_ui: Any) -> None:
    """A "Lab" tab in locust's own UI, fed with the stats it polls anyway."""
    columns = [
        "model",
        "your_app",
        "users",
        "rps",
        "ideal_rps",
        "efficiency",
        "p50_ms",
        "p99_ms",
        "errors_per_s",
        "server_cpu_pct",
        "server_pss_mb",
        "flags",
    ]
    web_ui.template_args["extendedTabs"] = [{"title": "Lab", "key": "lab"}]
    web_ui.template_args["extendedTables"] = [
        {"key": "lab", "structure": [{"key": c, "title": c} for c in columns]}
    ]
    web_ui.template_args["extendedCsvFiles"] = [{"href": "/lab/", "title": "Lab page (save run)"}]

    @web_ui.app.after_request
    def _with_lab_rows(response: Response) -> Response:
        if request.path == "/stats/requests" and response.is_json:
            body = {**response.get_json(), "extended_stats": [{"key": "lab", "data": page.rows()}]}
            response.set_data(json.dumps(body))
        return response


@events.init_command_line_parser.add_listener
def _arguments(parser: Any) -> None:
    parser.add_argument(
        "--lab-out",
        default="",
        include_in_web_ui=False,
        help="Save the run here as a result directory when locust quits "
        "(and the UI's Save button's default place: results/)",
    )


_page: LabPage | None = None


@events.init.add_listener
def _init(environment: Environment, **_: Any) -> None:
    global _page
    if isinstance(environment.runner, WorkerRunner):
        return
    page = _page = LabPage(environment)
    environment.events.request.add_listener(page.recorder.on_request)
    if isinstance(environment.runner, MasterRunner):
        environment.runner.register_message(fanout.MODELS_INTERVAL, page.on_worker_report)
    gevent.spawn(_ticker, page)
    web_ui, options = environment.web_ui, environment.parsed_options
    if web_ui is not None and web_ui.app is not None and options is not None:
        out = Path(options.lab_out or "results")
        web_ui.app.register_blueprint(blueprint(page, out))
        _extend_locust_ui(page, web_ui)


def _ticker(page: LabPage) -> None:
    while True:
        gevent.sleep(1.0)
        page.tick()


@events.spawning_complete.add_listener
def _settled(user_count: int, **_: Any) -> None:
    if _page is not None:
        _page.settled()


@events.test_stop.add_listener
def _stopped(**_: Any) -> None:
    if _page is not None:
        _page.stopped()


@events.quitting.add_listener
def _quitting(environment: Environment, **_: Any) -> None:
    out = getattr(environment.parsed_options, "lab_out", "")
    measured = _page is not None and (_page.recorder.done or _page.recorder.snapshot())
    if _page is not None and measured and out and environment.web_ui is None:
        log.warning("lab: saved %s", _page.save(Path(out)))
