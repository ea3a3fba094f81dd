"""oha's records of one share, as bytes that cross from a remote `lab generator` to the step's
master: each process's rows as arrays (numpy's own file format, no pickle) and what it only
counted as JSON beside them.

Why the rows and not a summary: the master places every request by its own times into the
step's histograms and per-second series exactly as it does a local process's rows
(`loadgen.oha.figures`), so a remote share is merged by the same code as a local one, never by
percentiles of percentiles.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from dataclasses import fields, replace

import numpy as np

from loadgen.oha.figures import OhaRun

ARRAYS = ("intended", "sent", "end", "status", "size")


def encode(runs: Sequence[OhaRun]) -> bytes:
    """The runs as one .npz: arrays named `K-FIELD`, the rest as JSON under `meta`."""
    arrays: dict[str, np.ndarray] = {}
    meta = []
    for k, run in enumerate(runs):
        for name in ARRAYS:
            arrays[f"{k}-{name}"] = np.asarray(getattr(run, name), dtype=float)
        meta.append({f.name: getattr(run, f.name) for f in fields(run) if f.name not in ARRAYS})
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    out = io.BytesIO()
    np.savez(out, **arrays)  # type: ignore[arg-type]  # numpy's stubs: any name -> array
    return out.getvalue()


def decode(blob: bytes, source: str) -> list[OhaRun]:
    """The runs `encode` wrote, named after `source` (the remote generator, `remote-i@host` as
    the lab's master names its workers: one oha process each, a second one `#2`)."""
    with np.load(io.BytesIO(blob), allow_pickle=False) as data:
        meta = json.loads(bytes(data["meta"]).decode())
        runs = []
        for k, m in enumerate(meta):
            rows = {name: data[f"{k}-{name}"] for name in ARRAYS}
            run = OhaRun(**rows, **{**m, "cpus": tuple(m.get("cpus") or ())})
            runs.append(replace(run, source=source if k == 0 else f"{source}#{k + 1}"))
    return runs
