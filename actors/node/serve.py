"""`leveret-server`: run one node in the foreground, logging to stderr; SIGTERM/SIGINT stop every
process it started."""

from __future__ import annotations

import argparse
import signal
import sys

from actors.config import Config, max_message_size_error
from actors.runtime.process_setup import private_umask, raise_fd_limit, setup_logging


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
    p.add_argument("--events-sync", help="before a publisher confirm leaves a process, its "
                   "events so far are: off (not waited for), write (written), fsync (on disk)")
    p.add_argument("--node-name", help="this node's name (default leveret@HOST:PORT)")
    p.add_argument("--cluster-nodes", metavar="H:P,H:P,...",
                   help="raft addresses of every cluster member (docs/cluster.md)")
    p.add_argument("--cluster-address", metavar="H:P",
                   help="this node's raft address, one of --cluster-nodes")
    p.add_argument("--handshake-timeout", type=float, metavar="SECONDS",
                   help="a client not past connection.open-ok this long after it connected "
                        "(TLS handshake included) is disconnected (default 10)")
    p.add_argument("--max-connections", type=_limit, metavar="N",
                   help="client connections this node holds; past it a connection is refused "
                        "at connection.open (default infinity)")
    p.add_argument("--management-port", type=int, metavar="PORT",
                   help="management HTTP API port (default 15672; 0 = none)")
    p.add_argument("--prometheus-port", type=int, metavar="PORT",
                   help="Prometheus metrics port (default 15692; 0 = none)")
    p.add_argument("--tls-port", type=int,
                   help="AMQPS port (RabbitMQ's is 5671; default 0: no TLS listener); needs "
                        "--ssl-certfile and --ssl-keyfile")
    p.add_argument("--ssl-certfile", metavar="PEM", help="the server's certificate (chain)")
    p.add_argument("--ssl-keyfile", metavar="PEM", help="its private key")
    p.add_argument("--ssl-cacertfile", metavar="PEM",
                   help="CA certificates client certificates are verified against")
    p.add_argument("--ssl-verify", choices=("verify_none", "verify_peer"),
                   help="verify_peer: ask clients for a certificate and verify it (default "
                        "verify_none)")
    p.add_argument("--ssl-fail-if-no-peer-cert", action="store_true", default=None,
                   help="with verify_peer: refuse a client that sends no certificate")
    p.add_argument("--ssl-versions", metavar="V,V",
                   help="TLS versions accepted: tlsv1.3,tlsv1.2 (default both; older refused)")
    p.add_argument("--consumer-timeout", type=int, metavar="MS",
                   help="ms a delivery may stay unacknowledged before its channel is closed "
                        "(default 1800000, RabbitMQ's; 0 = none)")
    p.add_argument("--consumer-timeout-action", choices=("close-channel", "cancel-consumer"),
                   help="what a consumer timeout does: close-channel (RabbitMQ 3.x, default: "
                        "406) or cancel-consumer (RabbitMQ 4.3: basic.cancel, deliveries "
                        "returned to the queue, the channel stays open)")
    p.add_argument("--cluster-secret-file", metavar="FILE",
                   help="the secret every cluster member shares (default "
                        "DATA_DIR/cluster_secret, created on first start; docs/security.md)")
    p.add_argument("--load-definitions", metavar="FILE",
                   help="a definitions JSON file (RabbitMQ's format) imported at boot")
    p.add_argument("--definitions-skip-if-unchanged", action="store_true", default=None,
                   help="skip --load-definitions when the file is unchanged since its last "
                        "import (its SHA-256)")
    args = p.parse_args(argv)
    cfg = Config()
    if args.config:
        cfg.update_from_toml(args.config)
    for name in ("host", "port", "data_dir", "conn_workers", "queue_workers", "log_level",
                 "events", "events_sync", "node_name", "cluster_address", "handshake_timeout",
                 "max_connections", "tls_port", "management_port", "prometheus_port", "ssl_certfile", "ssl_keyfile",
                 "ssl_cacertfile", "ssl_verify", "ssl_fail_if_no_peer_cert",
                 "cluster_secret_file", "max_message_size", "consumer_timeout",
                 "consumer_timeout_action",
                 "load_definitions", "definitions_skip_if_unchanged"):
        value = getattr(args, name)
        if value is not None:
            setattr(cfg, name, value)
    if args.ssl_versions is not None:
        cfg.ssl_versions = tuple(v.strip() for v in args.ssl_versions.split(",") if v.strip())
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
    errors = cfg.check()
    if errors:
        p.error("; ".join(errors))
    return cfg


def _limit(text: str) -> int | str:
    """--max-connections: a non-negative integer or "infinity" (RabbitMQ's connection_max)."""
    if text == "infinity":
        return text
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number or infinity: {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError("must be at least 0")
    return n


def main(argv=None) -> int:
    private_umask()
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
