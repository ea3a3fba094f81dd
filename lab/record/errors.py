"""Exceptions for every problem the user can fix: the CLI prints them, never a traceback.

Exit codes (the table in docs/running.md): 2 for bad input (click's convention for usage errors, and
LabError), 3 for a refusal caused by the machine's state rather than the arguments (`Refused`).
"""

EXIT_USAGE = 2
EXIT_REFUSED = 3


class LabError(Exception):
    """A bad input or an unmet precondition, with a message that says what to fix."""

    exit_code = EXIT_USAGE


class Refused(LabError):
    """The input is fine but this machine refuses it now: a port in use, an open-file limit, a
    directory that cannot be written, a run another lab process is running. Retrying after
    fixing the machine works; changing the arguments is not required."""

    exit_code = EXIT_REFUSED
