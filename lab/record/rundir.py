"""The run directory: the one owner of what a run writes and reads, so nothing finished is lost.

Layout of `results/<run-id>/`:

- `manifest.json`     environment, scenario, models with exact command lines (atomic writes)
- `preflight.jsonl`   one object per model and trial: verification and concurrency probe
- `steps.jsonl`       one step record per line, appended and fsynced as each step ends
- `measurements.jsonl` a reproduction's own rows (experiments)
- `histograms/<model>/<mode>-<point>-t<trial>.hlog`  per-second latency histograms (µs)
- `logs/`, `pids/`    each process's output; pid files for finding leftovers after a kill -9

Sweeps, experiments, `lab report`, `lab compare` and the pandas loader all go through `RunDir`.
A crash mid-write can leave a truncated last line in a `.jsonl`, and a disk or a hand can damage
any line of `steps.jsonl`: reading skips such lines but names them (`unreadable`), and `repair`
(run before a resume appends) moves them aside, so every readable record stays and the steps they
held are measured again. A steps file with no readable line at all is refused: it is not ours.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lab.record import hist
from lab.record.errors import LabError
from lab.record.flags import outside, owed
from lab.record.step import StepKey, StepRecord
from lab.record.stepjson import from_json

MAX_TRIALS = 1000  # a manifest planning more is not one the lab wrote: no plan is read from it


class DamagedRun(LabError):
    """A file of a run directory that cannot be read; the message names it and the problem."""


@dataclass(frozen=True)
class RunDir:
    path: Path

    @classmethod
    def create(cls, out: Path, name: str) -> RunDir:
        """A new, empty run directory under `out` named by the time and `name`."""
        if not str(out).strip():
            raise LabError("--out is empty: give the directory that receives run directories")
        stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
        path, suffix = out / f"{stamp}-{name}", 1
        while path.exists():
            suffix += 1
            path = out / f"{stamp}-{name}-{suffix}"
        try:
            path.mkdir(parents=True)
        except OSError as exc:
            raise LabError(f"cannot create a run directory in {out}: {exc.strerror}") from None
        return cls(path)

    @classmethod
    def existing(cls, path: Path) -> RunDir:
        """A run directory written before; refuses anything that is not one, saying why."""
        if not path.is_dir():
            raise DamagedRun(f"{path}: no such run directory")
        run = cls(path)
        run.manifest()  # a run directory starts with a readable manifest
        return run

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def steps_path(self) -> Path:
        return self.path / "steps.jsonl"

    @property
    def logs(self) -> Path:
        return self.path / "logs"

    @property
    def pids(self) -> Path:
        return self.path / "pids"

    # -- manifest ---------------------------------------------------------------------------

    def manifest(self) -> dict[str, Any]:
        path = self.path / "manifest.json"
        if not path.exists():
            raise DamagedRun(f"{self.path} is not a run directory (it has no manifest.json)")
        try:
            data = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise DamagedRun(f"{path}: unreadable manifest ({exc})") from None
        if not isinstance(data, dict) or not data:
            raise DamagedRun(
                f"{path}: not a run directory's manifest (expected an object with run_id)"
            )
        if not isinstance(data.get("run_id"), str):
            raise DamagedRun(f"{path}: not a run directory's manifest (no run_id)")
        return data

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        write_json(self.path / "manifest.json", manifest)

    # -- steps ------------------------------------------------------------------------------

    def append_step(self, record: StepRecord) -> None:
        append_jsonl(self.steps_path, record.to_json())

    def steps(self) -> list[StepRecord]:
        """Every readable step record (the unreadable lines: `unreadable`); a file with lines
        but no readable step is refused, naming its first damaged lines."""
        records, bad = self._read_steps()
        if bad and not records:
            named = "; ".join(f"line {n}: {why}" for n, why in bad[:3])
            raise DamagedRun(f"{self.steps_path}: no readable step ({named})")
        return records

    def _read_steps(self) -> tuple[list[StepRecord], list[tuple[int, str]]]:
        """(readable records, [(line number, why)] of every line that is not one)."""
        records: list[StepRecord] = []
        bad: list[tuple[int, str]] = []
        for number, row in _rows(self.steps_path, bad):
            try:
                records.append(from_json(row))
            except LabError as exc:
                bad.append((number, str(exc)))
        return records, sorted(bad)

    def completed(self) -> set[StepKey]:
        """Steps already recorded; an owed one (interrupted, or its load generator gave no
        result) is measured again on resume."""
        return {r.key for r in self.steps() if not owed(r.evidence.flags)}

    def standing(self) -> list[StepRecord]:
        """The records that stand (`standing`): what every reader of the run's figures reads."""
        return standing(self.steps())

    def planned(self) -> list[StepKey]:
        """The steps this run's manifest plans (see `planned_steps`)."""
        return planned_steps(self.manifest())

    def missing(self) -> list[StepKey]:
        """Planned steps without a complete record (an owed one counts as missing)."""
        done = self.completed()
        return [key for key in self.planned() if key not in done]

    def unreadable(self) -> list[str]:
        """Every record line that could not be read, in words, and the lines a resume moved
        aside (their steps were measured again)."""
        found = [f"steps.jsonl: line {n}: {why}; not read" for n, why in self._read_steps()[1]]
        for path in sorted(self.path.glob("*.jsonl")):
            if path != self.steps_path and _truncated(path):
                found.append(f"{path.name}: line {max(_truncated(path))} is truncated; not read")
        for path in sorted(self.path.glob("*.jsonl.fragment")):
            lines = len(path.read_bytes().splitlines())
            found.append(f"{path.name}: {lines} unreadable line(s) a resume moved aside")
        return found

    def repair(self) -> str | None:
        """Move every unreadable line of `steps.jsonl`, and a truncated last line of the other
        `.jsonl` files, aside to `*.fragment`; return a warning if any was."""
        bad = {n for n, _ in self._read_steps()[1]}
        moved = [
            p.name
            for p in sorted(self.path.glob("*.jsonl"))
            if _move_aside(p, bad if p == self.steps_path else _truncated(p))
        ]
        if not moved:
            return None
        return (
            f"{', '.join(moved)}: truncated or unreadable line(s) (the lab was killed while "
            "writing, or the file was damaged); kept every readable record and moved the rest to "
            "*.fragment"
        )

    # -- other records ----------------------------------------------------------------------

    def append(self, name: str, obj: dict[str, Any]) -> None:
        """Append one JSON object to `name` (e.g. preflight.jsonl, measurements.jsonl)."""
        append_jsonl(self.path / name, json.dumps(obj, sort_keys=True, default=str))

    def rows(self, name: str) -> list[dict[str, Any]]:
        """The JSON objects of `name`; anything but an object is refused with its line."""
        out = []
        for number, row in _rows(self.path / name):
            if not isinstance(row, dict):
                raise DamagedRun(f"{self.path / name}: line {number} is not a JSON object")
            out.append(row)
        return out

    # -- histograms -------------------------------------------------------------------------

    @staticmethod
    def hlog_relpath(key: StepKey) -> str:
        point = f"r{key.rate_rps:g}" if key.rate_rps is not None else f"c{key.users}"
        return f"histograms/{key.model}/{key.mode}-{point}-t{key.trial}.hlog"

    def hlog_writer(self, key: StepKey) -> hist.HlogWriter:
        return hist.HlogWriter(self.path / self.hlog_relpath(key))


