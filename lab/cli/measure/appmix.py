"""What `lab run --app` loads: one route, or a traffic mix from weighted `--path`s, a mix file,
an access log or a HAR file, decided before any server starts (its options are declared here);
the log's or the HAR file's mix and what it left out, as tables."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from lab.cli.common.options import (
    APP_ENVIRONMENT,
    LOGIN_OPTIONS,
    dir_option,
    file_option,
    name_list,
    positive,
)
from lab.config import accesslog, appenv, har, mixfile, userapp
from lab.config.accesslog import LogMix
from lab.config.har import HarMix
from lab.config.mix import MixRoute, check_size, shares, split_weight, weighted_ms
from lab.config.scenario import AppSpec, Scenario
from lab.config.userapp import Route, UserApp
from lab.record.errors import LabError

# `lab run` and `lab advise`: where the routes of --app and their weights come from.
TRAFFIC_OPTIONS = (
    click.option(
        "--path",
        "app_paths",
        multiple=True,
        metavar="/ROUTE[#WEIGHT]",
        help="A route of --app to request, /ROUTE or METHOD /ROUTE (repeatable; the first GET "
        "route also proves a server is up). Without weights the last one is loaded; with "
        "#WEIGHT the weighted routes are swept together as a mix, each request's route drawn "
        "by weight: --path '/list#5' --path '/item/7#3' (# is never part of a request, so "
        "it cannot clash with a query; #0: checked, not loaded).",
    ),
    click.option(
        "--probe-path",
        metavar="/ROUTE",
        help="--app route to probe [default: the mix's slowest route]; without a mix, also the "
        "one loaded [default: last --path].",
    ),
    file_option(
        "--mix",
        "mix_file",
        help="With --app: the traffic mix as a TOML file, one [[route]] table per route "
        "(method, path, weight, headers, body or body_file, expect, login); bodies and paths "
        "may hold placeholders filled per request ({uuid}, {n}, {user}, {choice:a|b}, "
        "{line:FILE}); `lab routes --app X` writes a starting one from the app's routes; see "
        "docs/your-traffic.md [default: none].",
    ),
    file_option(
        "--access-log",
        help="With --app: a production access log (nginx/Apache combined or common format, "
        "gunicorn's, uWSGI's default; .gz read too) whose top routes by share are the mix; "
        "what it leaves out (4xx/5xx, methods that change data, static files, lines that do "
        "not parse) is counted and printed before any load. Enough without --path "
        "[default: none].",
    ),
    click.option(
        "--log-top",
        type=int,
        callback=positive,
        help="With --access-log: how many of its routes make the mix "
        f"[default: {accesslog.TOP_ROUTES}].",
    ),
    click.option(
        "--log-methods",
        callback=name_list,
        metavar="POST,PUT,...",
        help="With --access-log: methods that change data to keep in the mix (sent with "
        "--body) [default: none: GET only].",
    ),
    file_option(
        "--har",
        help="With --app: a HAR file (a browser's or a proxy's export) whose requests to one "
        "host are the mix, weighted by count, with their headers and bodies; what it leaves "
        "out (other hosts, static files, websockets, failed or 4xx/5xx entries) is counted "
        "and printed before any load [default: none].",
    ),
    click.option(
        "--har-host",
        metavar="HOST[:PORT]",
        help="With --har: the host whose requests make the mix [default: the commonest].",
    ),
    click.option(
        "--har-keep",
        callback=name_list,
        metavar="cookie,authorization",
        help="With --har: credential headers to keep (cookie, authorization, "
        "proxy-authorization, x-csrftoken, ...) [default: none: dropped].",
    ),
)
APP_CORE = (  # --app and how it is run and checked (`lab run`, `lab advise`)
    click.option(
        "--app",
        "app_target",
        metavar="MODULE:ATTR",
        help="Your own WSGI or ASGI app, e.g. myapp.web:app, or its factory with literal "
        "arguments, e.g. 'myapp:create_app()' (called once in each server process): checked "
        "under every model that can serve it (answers compared, concurrency probed), then "
        "swept on its load route or its traffic mix (weighted --path, or --access-log) "
        "[default: none: the lab's own app].",
    ),
    dir_option(
        "--app-dir",
        help="Directory to import --app from; the import check and every server run in it"
        " [default: the current directory].",
    ),
    click.option(
        "--body",
        "app_body",
        metavar="TEXT",
        help="With --app: the body sent with every route whose method is not GET, "
        "e.g. '{\"n\": 1}' [default: none: an empty body].",
    ),
    click.option(
        "--header",
        "app_headers",
        multiple=True,
        metavar="'NAME: VALUE'",
        help="With --app: a header sent with every request (repeatable), "
        "e.g. 'Authorization: ...'.",
    ),
    click.option(
        "--env",
        "app_env",
        multiple=True,
        metavar="NAME=VALUE",
        help="With --app: a variable of the app's environment, in the import check, the check, "
        "the probe and every server (repeatable; in `lab run`, wins over its scenario's "
        "[env]), e.g. DJANGO_SETTINGS_MODULE=mysite.settings. Placeholders name what the lab runs: "
        f"{appenv.words()}.",
    ),
    click.option(
        "--compare",
        type=click.Choice(["shape", "exact"]),
        help="With --app: how bodies must match across models: shape (JSON keys and value "
        "types; other text, what stays the same when one model answers a route twice) or "
        "exact (byte for byte, the server's own address aside) [default: shape].",
    ),
    click.option(
        "--import-timeout",
        type=float,
        callback=positive,
        help="With --app: seconds importing the app may take [default: 60]; a server's start-up "
        "is bounded by --start-timeout.",
    ),
    *APP_ENVIRONMENT,
)
APP_OPTIONS = (*APP_CORE, *TRAFFIC_OPTIONS, *LOGIN_OPTIONS)  # `lab advise`'s, in one list


@dataclass(frozen=True)
class Traffic:
    """The routes checked, those the sweep loads with their weights, and the probe's route."""

    routes: tuple[Route, ...]  # every route checked, in the order given (the log's after)
    load: tuple[Route, ...]  # what the users request: one route, or the mix's
    mix: tuple[MixRoute, ...]  # the load's weights; () when one route is loaded alone
    probe: Route | None  # None: the mix's slowest route, as the check measures it
    log: LogMix | None = None
    har: HarMix | None = None
    login: Route | None = None  # a mix file's `login = true` route: the session's login step


