"""Stopping a command cleanly: signals that stop it like Ctrl-C, the exit code a stop means
(128 + the signal's number, docs/failures-and-stops.md's table), and leftovers of dead runs."""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import click
from rich.markup import escape

from lab.cli.common.options import console
from lab.record.errors import EXIT_NO_ANSWER, LabError
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
        sys.exit(stopped_code(e))


def stopped_code(stop: KeyboardInterrupt) -> int:
    """128 + the number of the signal that stopped a command: the one a stop handler named
    (`stop_signals`), else SIGINT (Ctrl-C)."""
    name = str(stop)
    return 128 + (signal.Signals[name] if name in STOP_SIGNALS else signal.SIGINT)


def standalone(command: click.Command, argv: list[str] | None = None) -> None:
    """Run a command as a program (the `lab` script, or `python -m lab.cli.serve` in a
    container) with the table's exit codes: a LabError is one line and its own code, never a
    traceback; Ctrl-C, SIGTERM and SIGHUP stop any command as Ctrl-C does (its `finally` blocks
    stop what it started) and exit 128 + the signal, where click alone would exit 1."""
    try:
        with stop_signals():
            code = command.main(args=argv, standalone_mode=False)
    except LabError as e:
        console.print(f"[red]error:[/] {escape(str(e))}", highlight=False)
        sys.exit(e.exit_code)
    except click.UsageError as e:  # one line, as every other error: what is wrong, where to look
        where = f" (see `{e.ctx.command_path} --help`)" if e.ctx is not None else ""
        console.print(f"[red]error:[/] {escape(e.format_message())}{where}", highlight=False)
        sys.exit(e.exit_code)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except (click.Abort, KeyboardInterrupt) as e:
        stop = e if isinstance(e, KeyboardInterrupt) else e.__cause__
        if not isinstance(stop, KeyboardInterrupt):
            console.print("[red]aborted[/]")
            sys.exit(1)
        procs.stop_all()  # normally none: each command stops what it started
        console.print(f"[red]interrupted ({escape(str(stop)) or 'SIGINT'})[/]")
        sys.exit(stopped_code(stop))
    sys.exit(code if type(code) is int else 0)  # click.Exit (--help, --version) returns its code


def foreground(
    name: str,
    argv: list[str],
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    beside: Callable[[procs.Proc], None] | None = None,
) -> int:
    """argv as this command's child, in a process group of its own tied to this process, its
    output this command's own, until it exits (1: a server that exits by itself failed) or a stop
    signal (raised by `standalone`'s handlers, which are in place before the child starts, so a
    stop during its start-up is never lost). Whatever runs is stopped on the way out: TERM, then
    KILL after a grace period. `beside(proc)` starts what runs next to it (a meter)."""
    try:
        proc = procs.start(name, argv, log_path=None, env=env, cwd=cwd)
        if beside is not None:
            beside(proc)
        code = proc.popen.wait()
    finally:
        procs.stop_all()
    console.print(f"[red]{escape(name)} exited by itself with code {code}[/]")
    return EXIT_NO_ANSWER
