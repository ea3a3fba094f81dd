"""Benchmark (not a test): what in a whole `lab run --mode open` costs the tail that oha alone
does not pay?

One server (gunicorn-asyncio, 200 coroutines, pinned to the server's cores) and one route
(`/sleep?ms=10`: `--route sleep --delay-ms 10`). Each round, in a rotated order, on a fresh
server each time:

- oha alone: `lab serve`'s server and upstream started as `lab run` starts them
  (`NativeBackend`, the same cores), a discarded warm-up as long as `lab run`'s, then at each rate
  the oha engine's own command line on the generator's core, read from its own per-request
  records over the same window after the same settle (`benchmarks.latency_fidelity.oha`);
- `lab run --mode open` as a user runs it (`as is`), and the same with one factor removed
  (`VARIANTS`): the per-second samplers not started, the `.hlog` writer left out, the lab's own
  process (its samplers' threads, its reading of the generator) pinned to the generator's core,
  the upstream moved off the generator's core, no warm-up. A factor's removal is a patch this
  script applies to the lab in its own process (`--as-lab`), never a change to the lab.

Each lab step's p99 is a ratio of oha alone's at the same rate in the same round; a factor's
share of the gap is (as is - without it) / (as is - 1), from the medians over rounds (only for
the variants that take something out: `REMOVALS`). oha's own command line is the same in both
(`-q`, `-c 500`, `--latency-correction`, `-z` the settle and the window, its default threads on
its one pinned core: one), so the connection cap and oha's thread count are no factor here.

`--raw` keeps each run's p99s (one JSON a line, with the load average before and after);
`--table RAW --summary docs/figures/bench-open-loop-gap.json` writes the table as the docs'
figure summary.

Usage: .venv/bin/python benchmarks/open_loop_gap.py [--rounds 3] [--seconds 5] [--rates 300,800]
       [--variants 'as is,no samplers,...'] [--raw OUT.jsonl]
       .venv/bin/python benchmarks/open_loop_gap.py --table RAW.jsonl [--summary OUT.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from benchmarks import latency_fidelity
from benchmarks.fidelity_table import Load
from benchmarks.figures import print_table, write_summary
from lab.backends.base import CpuLayout, NativeBackend
from lab.config.models import load_registry
from lab.config.scenario import UpstreamSpec
from lab.record.step import flat
from lab.record.stepjson import from_json
from lab.system import procs

MODEL = "gunicorn-asyncio"
CONCURRENCY = 200
DELAY_MS = 10
WARMUP_S = 3.0  # `lab run`'s quick scenario: a discarded warm-up per model, at its top rate
VARIANTS = {
    "as is": "lab run as a user runs it",
    "no samplers": "the per-second samplers never started (observe.Samplers.start)",
    "no hlog": "no .hlog writer (steps.StepRunner._hlog yields None)",
    "lab on gen core": "the lab's own process pinned to the generator's core",
    "upstream on server core": "the mock upstream pinned to the server's core",
    "no warm-up": "--warmup 0",
}


def patched(variant: str) -> list[str]:
    """Apply `variant`'s patch to the lab in this process; the extra `lab run` options."""
    from lab.backends import base
    from lab.run import observe, steps

    layout = CpuLayout.split(pin=True)
    if variant == "no samplers":
        observe.Samplers.start = lambda self: None  # type: ignore[method-assign]
    elif variant == "no hlog":

        @contextlib.contextmanager
        def _hlog(self: object, key: object, warmup: bool) -> Iterator[None]:
            yield None

        steps.StepRunner._hlog = _hlog  # type: ignore[method-assign,assignment]
    elif variant == "lab on gen core":
        os.sched_setaffinity(0, set(layout.client))  # the server and upstream are pinned apart
    elif variant == "upstream on server core":
        start = base.NativeBackend.start_upstream

        def start_upstream(self: NativeBackend, spec: UpstreamSpec, port: int) -> object:
            self.layout, was = CpuLayout(server=layout.server, client=layout.server), self.layout
            try:
                return start(self, spec, port)
            finally:
                self.layout = was

        base.NativeBackend.start_upstream = start_upstream  # type: ignore[method-assign,assignment]
    elif variant == "no warm-up":
        return ["--warmup", "0"]
    return []


def as_lab(variant: str, argv: list[str]) -> None:
    """`lab` with `variant`'s patch (this script run as `--as-lab VARIANT -- ARGS`)."""
    from lab.cli.main import entry

    entry([*argv, *patched(variant)])


def lab_run(variant: str, rates: list[int], seconds: float, out: Path) -> dict[int, float]:
    """One `lab run --mode open` under `variant`: each rate's p99 (ms) from its step record."""
    argv = ["run", "--models", MODEL, "--mode", "open", "--rates", ",".join(map(str, rates))]
    argv += ["--route", "sleep", "--delay-ms", str(DELAY_MS), "--duration", f"{seconds:g}"]
    argv += ["--knob", f"concurrency={CONCURRENCY}", "--trials", "1", "--remeasure", "0"]
    argv += ["--profile", "off", "--out", str(out)]
    cmd = [sys.executable, str(Path(__file__).resolve()), "--as-lab", variant, "--", *argv]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    records = sorted(out.glob("*/steps.jsonl"))
    if done.returncode != 0 or not records:
        raise RuntimeError(f"lab run failed ({done.returncode}): {done.stderr[-400:]!r}")
    p99 = {}
    for line in records[-1].read_text().splitlines():
        step = flat(from_json(json.loads(line)))
        p99[round(step["rate_rps"])] = step["latency_ms"]["p99"]
    return p99


