"""Node configuration: embedded defaults, then a TOML file (`--config FILE`), then the command
line. Every setting has a default, so `leveret-server` runs with no file at all."""

from __future__ import annotations

import dataclasses
import json
import os
import tomllib

from protocol.constants import MAX_MSG_SIZE  # max_message_size may not go above it

MAX_DEFAULT_WORKERS = 8  # the CPU-sized default stops here; --*-workers go beyond
TLS_VERSIONS = ("tlsv1.2", "tlsv1.3")  # ssl_versions values (RabbitMQ's ssl_options.versions)
OLD_TLS_VERSIONS = ("sslv3", "tlsv1", "tlsv1.1")  # known, and refused
CONSUMER_TIMEOUT_ACTIONS = ("close-channel", "cancel-consumer")  # consumer_timeout_action values
EVENTS_SYNC_MODES = ("off", "write", "fsync")  # events_sync values (actors/events.py)


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
    # (not a setting: no annotation) the TOML files read, absolute (update_from_toml; the
    # management API's config_files)
    config_files = ()
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
    # per worker slot within restart_period, then the node stops; and per queue (or mirror)
    # of a queue worker, then its QueueHost gives up on it (the queue is marked crashed)
    max_restarts: int = 5
    restart_period: float = 10.0  # seconds
    loopback_users: tuple = ("guest",)  # users allowed to log in only from loopback
    credit_initial: int = 400  # credit_flow: messages a channel may send a queue unasked
    credit_more: int = 200  # credit_flow: the queue bumps credit after this many
    credit_initial_bytes: int = 4 * 1024 * 1024  # credit_flow: body bytes sent a queue unasked
    credit_more_bytes: int = 2 * 1024 * 1024  # credit_flow: or bumped after this many bytes
    # a queue withholds publisher credit while more ready bytes than this wait (0 = never: queues
    # page to disk past queue_page_bytes and the memory alarm blocks publishers)
    queue_backlog_bytes: int = 0
    vm_memory_high_watermark: float = 0.4  # memory alarm above this fraction of RAM...
    vm_memory_high_watermark_absolute: object = 0  # ...or above this many bytes ("2GB"), if set
    disk_free_limit: object = "50MB"  # disk alarm below this much free space in data_dir's fs...
    disk_free_limit_relative: float = 0.0  # ...or below this multiple of RAM, if set
    storage_map_size: int = 64 * 1024 ** 3  # LMDB map of <data_dir>/messages: the disk it may use
    segment_entries: int = 16384  # queue index: entries per segment
    max_journal_entries: int = 32768  # queue index: fold the journal into segments at this size
    embed_msgs_below: int = 4096  # bodies shorter than this live in the queue index
    sync_interval_ms: int = 200  # group commit: sync at the latest this long after a write
    queue_page_bytes: int = 16 * 1024 * 1024  # a queue's ready bytes in memory, then it pages
    queue_page_size: int = 2048  # messages read back from the index at a time
    events: str = "off"  # lifecycle event log: off | sampled:N | full (docs/events.md)
    events_max_bytes: int = 64 * 1024 * 1024  # event files rotate at this size
    events_max_buffered: int = 250_000  # events held between writes; more are dropped, counted
    # before a publisher confirm leaves a process, the events it wrote so far are: not waited
    # for (off), written to the file (write), or written and fsync'd (fsync) (docs/events.md)
    events_sync: str = "off"
    node_name: str = ""  # this node's name in events and clusters; "" = leveret@HOST:PORT
    cluster_nodes: tuple = ()  # raft addresses HOST:PORT of every cluster member; () = alone
    cluster_address: str = ""  # this node's raft address, one of cluster_nodes
    cluster_secret_file: str = ""  # the secret cluster members share; "" = <data_dir>/cluster_secret
    cluster_secret: str = ""  # the secret itself instead of a file ("" = use the file)
    boot_timeout: int = 300  # seconds for workers to start and durable queues to recover
    log_level: str = "INFO"
    # S5: ms a delivery may stay unacknowledged before its channel is closed (406) and its
    # deliveries requeued; RabbitMQ's default (30 min); 0 = no timeout (x-consumer-timeout and
    # the consumer-timeout policy key still apply to their queues)
    consumer_timeout: int = 1800000
    # what the timeout does: "close-channel" (RabbitMQ 3.x, the default: 406, the channel's
    # deliveries requeued) or "cancel-consumer" (RabbitMQ 4.3: basic.cancel to a client that
    # announced consumer_cancel_notify, that consumer's deliveries returned to the queue, the
    # channel stays open; basic.get deliveries and other clients still close the channel)
    consumer_timeout_action: str = "close-channel"
    # --- definitions (RabbitMQ's load_definitions; docs/definitions.md) ---
    load_definitions: str = ""  # a definitions JSON file imported at boot; "" = none
    definitions_skip_if_unchanged: bool = False  # skip it when its SHA-256 is the last imported
    # --- what a client may do before it has logged in (docs/security.md) ---
    handshake_timeout: float = 10.0  # seconds from accept to connection.open-ok (TLS included)
    max_connections: int | str = "infinity"  # per node (RabbitMQ's connection_max), or "infinity"
    # --- AMQPS: AMQP over TLS (RabbitMQ's listeners.ssl and ssl_options) ---
    tls_port: int = 0  # AMQPS port (RabbitMQ's is 5671); 0 = no TLS listener
    # --- the management HTTP API (RabbitMQ's rabbitmq_management; docs/management.md) ---
    management_port: int = 15672  # 0 = no management listener
    management_host: str = ""  # "" = the AMQP listener's host
    prometheus_port: int = 15692  # Prometheus metrics (rabbitmq_prometheus); 0 = none
    prometheus_host: str = ""  # "" = the AMQP listener's host
    collect_statistics_interval: int = 5000  # ms between a queue's statistics samples
    ssl_certfile: str = ""  # the server's certificate (PEM), chain after it
    ssl_keyfile: str = ""  # its private key (PEM)
    ssl_cacertfile: str = ""  # CA certificates client certificates are verified against (PEM)
    ssl_verify: str = "verify_none"  # verify_peer: ask for a client certificate and verify it
    ssl_fail_if_no_peer_cert: bool = False  # verify_peer: refuse a client without a certificate
    ssl_versions: tuple = ("tlsv1.3", "tlsv1.2")  # TLS versions accepted (1.2 and newer only)

    @property
    def connection_limit(self) -> int | None:
        """max_connections as a number, None for "infinity" (no limit)."""
        return None if self.max_connections == "infinity" else int(self.max_connections)

    def check(self) -> list[str]:
        """What is wrong with the settings that need no file to check, as clear sentences
        (certificate and key files are read by actors/connection/tls.py)."""
        errors = []
        mc = self.max_connections
        if mc != "infinity" and (isinstance(mc, bool) or not isinstance(mc, int) or mc < 0):
            errors.append(f"max_connections must be a non-negative integer or \"infinity\", "
                          f"not {mc!r}")
        if not (isinstance(self.handshake_timeout, (int, float)) and
                not isinstance(self.handshake_timeout, bool) and self.handshake_timeout > 0):
            errors.append(f"handshake_timeout must be a positive number of seconds, not "
                          f"{self.handshake_timeout!r}")
        ct = self.consumer_timeout
        if isinstance(ct, bool) or not isinstance(ct, int) or ct < 0:
            errors.append(f"consumer_timeout must be a non-negative integer of milliseconds "
                          f"(0 = no timeout), not {ct!r}")
        if self.events_sync not in EVENTS_SYNC_MODES:
            errors.append(f"events_sync must be one of {', '.join(EVENTS_SYNC_MODES)}, not "
                          f"{self.events_sync!r}")
        if self.consumer_timeout_action not in CONSUMER_TIMEOUT_ACTIONS:
            errors.append(f"consumer_timeout_action must be one of "
                          f"{', '.join(CONSUMER_TIMEOUT_ACTIONS)}, not "
                          f"{self.consumer_timeout_action!r}")
        if not (isinstance(self.management_port, int) and 0 <= self.management_port <= 65535):
            errors.append(f"management_port must be a port number (0 = no management "
                          f"listener), not {self.management_port!r}")
        elif self.management_port and self.management_port in (self.port, self.tls_port):
            errors.append(f"management_port {self.management_port} is also an AMQP port")
        if not (isinstance(self.prometheus_port, int) and 0 <= self.prometheus_port <= 65535):
            errors.append(f"prometheus_port must be a port number (0 = no metrics listener), "
                          f"not {self.prometheus_port!r}")
        elif self.prometheus_port and self.prometheus_port in (
                self.port, self.tls_port, self.management_port):
            errors.append(f"prometheus_port {self.prometheus_port} is also another listener's")
        if not 0 <= self.tls_port <= 65535:
            errors.append(f"tls_port must be a port number (0 = no TLS listener), not "
                          f"{self.tls_port}")
        elif self.tls_port and self.tls_port == self.port:
            errors.append(f"tls_port and port are both {self.port}")
        if self.ssl_verify not in ("verify_none", "verify_peer"):
            errors.append(f"ssl_verify must be verify_peer or verify_none, not "
                          f"{self.ssl_verify!r}")
        if self.ssl_fail_if_no_peer_cert not in (True, False):
            errors.append("ssl_fail_if_no_peer_cert must be true or false")
        elif self.ssl_fail_if_no_peer_cert and self.ssl_verify != "verify_peer":
            errors.append("ssl_fail_if_no_peer_cert = true needs ssl_verify = verify_peer")
        if isinstance(self.ssl_versions, str):
            errors.append("ssl_versions must be a list, e.g. [\"tlsv1.3\", \"tlsv1.2\"]")
        else:
            old = [v for v in self.ssl_versions if v in OLD_TLS_VERSIONS]
            unknown = [v for v in self.ssl_versions
                       if v not in TLS_VERSIONS and v not in OLD_TLS_VERSIONS]
            if old:
                errors.append(f"ssl_versions: {', '.join(old)} refused: only TLS 1.2 and "
                              "newer are supported (tlsv1.2, tlsv1.3)")
            if unknown:
                errors.append(f"ssl_versions: unknown version {', '.join(map(repr, unknown))} "
                              "(tlsv1.2, tlsv1.3)")
            if not self.ssl_versions:
                errors.append("ssl_versions is empty")
        if self.tls_port:
            if not self.ssl_certfile or not self.ssl_keyfile:
                errors.append("tls_port needs ssl_certfile and ssl_keyfile")
            if self.ssl_verify == "verify_peer" and not self.ssl_cacertfile:
                errors.append("ssl_verify = verify_peer needs ssl_cacertfile (the CA client "
                              "certificates are verified against)")
        return errors

    @property
    def clustered(self) -> bool:
        return bool(self.cluster_nodes)

    @property
    def node(self) -> str:
        return self.node_name or f"leveret@{self.host}:{self.port}"

    def to_json(self) -> str:
        """For a worker's command line, which every user may read (ps): without the cluster
        secret (the node hands it over through a pipe: actors/secure.py)."""
        return json.dumps(dict(dataclasses.asdict(self), cluster_secret=""))

    @classmethod
    def from_json(cls, text: str) -> "Config":
        d = json.loads(text)
        d["loopback_users"] = tuple(d.get("loopback_users", ()))
        d["cluster_nodes"] = tuple(d.get("cluster_nodes", ()))
        if "ssl_versions" in d:
            d["ssl_versions"] = tuple(d["ssl_versions"])
        return cls(**d)

    def update_from_toml(self, path: str) -> None:
        """Sections are folded: [node] port = 5673 and a top-level port = 5673 mean the same."""
        with open(path, "rb") as f:
            raw = tomllib.load(f)
        self.config_files = (*self.config_files, os.path.abspath(path))
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
