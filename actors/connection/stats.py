"""What a connection worker tells the node about its connections, channels and consumers, for
the management API (/api/connections, /api/channels, /api/consumers): a sample every
`collect_statistics_interval`, sent only when it changed, as RabbitMQ's connection and channel
processes emit stats events.

Read off the Reader and Channel actors from the sampling thread: each field is a plain
attribute read (set by its actor; a sample may be one turn old, as RabbitMQ's are).
"""

from __future__ import annotations

import copy
import logging
import time

from actors import events
from actors import messages as m
from actors.core import channel_stats
from actors.management.api import TLS_FIELDS
from actors.timers import Sampler


def connection_name(peer, local) -> str:
    """RabbitMQ's connection name: "client host:port -> server host:port"."""
    return f"{peer[0]}:{peer[1]} -> {local[0]}:{local[1]}"


def sample_connection(reader, node: str, local) -> dict | None:
    """One connection, with its channels and their consumers; None before connection.open."""
    core = reader.core
    if core.vhost is None:
        return None
    name = connection_name(reader.peer, local)
    conn = {"name": name, "id": reader.conn_id, "node": node, "user": core.user,
            "vhost": core.vhost, "state": "blocked" if reader.throttled else "running",
            "protocol": "AMQP 0-9-1", "type": "network", "peer_host": reader.peer[0],
            "peer_port": reader.peer[1], "host": local[0], "port": local[1],
            "ssl": core.tls is not None, "timeout": core.heartbeat,
            "frame_max": core.frame_max, "channel_max": core.channel_max,
            "client_properties": _plain(getattr(core, "client_properties", {}) or {}),
            "connected_at": reader.connected_at,
            # the socket's statistics (netio.Conn; the node adds the *_details rates)
            "recv_oct": reader.conn.recv_oct, "recv_cnt": reader.conn.recv_cnt,
            "send_oct": reader.conn.send_oct, "send_cnt": reader.conn.send_cnt,
            "send_pend": sum(len(b) for b in list(reader.conn.out)),  # bytes not sent yet
            "auth_mechanism": core.mechanism, "user_who_performed_action": core.user}
    props = conn["client_properties"]
    if isinstance(props.get("connection_name"), str):
        conn["user_provided_name"] = props["connection_name"]
    conn.update(tls_fields(core.tls))
    channels = []
    for number, ref in list(reader.channels.items()):
        ch = getattr(_actor_of(ref), "core", None)
        if ch is None:
            continue
        details = {"name": f"{name} ({number})", "number": number,
                   "connection_name": name, "peer_host": reader.peer[0],
                   "peer_port": reader.peer[1], "user": core.user, "node": node}
        # (active and activity_status are the queue's to say: the node sets them from the
        # queue's sample, by the channel's address)
        consumers = [{"consumer_tag": tag, "queue": {"name": c.queue, "vhost": core.vhost},
                      "channel_details": details, "ack_required": not c.no_ack,
                      "prefetch_count": ch.prefetch, "exclusive": bool(c.exclusive),
                      "arguments": _plain(c.arguments), "channel_address": ch.address}
                     for tag, c in list(ch.consumers.items())]
        channels.append({"name": details["name"], "number": number, "node": node,
                         "user": core.user, "vhost": core.vhost,
                         "connection_details": {"name": name, "peer_host": reader.peer[0],
                                                "peer_port": reader.peer[1]},
                         "state": ch.state if ch.state != "open" else "running",
                         "prefetch_count": ch.prefetch,
                         "global_prefetch_count": ch.limiter.limit or 0,
                         "messages_unacknowledged": len(ch.unacked),
                         "messages_unconfirmed": len(ch.confirms),
                         "consumer_count": len(consumers), "confirm": bool(ch.confirm),
                         "transactional": bool(ch.tx),
                         "user_who_performed_action": core.user,
                         "messages_uncommitted": len(ch.tx_publishes),
                         "acks_uncommitted": sum(len(e) for e, _, _ in ch.tx_settles),
                         # per exchange / queue fine stats: RabbitMQ lists them in
                         # rates_mode "detailed" only; ours is "basic"
                         "publishes": [], "deliveries": [],
                         "message_stats": channel_stats.message_stats(ch.stats),
                         "consumers": consumers})
    conn["channels"] = len(channels)
    conn["channel_list"] = channels
    return conn


