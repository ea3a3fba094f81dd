"""`python -m loadgen.oha START_JSON`: one step on oha (`loadgen.oha.driver`)."""

import sys

from loadgen.oha.driver import main

if __name__ == "__main__":
    sys.exit(main(sys.argv))