SOURCES = ("mix_file", "access_log", "har")  # each gives the whole mix: one at most


def traffic(opts: dict[str, Any], scenario_paths: tuple[str, ...] = ()) -> Traffic:
    """From --path (or the scenario's `paths`), --mix, --access-log or --har, --probe-path,
    --body, --header."""
    texts = opts["app_paths"] or scenario_paths
    sources = [f"--{o.replace('_file', '').replace('_', '-')}" for o in SOURCES if opts.get(o)]
    if len(sources) > 1:
        raise LabError(f"{' and '.join(sources)}: each gives the whole mix; give one of them")
    if not texts and not sources:
        raise LabError("--app needs --path /ROUTE (repeatable), --mix, --access-log or --har FILE")
    given = (opts["app_body"], opts["app_headers"])
    split = [split_weight(t) for t in texts]
    routes = userapp.parse_routes(tuple(t for t, _ in split), *given)
    probe = userapp.parse_routes((opts["probe_path"],), *given)[0] if opts["probe_path"] else None
    weighted = any(w is not None for _, w in split)
    log, taken, login = _log(opts, weighted), _har(opts, weighted), None
    if log is not None:
        mix = log.mix()
        routes = _unique(routes + tuple(_route(m, *given) for m in mix))
    elif taken is not None:
        mix = tuple(mix_route(r, w) for r, w in taken.routes)
        routes = _unique(routes + tuple(r for r, _ in taken.routes))
    else:
        mix = tuple(mix_route(r, w) for r, (_, w) in zip(routes, split, strict=True) if w)
        found = mixfile.read(Path(opts["mix_file"]), *given) if opts.get("mix_file") else ()
        login = next((f.route for f in found if f.login), None)
        routes = _unique(routes + tuple(f.route for f in found if not f.login))
        mix += tuple(mix_route(f.route, f.weight) for f in found if f.weight and not f.login)
    if not mix:  # one route loaded alone, as before mixes: the probe route, or the last
        load = probe or routes[-1]
        return Traffic(routes, (load,), (), load, login=login)
    if len({m.label for m in mix}) < len(mix):
        raise LabError("a route of the mix is listed twice: list each once, with one #WEIGHT")
    check_size(mix)
    by_label = {r.label: r for r in routes}
    loaded = tuple(by_label[m.label] for m in mix)
    return Traffic(routes, loaded, mix, probe, log, taken, login)