def tls_fields(tls) -> dict:
    """A connection's TLS fields as rabbit_reader's info items give them (the protocol as
    Erlang names it, the suite's parts, the client certificate's): "" for each on a plain TCP
    connection and for the certificate's when the client sent none."""
    if tls is None:
        return dict.fromkeys(TLS_FIELDS, "")
    return {"ssl_protocol": tls.version.lower(), "ssl_cipher": tls.cipher_name,
            "ssl_key_exchange": tls.key_exchange, "ssl_hash": tls.hash,
            "peer_cert_subject": tls.cert_subject, "peer_cert_issuer": tls.cert_issuer,
            "peer_cert_validity": tls.cert_validity}


def _actor_of(ref):
    """The actor object behind a light actor's ref (None for any other kind of ref)."""
    return getattr(getattr(ref, "actor_inbox", None), "actor", None)


def _plain(value):
    """Client properties as JSON can carry them (bytes as text)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def mark_idle(rows: list, activity: dict, now_ms: int) -> dict:
    """Set `idle_since` (wall-clock ms) on each channel of `rows` whose counts, unacked and
    unconfirmed messages and consumers are what the previous sample saw (unchanged for a
    whole interval): the time of the first sample that saw them so. Answer the new activity
    table (channel name -> (signature, since ms))."""
    out = {}
    for c in rows:
        for ch in c["channel_list"]:
            sig = (tuple(sorted(ch["message_stats"].items())), ch["messages_unacknowledged"],
                   ch["messages_unconfirmed"], ch["consumer_count"])
            seen = activity.get(ch["name"])
            if seen is None or seen[0] != sig:
                seen = (sig, now_ms)
            else:  # unchanged over a whole sampling interval
                ch["idle_since"] = seen[1]
            out[ch["name"]] = seen
    return out


def process_totals(host) -> dict:
    """The process's cumulative counts: every channel's counters (live ones read off their
    actors, closed ones from `retired`, under the lock that moves a channel from one to the
    other), connections and channels opened and closed, events written. `retired` is copied
    whole: add_into adds into the nested per-vhost / per-exchange dicts and the latency list,
    which a shallow copy would share (each sample then added the live channels' counts into
    the retired ones again)."""
    with host.lock:
        total = dict(copy.deepcopy(host.retired), **host.churn)
        for ref in host.channels.values():
            ch = _actor_of(ref)
            core = getattr(ch, "core", None)
            if core is not None:
                channel_stats.add_into(total, core.stats)
    total["events_written"] = events.written()
    total["events_dropped"] = events.dropped()
    total["events_syncs"] = events.syncs()
    return total


class ConnectionSampler(Sampler):
    """A thread of the connection worker: every interval, the sample of every connection to
    the metadata actor of every node up, when it changed."""

    def __init__(self, host, interval_ms: int):
        super().__init__(interval_ms, "conn-stats", logging.getLogger("leveret.connection"))
        self.host = host
        self.last = None
        # channel name -> (what it did so far, wall-clock ms it was first seen so): a channel
        # unchanged for an interval shows `idle_since`, as RabbitMQ's once it hibernated
        self.activity: dict[str, tuple] = {}

    def sample(self) -> None:
        host = self.host
        with host.lock:
            readers = [_actor_of(ref) for ref in host.readers.values()]
        cfg = host.config
        rows = [c for c in (sample_connection(r, cfg.node, (cfg.host, cfg.tls_port
                                                            if r.core.tls else cfg.port))
                            for r in readers if r is not None) if c is not None]
        totals = process_totals(host)
        now = int(time.time() * 1000)
        self.activity = mark_idle(rows, self.activity, now)
        if (rows, totals) == self.last:
            return
        self.last = (rows, totals)
        msg = m.ConnectionStats(host.transport.endpoint, now, rows, totals)
        with host.replica.lock:
            targets = [info.get("metadata") for info in host.replica.members.values()
                       if info.get("up") and info.get("metadata")]
        for addr in targets or [host.node]:
            host.transport.send(addr, msg)
