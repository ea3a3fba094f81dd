"""The load-generator process: `python -m loadgen START_JSON` runs one step and reports on stdout.

It runs in a process of its own because locust monkey-patches the importing process with gevent,
and because the lab measures this process's CPU to tell when the generator, not the server, was
the limit. Every line it prints is a message of `loadgen.protocol`.
"""

from gevent import monkey

monkey.patch_all()  # before anything imports socket; locust would do this on import anyway

import logging  # noqa: E402
import sys  # noqa: E402

from loadgen.protocol import Failed, Start  # noqa: E402
from loadgen.recording import emit  # noqa: E402


def main() -> int:
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    try:
        start = Start.from_json(sys.argv[1])
    except (IndexError, ValueError, TypeError) as exc:
        emit(Failed(f"bad start message: {exc}"))
        return 2
    if start.distributed:
        from loadgen.master import MissingGenerators, run_distributed
        from loadgen.open_fleet import run_open_distributed

        try:
            emit(run_open_distributed(start) if start.mode == "open" else run_distributed(start))
        except (MissingGenerators, ValueError) as exc:  # ValueError: a cap too small to share
            emit(Failed(str(exc)))
            return 1
    elif start.mode == "open":
        from loadgen.open_loop import run_open

        emit(run_open(start))
    else:
        from loadgen.closed_loop import run_closed

        emit(run_closed(start))
    return 0


if __name__ == "__main__":
    sys.exit(main())