def mix_route(route: Route, weight: float) -> MixRoute:
    """A route of the mix as the generator sends it: its own method, body and headers."""
    body = route.body if route.method != "GET" else None
    return MixRoute(
        route.label, route.method, route.path, weight, body, route.headers, route.expect
    )


def app_spec(app: UserApp, load: Traffic, health: Route, solo: dict[str, float]) -> AppSpec:
    """What the sweep loads, as the scenario records it: d is the load's time alone (a mix's
    weighted by its shares); the heaviest route stands for the load where one path is named."""
    main = max(load.load, key=lambda r: weights(load).get(r.label, 0.0))
    d = weighted_ms(load.mix, solo) if load.mix else solo.get(main.label, 0.0)
    labels = tuple(r.label for r in load.routes)
    spec = AppSpec(app.target, app.kind, labels, health.path, main.path, d, mix=load.mix)
    return replace(
        spec, method=main.method, body=main.body, headers=main.headers, framework=app.framework
    )


def recorded_solo(scenario: Scenario, recorded: dict[str, Any]) -> Scenario:
    """A resumed run's scenario with the app's d as the run recorded it (checked again, the
    app answers in about the same time, never exactly): the rest of its steps are judged
    against the same ideal as the first."""
    solo = (recorded.get("scenario", {}).get("app") or {}).get("solo_ms")
    if scenario.app is None or not isinstance(solo, int | float):
        return scenario
    return replace(scenario, app=replace(scenario.app, solo_ms=float(solo)))


def weights(load: Traffic) -> dict[str, float]:
    return {m.label: m.weight for m in load.mix}


def _given(
    opts: dict[str, Any], source: str, own: tuple[str, ...], weighted: bool, what: str
) -> bool:
    """Whether the mix's `source` (access_log, har) is given. Its `own` options mean nothing
    without it, and --path weights nothing beside it (`what`, the file, gives the weights):
    both refused, rather than silently ignored."""
    flag = f"--{source.replace('_', '-')}"
    if not opts.get(source):
        if given := [o for o in own if opts.get(o)]:
            said = ", ".join(f"--{o.replace('_', '-')}" for o in given)
            raise LabError(f"{said}: only with {flag} FILE")
        return False
    if weighted:
        raise LabError(f"--path weights and {flag}: {what} gives the weights; drop #N")
    return True


def _log(opts: dict[str, Any], weighted: bool) -> LogMix | None:
    """--access-log read into its mix (None: not given)."""
    if not _given(opts, "access_log", ("log_top", "log_methods"), weighted, "the log"):
        return None
    top = opts.get("log_top") or accesslog.TOP_ROUTES
    return accesslog.read_file(Path(opts["access_log"]), top, _allowed(opts), _login_path(opts))


def _har(opts: dict[str, Any], weighted: bool) -> HarMix | None:
    """--har read into its mix (None: not given)."""
    if not _given(opts, "har", ("har_host", "har_keep"), weighted, "the HAR file"):
        return None
    keep = tuple(k.lower() for k in opts.get("har_keep") or ())
    return har.read_file(Path(opts["har"]), opts.get("har_host") or "", keep, _login_path(opts))


def _login_path(opts: dict[str, Any]) -> str:
    """The path of --login ('POST /login/?next=/' -> /login/; "" without one): a captured
    session's login is the users' own, sent once each, never part of the mix."""
    words = str(opts.get("login") or "").split()
    return words[-1].split("?")[0] if words else ""


def _allowed(opts: dict[str, Any]) -> tuple[str, ...]:
    """--log-methods, each one a method that changes data (the others are kept anyway, or
    cannot be sent)."""
    methods = tuple(m.upper() for m in opts.get("log_methods") or ())
    if bad := [m for m in methods if m not in accesslog.CHANGES_DATA]:
        raise LabError(
            f"--log-methods {','.join(bad)}: expected some of {', '.join(accesslog.CHANGES_DATA)}"
        )
    return methods