def planned_steps(manifest: dict[str, Any]) -> list[StepKey]:
    """The steps a manifest plans: each model x point x trial ([] when it says nothing usable,
    e.g. a reproduction's manifest)."""
    scenario, models = manifest.get("scenario"), manifest.get("models")
    if not isinstance(scenario, dict) or not isinstance(models, dict):
        return []
    mode, trials = scenario.get("mode"), scenario.get("trials")
    axis = scenario.get("rates" if mode == "open" else "levels")
    if mode not in ("closed", "open") or not isinstance(trials, int) or trials > MAX_TRIALS:
        return []
    if not isinstance(axis, list) or not all(isinstance(x, int | float) for x in axis):
        return []
    points = [(None, float(x)) if mode == "open" else (int(x), None) for x in axis]
    return [
        StepKey(model, mode, users, rate, trial)
        for trial in range(1, trials + 1)
        for model in models
        for users, rate in points
    ]


def _rows(path: Path, bad: list[tuple[int, str]] | None = None) -> Iterator[tuple[int, Any]]:
    """(line number, parsed JSON) of each complete line. A truncated last line is skipped; any
    other line that is not JSON is refused, or, given `bad`, listed there and skipped."""
    if not path.exists():
        return
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise DamagedRun(f"{path}: unreadable ({exc})") from None
    lines = text.split("\n")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError:
            last = number == len(lines) and not text.endswith("\n")
            if bad is not None:
                bad.append((number, "truncated" if last else "not JSON"))
            elif not last:  # a crash mid-write leaves a fragment: every line before is complete
                raise DamagedRun(f"{path}: line {number} is not JSON") from None


def _truncated(path: Path) -> set[int]:
    """The number of the last line when the file does not end with a newline."""
    data = path.read_bytes()
    return {data.count(b"\n") + 1} if data and not data.endswith(b"\n") else set()


def _move_aside(path: Path, numbers: set[int]) -> bool:
    """Move the lines `numbers` of `path` to `<path>.fragment`, keeping the rest in order."""
    if not numbers:
        return False
    lines = path.read_bytes().decode(errors="replace").split("\n")
    keep = [line for n, line in enumerate(lines, 1) if n not in numbers and line.strip()]
    aside = [lines[n - 1] for n in sorted(numbers) if n <= len(lines)]
    with open(path.with_name(path.name + ".fragment"), "a") as f:
        f.write("".join(line + "\n" for line in aside))
    write_atomic(path, "".join(line + "\n" for line in keep))
    return True


def append_jsonl(path: Path, line: str) -> None:
    """Append one JSON line and fsync, so a crash right after loses nothing already written."""
    with open(path, "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def write_atomic(path: Path, text: str) -> None:
    """Write a whole file atomically: temp file in the same directory, fsync, rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, obj: Any) -> None:
    write_atomic(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def standing(records: list[StepRecord]) -> list[StepRecord]:
    """The records that stand, in their order: a step the lab failed to measure (owed:
    interrupted, or its generator gave no result) or kept from a result (`Flag.outside`: the
    apparatus, the machine) is superseded by a later record of the same step, or by one that is
    neither (`lab run --resume` and `lab.run.remeasure` measure such steps again; the superseded
    record stays in steps.jsonl with its evidence). So a step measured again is never a second
    trial, and never both."""
    again = [owed(r.evidence.flags) or bool(outside(r.evidence.flags)) for r in records]
    last = {r.key: i for i, r in enumerate(records)}
    settled = {r.key for r, a in zip(records, again, strict=True) if not a}
    return [
        r
        for i, (r, a) in enumerate(zip(records, again, strict=True))
        if not a or (last[r.key] == i and r.key not in settled)
    ]
