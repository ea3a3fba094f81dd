"""Exceptions for every problem the user can fix: the CLI prints them, never a traceback.

Exit codes are owned by `lab.record.exits` (the constants and docs/failures-and-stops.md's table,
walked by tests/test_exit_codes.py); the names here are theirs: 1 when a command ran but has no
answer (`NoAnswer`), 2 for bad input (click's convention for usage errors, and LabError), 3 for
a refusal caused by the machine's state rather than the arguments (`Refused`), 4 and 5 for
`lab advise`'s two answers that are not "use this model", 6 and 7 for `lab compare`'s findings
(a point changed; the runs differ in scenario).
"""

from lab.record import exits

EXIT_NO_ANSWER = exits.NO_ANSWER
EXIT_USAGE = exits.USAGE
EXIT_REFUSED = exits.REFUSED
EXIT_NOT_CONFIRMED = exits.NOT_CONFIRMED
EXIT_ONLY_PORT = exits.ONLY_PORT
EXIT_CHANGED = exits.CHANGED
EXIT_OTHER_SCENARIO = exits.OTHER_SCENARIO


class LabError(Exception):
    """A bad input or an unmet precondition, with a message that says what to fix."""

    exit_code = EXIT_USAGE


class Refused(LabError):
    """The input is fine but this machine refuses it now: a port in use, an open-file limit, a
    directory that cannot be written, a run another lab process is running. Retrying after
    fixing the machine works; changing the arguments is not required."""

    exit_code = EXIT_REFUSED


class NoAnswer(LabError):
    """The command ran but has no answer: nothing was measured, the user's app failed its
    check, or a process it serves exited by itself. What it found is kept (the run directory,
    the logs); running it again as it is would end the same way."""

    exit_code = EXIT_NO_ANSWER
