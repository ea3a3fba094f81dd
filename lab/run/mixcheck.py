"""The check's part of a traffic mix: each loaded route's time alone, and which route is probed.

d in the ideal c / d is the mix's service time with nothing else running: each route's best
single request (`solo_times`), weighted by its share (`lab.config.mix.weighted_ms`). The probe
needs a route that waits long enough for overlap to be timed: the mix's slowest. A mix whose
every route answers fast is still swept (the sweep measures it); it is only not probed, and says
so, since a fast route is no evidence against the app.
"""

from __future__ import annotations

from lab.config.userapp import Route
from lab.run import preflight
from lab.run.preflight import Probe
from lab.system import http_client

SOLO_TRIES = 2  # the best of these single requests: a route's time alone
MIN_PROBE_MS = 50.0  # a route faster than this has nothing to overlap that a probe could time


def solo_ms(base_url: str, route: Route) -> float:
    """The route's best single request on a fresh connection, ms (0 where none answered)."""
    times = []
    for _ in range(SOLO_TRIES):
        sent = route.filled()  # placeholders: each request its own values
        try:
            status, _, seconds = http_client.get(base_url, sent.path, **sent.request())
        except OSError:
            continue
        if status < 400 or status in route.expect:
            times.append(seconds * 1000)
    return round(min(times), 1) if times else 0.0


def solo_times(base_url: str, routes: tuple[Route, ...]) -> dict[str, float]:
    """Every loaded route's time alone under one model (label -> ms)."""
    return {r.label: solo_ms(base_url, r) for r in routes}


def slowest(routes: tuple[Route, ...], times: dict[str, float]) -> Route:
    """The route that waits the longest alone: the one whose overlap a probe can time."""
    return max(routes, key=lambda r: times.get(r.label, 0.0))


def fastest_each(checks: list[dict[str, float]]) -> dict[str, float]:
    """Each route's time alone under the model that served it fastest (0: none answered)."""
    labels = {label for times in checks for label in times}
    return {
        label: min((t[label] for t in checks if t.get(label, 0.0) > 0), default=0.0)
        for label in labels
    }


def probe_route(base_url: str, route: Route, k: int, single_ms: float) -> Probe | str:
    """K simultaneous requests to a route, timed against its own single-request time; a note
    instead where it answers too fast for overlap to be timed (no reason to refuse the app)."""
    if single_ms < MIN_PROBE_MS:
        return (
            f"not probed: {route.label}, the slowest loaded route, answers in {single_ms:.0f} ms "
            f"alone (under {MIN_PROBE_MS:.0f} ms, nothing to overlap); --probe-path a route "
            "that waits to probe"
        )
    return preflight.probe(base_url, route.path, k, single_ms, each=route.filled)
