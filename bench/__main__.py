"""`python -m bench` (make bench). See bench/make_bench.py and docs/bench.md."""
import sys

from bench.make_bench import main

if __name__ == "__main__":          # required: the load generator uses the spawn start method
    sys.exit(main())
