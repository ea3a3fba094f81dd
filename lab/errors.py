"""One exception for every problem the user can fix: the CLI prints it, never a traceback."""


class LabError(Exception):
    """A bad input or an unmet precondition, with a message that says what to fix."""