def _route(m: MixRoute, body: str | None, headers: tuple[str, ...]) -> Route:
    return userapp.parse_routes((f"{m.method} {m.path}",), body, headers)[0]


def _unique(routes: tuple[Route, ...]) -> tuple[Route, ...]:
    return tuple({r.label: r for r in routes}.values())


def unanswered(load: Traffic, solo: dict[str, float]) -> str:
    """Why the load cannot be swept: a loaded route that no model answered below 400 when it
    was requested alone (every request of the sweep would be an error); "" when none."""
    bad = [r.label for r in load.load if solo.get(r.label, 0.0) <= 0]
    if not bad:
        return ""
    return (
        f"{', '.join(bad)}: no model answered it with a status below 400 when requested alone, "
        "so every request to it would be an error; drop it (or #0 to check it only), or give "
        "the --header or --body it needs"
    )


def render_mix(mix: tuple[MixRoute, ...], solo: dict[str, float], d_ms: float) -> Table:
    """The mix the sweep loads: each route's share and its time alone, and d from them."""
    share = shares(mix)
    table = Table(title=f"the mix: d = {d_ms:g} ms, each route's time alone weighted by its share")
    for column in ("route", "weight", "share", "alone (fastest model)"):
        table.add_column(column, justify="left" if column == "route" else "right")
    for m in mix:
        alone = f"{solo[m.label]:.1f} ms" if solo.get(m.label) else "no answer"
        table.add_row(m.label, f"{m.weight:g}", f"{100 * share[m.label]:.1f}%", alone)
    return table


def _left_out(path: str, unit: str, reasons: Mapping[str, str], counts: Mapping[str, int]) -> Table:
    """What a captured mix's file (a log, a HAR file) left out, counted by reason in the order
    its reader names them, reasons that left nothing out not shown."""
    left = Table(title=f"{path}: left out of the mix")
    left.add_column("why")
    left.add_column(unit, justify="right")
    for key, words in reasons.items():
        if counts.get(key):
            left.add_row(words, str(counts[key]))
    return left


def render_log(log: LogMix) -> list[Table]:
    """The log's top routes by share, and every line left out by its reason."""
    share = shares(log.mix())
    kept = Table(title=f"{log.path}: {log.lines} lines, {log.kept} kept, top routes by share")
    for column in ("route", "requested as", "lines", "share"):
        kept.add_column(column, justify="left" if column != "lines" else "right")
    for route, m in zip(log.routes, log.mix(), strict=True):
        kept.add_row(route.shape, m.label, str(route.requests), f"{100 * share[m.label]:.1f}%")
    left = _left_out(log.path, "lines", accesslog.REASONS, log.left_out)
    formats = ", ".join(f"{n} {k}" for k, n in log.formats.items()) or "none"
    left.caption = f"formats read: {formats}"
    return [kept, left]


# What every browser sends with every request: counted in the HAR's table, not named, so the
# headers a page's own script adds (Content-Type, X-Requested-With, an API key) stand out.
BROWSER_OWN = (
    *("accept", "sec-", "user-agent", "upgrade-insecure-requests", "cache-control"),
    *("pragma", "dnt", "priority", "origin", "referer"),
)


def _header_names(headers: tuple[tuple[str, str], ...]) -> str:
    """A route's replayed headers in a cell: how many, and the names a browser does not send
    with every request ('14 (Content-Type)'; '-' for none)."""
    own = [n for n, _ in headers if not n.lower().startswith(BROWSER_OWN)]
    return f"{len(headers)} ({', '.join(own)})" if own else str(len(headers) or "-")


def render_har(found: HarMix) -> list[Table]:
    """The HAR file's routes by share, and every entry left out by its reason."""
    share = shares(tuple(mix_route(r, w) for r, w in found.routes))
    kept = Table(
        title=f"{found.path}: {found.entries} entries, {found.kept} kept, host {found.host}"
    )
    for column in ("route", "requests", "share", "headers", "body"):
        kept.add_column(column, justify="left" if column in ("route", "headers") else "right")
    for route, n in found.routes:
        names = _header_names(route.headers)
        body = f"{len(route.body.encode())} B" if route.body else "-"
        kept.add_row(route.label, f"{n:g}", f"{100 * share[route.label]:.1f}%", names, body)
    return [kept, _left_out(found.path, "entries", har.REASONS, found.left_out)]
