"""What every Leveret program does first, the node and its workers alike: log to stderr with
who it is, raise its descriptor limit, make what it creates its user's only."""

from __future__ import annotations

import logging
import os
import sys


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


def private_umask() -> None:
    """Files and folders the broker creates are its user's only (0600 / 0700), whatever
    umask it was started with; its workers inherit it (docs/security.md)."""
    os.umask(0o077)