def oha_alone(rates: list[int], seconds: float, workdir: Path) -> dict[int, float]:
    """oha alone at each rate on a fresh server started as `lab run` starts it, after a
    discarded warm-up at the top rate as long as `lab run`'s."""
    layout = CpuLayout.split(pin=True)
    backend = NativeBackend(workdir, layout)
    try:
        upstream = backend.start_upstream(UpstreamSpec(delay_ms=DELAY_MS), procs.free_port())
        registry = load_registry(None)
        knobs = registry.knobs.updated({"concurrency": CONCURRENCY}, "--knob").resolve(500)
        model = registry.models[MODEL]
        server = backend.start_server(model, knobs, upstream.url, procs.free_port())
        figures = latency_fidelity.oha
        figures(server.url, Load("open", max(rates)), WARMUP_S, layout.client, workdir)
        return {
            r: figures(server.url, Load("open", r), seconds, layout.client, workdir).p99_ms
            for r in rates
        }
    finally:
        backend.close()


def measure(args: argparse.Namespace) -> None:
    rates = [int(r) for r in args.rates.split(",")]
    variants = ["oha alone", *args.variants.split(",")]
    for i in range(args.rounds):
        for tool in latency_fidelity.rotated(variants, args.first + i):
            load_before = os.getloadavg()[0]
            with tempfile.TemporaryDirectory() as tmp:
                if tool == "oha alone":
                    p99 = oha_alone(rates, args.seconds, Path(tmp))
                else:
                    p99 = lab_run(tool, rates, args.seconds, Path(tmp))
            row = {"round": args.first + i, "tool": tool, "p99_ms": p99}
            row |= {"load_before": load_before, "load_after": os.getloadavg()[0]}
            print(json.dumps(row), flush=True)
            if args.raw:
                with args.raw.open("a") as f:
                    f.write(json.dumps(row) + "\n")


# The variants that take out one thing oha alone does not have; the others move the lab's
# process onto the generator's core, or leave out the warm-up oha alone has too (order, not a
# factor): their ratios are kept, a share of the gap is not.
REMOVALS = ("no samplers", "no hlog", "upstream on server core")
HEADERS = [
    "step",
    "rate (req/s)",
    "rounds",
    "p99 ratio, median",
    "range",
    "share of the gap",
    "load average",
]


def table(raw: Path) -> list[list[str]]:
    """Each lab variant's p99 over oha alone's in the same round: the median, the range, and
    the share of `as is`'s gap its factor's removal closed."""
    rows = [json.loads(line) for line in raw.read_text().splitlines() if line.strip()]
    alone = {r["round"]: r["p99_ms"] for r in rows if r["tool"] == "oha alone"}
    ratios: dict[tuple[str, str], list[float]] = {}
    loads: dict[str, list[float]] = {}
    for r in rows:
        loads.setdefault(r["tool"], []).extend([r["load_before"], r["load_after"]])
        if r["tool"] == "oha alone" or r["round"] not in alone:
            continue
        for rate, p99 in r["p99_ms"].items():
            ratios.setdefault((r["tool"], rate), []).append(p99 / alone[r["round"]][rate])
    body = []
    for (tool, rate), got in ratios.items():
        median = statistics.median(got)
        base = statistics.median(ratios.get(("as is", rate), [1.0]))
        removal = tool in REMOVALS and base > 1
        share = f"{(base - median) / (base - 1):.0%}" if removal else ""
        load = f"{min(loads[tool]):.1f}-{max(loads[tool]):.1f}"
        ratio = f"{min(got):.2f}-{max(got):.2f}x"
        body.append([tool, rate, str(len(got)), f"{median:.2f}x", ratio, share, load])
    alone_p99 = {rate: [a[rate] for a in alone.values()] for rate in next(iter(alone.values()))}
    for rate, got in alone_p99.items():  # the reference's own p99s (ms), not a ratio
        load = f"{min(loads['oha alone']):.1f}-{max(loads['oha alone']):.1f}"
        spread = f"{min(got):.1f}-{max(got):.1f} ms"
        body.append(
            ["oha alone", rate, str(len(got)), f"{statistics.median(got):.1f} ms", spread, "", load]
        )
    order = ["oha alone", *VARIANTS]
    return sorted(body, key=lambda row: (int(row[1]), order.index(row[0])))


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--as-lab":
        as_lab(sys.argv[2], sys.argv[4:])
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--first", type=int, default=0, help="the first round's index (its order)")
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--rates", default="300,800")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--raw", type=Path, help="append each run's p99s here (one JSON a line)")
    p.add_argument("--table", type=Path, help="print the table of RAW's runs (no measuring)")
    p.add_argument("--summary", type=Path, help="with --table: also write it as a docs summary")
    args = p.parse_args()
    if args.table is None:
        measure(args)
        return
    started = time.time()
    body = table(args.table)
    print_table(f"{MODEL} /sleep?ms={DELAY_MS}: lab run --mode open over oha alone", HEADERS, body)
    if args.summary:
        runs = sum(1 for line in args.table.read_text().splitlines() if line.strip())
        kept = f"the script's printed table, from the {runs} runs its measuring mode kept in RAW"
        write_summary(args.summary, "open-loop-gap", HEADERS, body, kept, started)


if __name__ == "__main__":
    main()
