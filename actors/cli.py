"""`leveret-server`: run one node in the foreground, logging to stderr; SIGTERM/SIGINT stop every
process it started."""

from __future__ import annotations

import argparse
import logging
import signal
import sys

from actors.config import Config, max_message_size_error


def parse_args(argv=None) -> Config:
    p = argparse.ArgumentParser(prog="leveret-server", description=__doc__)
    p.add_argument("--config", metavar="FILE", help="TOML file (see deploy/leveret.toml)")
    p.add_argument("--host", help="listen address (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="AMQP port (default 5672)")
    p.add_argument("--data-dir", help="data directory (default ./var)")
    p.add_argument("--conn-workers", type=int,
                   help="connection-worker processes (default: one per CPU, at most 8)")
    p.add_argument("--queue-workers", type=int,
                   help="queue-worker processes (default: one per CPU, at most 8)")
    p.add_argument("--log-level", help="DEBUG, INFO, WARNING, ERROR")
    p.add_argument("--max-message-size", type=int, metavar="BYTES",
                   help="largest message body accepted (default 134217728, at most 536870912)")
    p.add_argument("--events", help="lifecycle event log: off, sampled:N or full")
    p.add_argument("--node-name", help="this node's name (default leveret@HOST:PORT)")
    p.add_argument("--cluster-nodes", metavar="H:P,H:P,...",
                   help="raft addresses of every cluster member (docs/cluster.md)")
    p.add_argument("--cluster-address", metavar="H:P",
                   help="this node's raft address, one of --cluster-nodes")
    args = p.parse_args(argv)
    cfg = Config()
    if args.config:
        cfg.update_from_toml(args.config)
    for name in ("host", "port", "data_dir", "conn_workers", "queue_workers", "log_level",
                 "events", "node_name", "cluster_address", "max_message_size"):
        value = getattr(args, name)
        if value is not None:
            setattr(cfg, name, value)
    for name in ("conn_workers", "queue_workers"):
        if getattr(cfg, name) < 1:
            p.error(f"{name.replace('_', '-')} must be at least 1")
    problem = max_message_size_error(cfg.max_message_size)
    if problem:
        p.error(problem)
    if args.cluster_nodes:
        cfg.cluster_nodes = tuple(n.strip() for n in args.cluster_nodes.split(",") if n.strip())
    if cfg.cluster_nodes and cfg.cluster_address not in cfg.cluster_nodes:
        p.error("--cluster-address must be one of --cluster-nodes")
    repeated = sorted({n for n in cfg.cluster_nodes if cfg.cluster_nodes.count(n) > 1})
    if repeated:  # two members on one raft address would never form a majority
        p.error(f"--cluster-nodes names {', '.join(repeated)} more than once")
    return cfg


def setup_logging(level: str, who: str) -> None:
    logging.basicConfig(
        stream=sys.stderr, level=getattr(logging, level.upper(), logging.INFO),
        format=f"%(asctime)s %(levelname)s [{who}] %(name)s: %(message)s")


def raise_fd_limit() -> None:
    """Soft RLIMIT_NOFILE up to the hard limit: every client socket is a descriptor (RabbitMQ's
    packages raise it the same way; systemd's LimitNOFILE sets the hard limit)."""
    try:
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError):
        pass


def main(argv=None) -> int:
    cfg = parse_args(argv)
    setup_logging(cfg.log_level, "node")
    raise_fd_limit()
    from actors.node.node import Node

    node = Node(cfg)
    signal.signal(signal.SIGTERM, node.request_stop)
    signal.signal(signal.SIGINT, node.request_stop)
    return node.run()


if __name__ == "__main__":
    sys.exit(main())
