"""The `lab` command: the group every command joins, and the console script's entry."""

from __future__ import annotations

import click

from lab.cli import generator as remote_generators
from lab.cli.common.stopping import standalone
from lab.cli.compare import compare_runs
from lab.cli.doctor import doctor
from lab.cli.measure.advise import advise
from lab.cli.measure.plan import plan_command
from lab.cli.measure.routes import routes
from lab.cli.measure.run import run
from lab.cli.models import list_models
from lab.cli.report import report
from lab.cli.reproduce import reproduce
from lab.cli.serve import serve
from lab.cli.ui import ui
from lab.cli.upstream import upstream


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="concurrency-lab")
def main() -> None:
    """concurrency-lab: which Python server concurrency model should serve an I/O-bound Flask app?

    Start with `lab run` (the quick scenario, about 5 minutes on 2 cores), then
    `lab report results/<run>`.
    """


main.add_command(run)
main.add_command(plan_command)
main.add_command(advise)
main.add_command(list_models)
main.add_command(doctor)
main.add_command(report)
main.add_command(compare_runs)
main.add_command(reproduce)
main.add_command(routes)
main.add_command(serve)
main.add_command(ui)
main.add_command(upstream)
main.add_command(remote_generators.generator)


def entry(argv: list[str] | None = None) -> None:
    """The console script; `argv` (default: sys.argv[1:]) lets tests call it in-process."""
    standalone(main, argv)
