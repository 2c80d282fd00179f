"""Node configuration: embedded defaults, then a TOML file (`--config FILE`), then the command
line. Every setting has a default, so `leveret-server` runs with no file at all."""

from __future__ import annotations

import dataclasses
import json
import os
import tomllib

from protocol.constants import MAX_MSG_SIZE  # max_message_size may not go above it

MAX_DEFAULT_WORKERS = 8  # the CPU-sized default stops here; --*-workers go beyond


def max_message_size_error(value) -> str | None:
    """Why a max_message_size is refused (rabbit.schema's validator: "Max message size should
    be between 0 and 512MB"), or None when it is valid."""
    if type(value) is not int or not 0 < value <= MAX_MSG_SIZE:
        return (f"max_message_size = {value!r}: Max message size should be between 0 and "
                f"512MB (1..{MAX_MSG_SIZE} bytes)")
    return None


def cpu_workers() -> int:
    """Default worker processes of each kind: one per CPU this process may run on, so that a
    publisher and its consumer (handed to different connection workers) and queues (spread
    over queue workers) do not share one GIL."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, MAX_DEFAULT_WORKERS))


@dataclasses.dataclass
class Config:
    host: str = "127.0.0.1"  # listen address
    port: int = 5672  # AMQP port
    data_dir: str = "./var"  # definitions, message store, logs
    conn_workers: int = dataclasses.field(default_factory=cpu_workers)  # connection workers
    queue_workers: int = dataclasses.field(default_factory=cpu_workers)  # queue workers
    heartbeat: int = 60  # seconds proposed in connection.tune
    frame_max: int = 131072  # bytes proposed in connection.tune
    channel_max: int = 2047  # proposed in connection.tune
    # largest message body accepted (RabbitMQ 3.10's default, 128 MiB; at most 512 MiB)
    max_message_size: int = 134217728
    max_restarts: int = 5  # per worker slot within restart_period, then the node stops
    restart_period: float = 10.0  # seconds
    loopback_users: tuple = ("guest",)  # users allowed to log in only from loopback
    credit_initial: int = 400  # credit_flow: messages a channel may send a queue unasked
    credit_more: int = 200  # credit_flow: the queue bumps credit after this many
    queue_backlog_bytes: int = 32 * 1024 * 1024  # a queue withholds publisher credit past this
    storage_map_size: int = 64 * 1024 ** 3  # LMDB map of <data_dir>/messages: the disk it may use
    segment_entries: int = 16384  # queue index: entries per segment
    max_journal_entries: int = 32768  # queue index: fold the journal into segments at this size
    embed_msgs_below: int = 4096  # bodies shorter than this live in the queue index
    sync_interval_ms: int = 200  # group commit: sync at the latest this long after a write
    queue_page_bytes: int = 16 * 1024 * 1024  # durable queue: ready bytes in memory, then page
    queue_page_size: int = 2048  # messages read back from the index at a time
    events: str = "off"  # lifecycle event log: off | sampled:N | full (docs/events.md)
    events_max_bytes: int = 64 * 1024 * 1024  # event files rotate at this size
    node_name: str = ""  # this node's name in events and clusters; "" = leveret@HOST:PORT
    cluster_nodes: tuple = ()  # raft addresses HOST:PORT of every cluster member; () = alone
    cluster_address: str = ""  # this node's raft address, one of cluster_nodes
    boot_timeout: int = 300  # seconds for workers to start and durable queues to recover
    log_level: str = "INFO"

    @property
    def clustered(self) -> bool:
        return bool(self.cluster_nodes)

    @property
    def node(self) -> str:
        return self.node_name or f"leveret@{self.host}:{self.port}"

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "Config":
        d = json.loads(text)
        d["loopback_users"] = tuple(d.get("loopback_users", ()))
        d["cluster_nodes"] = tuple(d.get("cluster_nodes", ()))
        return cls(**d)

    def update_from_toml(self, path: str) -> None:
        """Sections are folded: [node] port = 5673 and a top-level port = 5673 mean the same."""
        with open(path, "rb") as f:
            raw = tomllib.load(f)
        flat: dict = {}
        for key, value in raw.items():
            if isinstance(value, dict):
                flat.update(value)
            else:
                flat[key] = value
        names = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(flat) - names)
        if unknown:
            raise SystemExit(f"leveret-server: unknown settings in {path}: {', '.join(unknown)}")
        for key, value in flat.items():
            setattr(self, key, tuple(value) if isinstance(value, list) else value)
