"""`python -m bench` (make bench). See bench/cli.py and docs/bench.md."""
import sys

from bench.cli import main

if __name__ == "__main__":          # required: the load generator uses the spawn start method
    sys.exit(main())
