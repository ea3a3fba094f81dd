"""Exceptions for every problem the user can fix: the CLI prints them, never a traceback.

Exit codes (the table in docs/running.md, walked by tests/test_exit_codes.py), owned here: 1 when
a command ran but has no answer, 2 for bad input (click's convention for usage errors, and
LabError), 3 for a refusal caused by the machine's state rather than the arguments (`Refused`),
4 and 5 for `lab advise`'s two answers that are not "use this model", 6 and 7 for `lab compare`'s
findings (a point changed; the runs differ in scenario).
"""

EXIT_NO_ANSWER = 1  # lab run: no model ran; lab advise: no model meets the target
EXIT_USAGE = 2
EXIT_REFUSED = 3
EXIT_NOT_CONFIRMED = 4  # lab advise: none confirmed; the lab's own generators were the limit
EXIT_ONLY_PORT = 5  # lab advise: only models that need the app ported to async meet the target
EXIT_CHANGED = 6  # lab compare: a point changed beyond noise (throughput or p99)
EXIT_OTHER_SCENARIO = 7  # lab compare: the two runs measured different scenarios


class LabError(Exception):
    """A bad input or an unmet precondition, with a message that says what to fix."""

    exit_code = EXIT_USAGE


class Refused(LabError):
    """The input is fine but this machine refuses it now: a port in use, an open-file limit, a
    directory that cannot be written, a run another lab process is running. Retrying after
    fixing the machine works; changing the arguments is not required."""

    exit_code = EXIT_REFUSED
