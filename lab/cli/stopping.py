"""Stopping a run cleanly: signals that stop it like Ctrl-C, and leftovers of dead runs."""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

from rich.markup import escape

from lab.cli.options import console
from lab.run import leftovers
from lab.system import procs


def clean_leftovers(out: Path) -> None:
    """Report and remove processes left behind by runs whose lab process died."""
    found = leftovers.find(out)
    if not found:
        return
    for item in found:
        console.print(f"[yellow]leftover from a dead run:[/] {escape(item.describe())}")
    leftovers.clean(found)
    alive = sum(item.alive for item in found)
    console.print(
        f"[yellow]stopped {alive} leftover process group(s), removed {len(found)} pid file(s)"
    )


STOP_SIGNALS = ("SIGTERM", "SIGHUP")


class stop_signals:  # noqa: N801 - used like a function: `with stop_signals():`
    """SIGTERM and SIGHUP stop a run like Ctrl-C: the sweep records, cleans up, exits non-zero.

    A lab started with `&` from a script inherits SIGINT ignored (POSIX shells do that to
    background jobs), so `kill -INT` would do nothing; Ctrl-C's handler is put back for the run.
    """

    SIGNALS = tuple(signal.Signals[name] for name in STOP_SIGNALS)  # exit 128 + its number

    def __enter__(self) -> None:
        self.previous = {sig: signal.signal(sig, self._raise) for sig in self.SIGNALS}
        if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
            self.previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.default_int_handler)

    def __exit__(self, *_: object) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)

    @staticmethod
    def _raise(signum: int, _: object) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)


@contextlib.contextmanager
def exit_when_stopped(run_dir: Path, command: str) -> Iterator[None]:
    """A run stopped by Ctrl-C or a stop signal: say what was kept and how `command --resume`
    continues it, and exit with 128 + the signal's number."""
    try:
        yield
    except KeyboardInterrupt as e:
        late = procs.stop_all()  # normally none: the sweep stopped everything already
        console.print(
            f"[red]interrupted ({escape(str(e)) or 'SIGINT'})[/]: stopped every process it started"
            f"{' (late: ' + ', '.join(late) + ')' if late else ''}; finished steps are kept in "
            f"{escape(str(run_dir))}; continue with: {command} --resume {escape(str(run_dir))}"
        )
        sys.exit(128 + (signal.Signals[str(e)] if str(e) in STOP_SIGNALS else signal.SIGINT))
