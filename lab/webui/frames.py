"""Where a model's time goes now, for the lab page: a few seconds of py-spy on its server's
process tree, read into the owners and top packages a profiled step keeps (lab.verdict.owners).

Why on demand, not always: the sampler reads the server's memory, which costs it a little
(benchmarks/profile_cost.py); a button pressed while a swarm runs costs only the seconds asked
for, and only then. Natively the page samples the server itself (`lab ui`: the server is a child
of this machine); under Compose each model's container answers for its own server through its
meter (`GET /profile?seconds=S`, lab.webui.meter), since only there can py-spy see the server's
processes, with the one capability reading another process's memory needs (`SYS_PTRACE`,
compose.yaml); the locust container gets none.
"""

from __future__ import annotations

import json
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from lab.record.errors import LabError
from lab.system import profile
from lab.system.procstats import RemoteMeter
from lab.system.sampling import Meter, TreeMeter
from lab.verdict import owners

DEFAULT_SECONDS = 3.0
MAX_SECONDS = 10.0  # a look while watching, not a step's profile: `lab run --profile` is that
DENIED = ("permission", "denied", "operation not permitted", "ptrace")
CAPABILITY = (
    "py-spy may not read the server's memory here: in a container, give the model's service "
    "cap_add: [SYS_PTRACE] (compose.yaml does); natively, run the UI as the server's user"
)


def seconds_asked(text: str | None) -> float:
    """`?seconds=S` as the page sends it: a number of seconds above 0 and at most MAX_SECONDS."""
    if not text:
        return DEFAULT_SECONDS
    try:
        seconds = float(text)
    except ValueError:
        raise LabError(f"seconds={text}: expected a number of seconds") from None
    if not 0 < seconds <= MAX_SECONDS:
        raise LabError(f"seconds={text}: must be above 0 and at most {MAX_SECONDS:g}")
    return seconds


def sample(pid: int, seconds: float) -> dict[str, Any]:
    """The server's stacks over the next `seconds` (`pid` and every process it started), as the
    owners' shares, the CPU's top packages and the blocking calls; {"problem": ...} where py-spy
    is missing or may not read the server."""
    with tempfile.TemporaryDirectory(prefix="lab-frames-") as tmp:
        profiler = profile.Profiler(pid, Path(tmp) / "now")
        profiler.start()
        if not profiler.problem:
            time.sleep(seconds)
        stacks = profiler.stop()
    if stacks is None:
        return {"problem": _problem(profiler.problem)}
    found = owners.summary(stacks.wall, stacks.busy)
    said = owners.said(found, "server_cpu")  # the CPU's top packages, and any blocking call
    return {"seconds": seconds, "rate_hz": stacks.rate_hz, **found, "said": said}


def _problem(problem: str) -> str:
    low = problem.lower()
    return f"{problem}; {CAPABILITY}" if any(word in low for word in DENIED) else problem


def of_meter(meter: Meter, seconds: float) -> dict[str, Any]:
    """Where a model's time goes, through whichever meter the page has for it: its own process
    (native) or its container's meter over HTTP (Compose)."""
    if isinstance(meter, TreeMeter):
        return sample(meter.root.pid, seconds)
    if isinstance(meter, RemoteMeter):
        url = urllib.parse.urljoin(meter.url, f"profile?seconds={seconds:g}")
        try:
            with urllib.request.urlopen(url, timeout=seconds + profile.STOP_WAIT_S + 5) as reply:
                return dict(json.load(reply))
        except (OSError, ValueError) as e:
            return {"problem": f"its meter did not answer {url}: {e}"}
    return {"problem": "no meter for this model: the page cannot see its server"}
