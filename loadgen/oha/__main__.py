"""`python -m loadgen.oha START_JSON`: one step on oha (`loadgen.oha.driver`);
`python -m loadgen.oha --share OUT START_JSON`: a remote generator's share of one.

A step with remote generators is also their locust master (`loadgen.oha.remote`), which runs on
gevent: its sockets and sleeps are patched first, before anything imports them, as locust's own
processes are; a step without runs unpatched, as it always has.
"""

import json
import sys


def _remote(args: list[str]) -> bool:
    try:
        return len(args) == 2 and bool(json.loads(args[1]).get("remote_generators"))
    except (ValueError, AttributeError):
        return False  # the driver says what is wrong with it


if __name__ == "__main__":
    if _remote(sys.argv):
        from gevent import monkey

        monkey.patch_all()
    from loadgen.oha.driver import main

    sys.exit(main(sys.argv))
