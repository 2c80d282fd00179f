"""`python -m bench.compare` (make bench-compare): install Debian's rabbitmq-server if missing,
run it on spare loopback ports for the duration (bench/refbroker.py), and run the benchmark
(bench/make_bench.py) against Leveret with --compare-url pointing at it.  Arguments are passed to
`python -m bench` (e.g. BENCH_ARGS="--seconds 5 --scenarios a,c")."""
from __future__ import annotations

import sys

from bench.refbroker import RabbitMQNode, RefBrokerError, ensure_rabbitmq_installed


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a == "--compare-url" or a.startswith("--compare-url=") for a in argv):
        log("bench.compare starts its own RabbitMQ; use `python -m bench --compare-url ...` "
            "to compare with another broker")
        return 2
    if any(a in ("-h", "--help", "--list") for a in argv):
        from bench.make_bench import main as bench_main
        return bench_main(argv)
    try:
        ensure_rabbitmq_installed(log)
    except RefBrokerError as e:
        log(f"error: {e}")
        return 2
    from bench.make_bench import main as bench_main
    try:
        with RabbitMQNode(log=log) as rmq:
            version = rmq.version() or "RabbitMQ"
            log(f"reference broker: {version} at {rmq.url} (pids {rmq.pids})")
            return bench_main(argv + ["--compare-url", rmq.url, "--compare-label", version,
                                      "--compare-pid", str(rmq.proc.pid)])
    except RefBrokerError as e:
        log(f"error: could not run the reference RabbitMQ: {e}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
