"""The metadata actor's side of the management listener (actors/management/): one read of
everything the HTTP API lists that the node's definitions hold, and the login check of HTTP
basic auth. Queue counts come from the samples the queues emit every
collect_statistics_interval (QueueStats), never from asking each queue per request; writes use
the operations AMQP channels and leveretctl already use (queue.declare, exchange.declare,
bind, auth, policy...)."""

from __future__ import annotations

import gc
import os
import resource
import time
from importlib import metadata as dists

from actors import events
from actors import messages as m
from actors import metadata_ops as ops
from actors.core import channel_stats
from actors.core import quorum
from actors.core.samples import Sample, Sampled
from actors.core.queue_stats import CONFIRMS, DEAD_LETTERED, GAUGES, STATE, STORAGE
from actors.core.errors import ChannelError, amqp_text
from actors.core.routing import EXCHANGE_TYPES
from actors.core.connection import KNOWN_MECHANISMS, PASSWORD_MECHANISMS
from actors.core.consumers import activity
from actors.core.pause import CONNECTION_TIMEOUT_S
from actors.durable_files import SYNCS
from actors.node.metadata_dispatch import handles
from actors.node.node_stats import sync_avg_ms, thread_limit
from actors.transport import make_address


CONNECTION_RATES = ("recv_oct", "send_oct")  # rabbit_mgmt_format: the two with _details
# the exchange types and authentication mechanisms /api/nodes lists (rabbit_registry's
# descriptions of RabbitMQ's own, which Leveret implements as they are)
EXCHANGE_DESCRIPTIONS = {t: f"AMQP {t} exchange, as per the AMQP specification"
                         for t in EXCHANGE_TYPES}
MECHANISM_DESCRIPTIONS = {
    "AMQPLAIN": "QPid AMQPLAIN mechanism", "PLAIN": "SASL PLAIN authentication mechanism",
    "EXTERNAL": "TLS peer verification-based authentication plugin. Used in combination "
                "with the EXTERNAL SASL mechanism."}
# the distributions the node runs on (its "applications": Leveret, then the libraries it
# imports, with the versions installed)
APPLICATIONS = (("leveret", "Leveret, an AMQP 0-9-1 broker"),
                ("aiohttp", "HTTP server of the management and Prometheus listeners"),
                ("pyzmq", "ZeroMQ between the node and its workers"),
                ("lmdb", "message store and queue index"), ("msgpack", "message encoding"),
                ("prometheus-client", "Prometheus exposition format"),
                ("pysyncobj", "Raft log of a cluster's definitions"))
_applications: list | None = None


def applications() -> list:
    """[{name, description, version}] of APPLICATIONS installed (read once)."""
    global _applications
    if _applications is None:
        _applications = []
        for name, description in APPLICATIONS:
            try:
                version = dists.version(name)
            except dists.PackageNotFoundError:
                continue
            _applications.append({"name": name, "description": description,
                                  "version": version})
    return _applications


# what the node's processes count of their storage (durable_files.SYNCS, storage.io_totals),
# summed for /api/nodes; RabbitMQ's other file handle cache figures (io_seek_*, io_reopen_count,
# io_read_avg_time, io_write_avg_time) and gc_bytes_reclaimed have no counterpart here and are
# left out of the answer (docs/management.md, "/api/nodes")
STORAGE_IO = ("io_sync_count", "io_sync_time_us", "msg_store_read_count",
              "msg_store_write_count")
# rabbit_mgmt_gc's queues of deleted objects' statistics to drop (Leveret drops them at once)
METRICS_GC_QUEUES = ("connection_closed", "channel_closed", "consumer_deleted",
                     "exchange_deleted", "queue_deleted", "vhost_deleted", "node_node_deleted",
                     "channel_consumer_deleted")

CHANNEL_RATES = ("publish", "confirm", "return_unroutable", "drop_unroutable", "deliver",
                 "deliver_no_ack", "get", "get_no_ack", "get_empty", "redeliver", "ack",
                 "deliver_get")


class ManagementMixin:
    # --- the connection workers' statistics (ConnectionStats) ----------------------------------
    def _connection_sample(self, msg) -> None:
        had = self.conn_sampled.get(msg.worker)
        if had is not None and msg.at_ms <= had.last.at_ms:
            return  # late or repeated
        self.conn_sampled[msg.worker] = Sampled(Sample(msg.at_ms, msg.connections),
                                                had.last if had is not None else None)
        self.conn_stats[msg.worker] = msg.connections
        if had is not None and msg.worker in self.worker_totals:
            self.prev_totals[msg.worker] = Sample(had.last.at_ms, self.worker_totals[msg.worker])
        self.worker_totals[msg.worker] = msg.totals

    def _forget_worker_stats(self, endpoint: str, own: bool = False) -> None:
        """A connection worker died: its connections are gone; the counts of one of this
        node's own workers stay in the node's totals (a counter never goes back while the
        node runs)."""
        self.conn_stats.pop(endpoint, None)
        self.conn_sampled.pop(endpoint, None)
        totals = self.worker_totals.pop(endpoint, None)
        self.prev_totals.pop(endpoint, None)
        if totals and own:
            self.dead_totals = channel_stats.merge(self.dead_totals, totals)
        if totals:  # (the API's counts are the cluster's: any node's workers)
            self.dead_all = channel_stats.merge(self.dead_all, totals)

    def _raw_counts(self, now_ms: int) -> dict:
        """Every connection worker's totals added up: path -> (count, rate)."""
        workers = {w: (self._sampled_at(w), t, self.prev_totals.get(w))
                   for w, t in self.worker_totals.items()}
        return channel_stats.cluster_counts(workers, self.dead_all, now_ms,
                                            self.config.collect_statistics_interval)

    def _sampled_at(self, worker: str) -> int:
        """When a connection worker's last sample was taken (0: none yet)."""
        had = self.conn_sampled.get(worker)
        return had.last.at_ms if had is not None else 0

    def _reset_counts(self, prefix: tuple) -> None:
        """An exchange (prefix ("vhosts", vhost, name)... as the router names it) or a vhost
        was deleted: what was counted for it so far is the base a new one starts from."""
        if len(prefix) == 3:  # an exchange: ("vhosts", vhost, name)
            prefix = ("vhosts", prefix[1], "exchanges", prefix[2])
        for path, (n, _) in self._raw_counts(int(time.time() * 1000)).items():
            if path[:len(prefix)] == prefix:
                self.counts_base[path] = n

    def _cluster_counts(self, now_ms: int) -> list:
        """The management API's counts over every connection worker of the cluster (churn,
        per-vhost channel counts, exchanges' publish_in / publish_out) with their rates
        (channel_stats.cluster_counts), and this actor's queue churn with its rate between
        snapshots taken at most once per interval: [[path, count, rate], ...]."""
        interval = self.config.collect_statistics_interval
        counts = self._raw_counts(now_ms)
        for path, base in self.counts_base.items():  # deleted ones: counted from then on
            if path in counts:
                n, rate = counts[path]
                counts[path] = (max(0, n - base), rate)
        for path in [p for p in counts if len(p) == 5 and p[2] == "exchanges" and
                     p[4] == "publish_in" and counts[p][0] == 0 and p in self.counts_base]:
            counts.pop(path)  # nothing published into the new one yet: no message_stats
        snaps = self.churn_snaps
        if not snaps or now_ms - snaps[-1].at_ms >= interval:
            snaps.append(Sample(now_ms, dict(self.queue_churn)))
            del snaps[:-2]
        for k, n in self.queue_churn.items():
            rate = 0.0
            if len(snaps) == 2 and now_ms - snaps[-1].at_ms <= 2 * interval:
                (t0, c0), (t1, c1) = snaps
                rate = round(max(0, c1[k] - c0[k]) * 1000.0 / max(1, t1 - t0), 1)
            counts[(k,)] = (n, rate)
        return [[list(path), n, rate] for path, (n, rate) in counts.items()]

    def _connections_with_rates(self, now_ms: int) -> list:
        """Every connection of the samples, with recv_oct/send_oct and its channels'
        message_stats rates between a worker's last two samples (0 once its last sample is
        older than two intervals: a worker sends nothing while nothing changes)."""
        stale_ms = 2 * self.config.collect_statistics_interval
        out = []
        for worker, rows in self.conn_stats.items():
            at, previous = self._sampled_at(worker), None
            if worker in self.conn_sampled:
                previous = self.conn_sampled[worker].previous
            quiet = now_ms - at > stale_ms
            before = {} if previous is None or quiet else {c["name"]: c for c in previous.stats}
            dt = 0 if previous is None or quiet else at - previous.at_ms
            for c in rows:
                pc = before.get(c["name"])
                row = channel_stats.with_rates(c, pc, dt, CONNECTION_RATES)
                pchannels = {ch["name"]: ch for ch in (pc or {}).get("channel_list", ())}
                row["channel_list"] = [
                    dict(ch, message_stats=channel_stats.with_rates(
                        ch.get("message_stats", {}),
                        pchannels[ch["name"]].get("message_stats", {})
                        if ch["name"] in pchannels else None, dt, CHANNEL_RATES),
                         consumers=[self._consumer_row(cons) for cons in ch["consumers"]])
                    for ch in c["channel_list"]]
                out.append(row)
        return out

    def _consumer_row(self, cons: dict) -> dict:
        """A channel's consumer row with `active` and `activity_status` from its queue's last
        sample (which consumer holds a single active consumer queue), the channel's address
        it was matched by left out."""
        row = {k: v for k, v in cons.items() if k != "channel_address"}
        key = (row["queue"]["vhost"], row["queue"]["name"])
        q = self.queues.get(key) or {}
        sample = self.queue_stats.last(*key) or {}
        row["active"], row["activity_status"] = activity(
            (q.get("arguments") or {}).get("x-single-active-consumer") is True,
            sample.get("single_active_consumer"), cons.get("channel_address"),
            row["consumer_tag"])
        return row

    def _sampled_queue_rows(self) -> list:
        """Every queue as the management API and Prometheus list it: its definition's node
        and mirrors, `state` (running once its queue process serves, down while its worker
        or node restarts it) and, from its last sample (QueueStats), its depth, consumers,
        where its messages are (message_bytes*, messages_ram...), head message timestamp and
        disk reads and writes (absent before its first sample
        and while it is down, as RabbitMQ lists a queue it has no statistics of). Nothing is
        asked of the queues: the answer costs the same whatever their number."""
        rows = []
        for (vhost, name), q in self.queues.items():
            row = {"vhost": vhost, "name": name, "node": self._member_name(q.get("home")),
                   "mirrors": [self._member_name(x) for x in q.get("mirrors") or []],
                   "synchronised_mirrors": [self._member_name(x)
                                            for x in q.get("synced") or []],
                   "state": "running" if q.get("address") else
                   "crashed" if q.get("crashed") else "down"}
            sample = self.queue_stats.last(vhost, name) if q.get("address") else None
            if sample is not None:
                row.update((k, sample.get(k, 0)) for k in GAUGES + STORAGE)
                row.update((k, sample.get(k)) for k in STATE)
            rows.append(row)
        return rows

    # --- the node's own figures (/api/nodes: NodeStats) -------------------------------------
    def _node_tick(self, msg) -> None:
        """The supervision thread measured the node (NodeTick): this node's sample goes into
        its own table and to the metadata actor of every other member up, as queues send
        theirs, so any node's /api/nodes shows each member's own figures."""
        now = int(time.time() * 1000)
        sample = self._node_sample(msg.figures)
        self.node_table.put(self.config.node, now, sample)
        note = m.NodeStats(self.config.node, now, sample)
        self._shovel_tick(now)
        for member, info in self.members.items():
            if member != self.me and info.get("up") and info.get("metadata"):
                self.transport.send(info["metadata"], note)

    def _node_sample(self, figures: dict) -> dict:
        """This node's figures, as rabbit_mgmt_external_stats gathers a RabbitMQ node's
        (docs/management.md, "/api/nodes", says what each is here)."""
        cfg = self.config
        status = self.resources.status() if self.resources is not None else {}
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        own = {w.endpoint for w in self.workers.values() if w.kind == "conn"}
        conns = sum(len(rows) for w, rows in self.conn_stats.items() if w in own)
        listeners = 1 + bool(cfg.tls_port) + bool(cfg.management_port) + \
            bool(cfg.prometheus_port)
        totals = self._own_totals()
        io = self._storage_io(totals)
        reads = writes = 0
        for (v, n), entry in self.queue_stats.samples.items():
            q = self.queues.get((v, n))
            if q is not None and q.get("home", self.me) == self.me:
                reads += entry.last.stats.get("disk_reads") or 0
                writes += entry.last.stats.get("disk_writes") or 0
        connected = self.cluster.connected() if getattr(self, "cluster", None) else set()
        partitions = sorted(info.get("name", member) for member, info in self.members.items()
                            if member != self.me and info.get("up") and
                            member not in connected)
        contexts = []
        if cfg.management_port:
            contexts.append({"description": "RabbitMQ Management", "path": "/",
                             "port": str(cfg.management_port),
                             "ip": cfg.management_host or cfg.host})
        if cfg.prometheus_port:
            contexts.append({"description": "RabbitMQ Prometheus", "path": "/",
                             "port": str(cfg.prometheus_port),
                             "ip": cfg.prometheus_host or cfg.host})
        mechanisms = PASSWORD_MECHANISMS + (("EXTERNAL",) if cfg.tls_port and
                                            cfg.ssl_verify == "verify_peer" else ())
        alarms = set(self.alarms)
        return {
            "os_pid": str(os.getpid()),
            "mem_used": status.get("memory_used", 0),
            "mem_limit": status.get("memory_limit", 0),
            "mem_alarm": "memory" in alarms,
            "mem_calculation_strategy": "rss",
            "disk_free": status.get("disk_free") or 0,
            "disk_free_limit": status.get("disk_free_limit", 0),
            "disk_free_alarm": "disk" in alarms,
            "fd_used": figures.get("fd_used", 0), "fd_total": nofile,
            "sockets_used": conns + listeners, "sockets_total": nofile,
            "proc_used": figures.get("proc_used", 0), "proc_total": thread_limit(),
            "run_queue": figures.get("run_queue", 0),
            "processors": os.cpu_count() or 1,
            "uptime": int((time.monotonic() - self.started) * 1000),
            "context_switches": figures.get("context_switches", 0),
            "io_read_bytes": figures.get("io_read_bytes", 0),
            "io_write_bytes": figures.get("io_write_bytes", 0),
            "io_read_count": figures.get("io_read_count", 0),
            "io_write_count": figures.get("io_write_count", 0),
            "gc_num": sum(g["collections"] for g in gc.get_stats()),
            "queue_index_read_count": reads, "queue_index_write_count": writes,
            "mnesia_disk_tx_count": self.meta_tx["disk"],
            "mnesia_ram_tx_count": self.meta_tx["ram"],
            "io_sync_count": io["io_sync_count"],
            "io_sync_avg_time": sync_avg_ms(io["before"], io["io_sync_count"],
                                            io["io_sync_time_us"]),
            "msg_store_read_count": io["msg_store_read_count"],
            "msg_store_write_count": io["msg_store_write_count"],
            # Ra's write-ahead log is a cluster's Raft journal here (pysyncobj's, one file
            # open while clustered); no segment writer
            "ra_open_file_metrics": {"ra_log_wal": int(cfg.clustered),
                                     "ra_log_segment_writer": 0},
            "metrics_gc_queue_length": dict.fromkeys(METRICS_GC_QUEUES, 0),
            "net_ticktime": CONNECTION_TIMEOUT_S,
            "connection_created": totals.get("connections_opened", 0),
            "connection_closed": totals.get("connections_closed", 0),
            "channel_created": totals.get("channels_opened", 0),
            "channel_closed": totals.get("channels_closed", 0),
            "queue_declared": self.queue_churn["queues_declared"],
            "queue_created": self.queue_churn["queues_created"],
            "queue_deleted": self.queue_churn["queues_deleted"],
            "partitions": partitions,
            "rates_mode": "basic",
            "exchange_types": [{"name": t, "description": EXCHANGE_DESCRIPTIONS[t],
                                "enabled": True} for t in sorted(EXCHANGE_TYPES)],
            "auth_mechanisms": [{"name": n, "description": MECHANISM_DESCRIPTIONS[n],
                                 "enabled": n in mechanisms} for n in KNOWN_MECHANISMS],
            "applications": applications(),
            "contexts": contexts,
            "log_files": ["<stderr>"],
            "config_files": list(cfg.config_files),
            "db_dir": os.path.abspath(cfg.data_dir),
            "enabled_plugins": [],
            # a lone node has no links to list; a clustered one's Raft links are not
            # measured, so it leaves the field out rather than claim none
            **({} if cfg.clustered else {"cluster_links": []}),
        }

    def _own_totals(self) -> dict:
        """The cumulative counts of this node's own workers, live and dead (a counter never
        goes back while the node runs): the connection workers' channel counts and churn,
        every worker's events written and storage io."""
        own = {w.endpoint for w in self.workers.values()}
        total = dict(self.dead_totals)
        for worker, t in self.worker_totals.items():
            if worker in own:
                total = channel_stats.merge(total, t)
        return total

    def _storage_io(self, own_totals: dict) -> dict:
        """The node's syncs (its own: the Raft journal's; its workers' in `own_totals`: the
        message store's commits, the quorum logs') and msg_store reads and writes; remembers
        the syncs for the next sample's io_sync_avg_time."""
        total = channel_stats.merge(own_totals, SYNCS.totals())
        io = {k: total.get(k, 0) for k in STORAGE_IO}
        before, self.io_sync_seen = self.io_sync_seen, (io["io_sync_count"],
                                                        io["io_sync_time_us"])
        return dict(io, before=before)

    def _node_rows(self, now_ms: int) -> dict:
        """Member name -> its last sample with rates (NodeTable.row), those heard from."""
        return {node: self.node_table.row(node, now_ms) for node in self.node_table.samples}

    def _events_totals(self, workers: dict | None = None) -> dict:
        """Events written and dropped by this node's processes: `workers`, its workers' totals
        merged (by default `_own_totals`: live and dead ones), plus the node process's own."""
        if workers is None:
            workers = self._own_totals()
        return {"events_written": workers.get("events_written", 0) + events.written(),
                "events_dropped": workers.get("events_dropped", 0) + events.dropped(),
                "events_syncs": workers.get("events_syncs", 0) + events.syncs(),
                "events_sync": self.config.events_sync if self.config.events != "off"
                else "off"}

    @handles(ops.MgmtCounters)
    def op_mgmt_counters(self, rpc):
        """This node's statistics for Prometheus (per node, as rabbitmq_prometheus: a
        dashboard sums over the nodes): its connection workers' process totals (live and dead
        ones), their connections, channels and consumers now, this actor's queue churn (the
        leader's, in a cluster: it decides declares and deletes) and the events written by
        the node process and its connection and queue workers (WorkerStats)."""
        total = channel_stats.merge(self._own_totals(), self.queue_churn)
        dead_lettered: dict = {}  # queue type -> DEAD_LETTERED name -> count
        for (v, n), entry in self.queue_stats.samples.items():  # this node's queues' counts
            q = self.queues.get((v, n))
            if q is not None and q.get("home", self.me) == self.me:
                for k in CONFIRMS:
                    total[k] = total.get(k, 0) + entry.last.stats.get(k, 0)
                by_type = dead_lettered.setdefault(
                    quorum.queue_type(q.get("arguments") or {}), dict.fromkeys(DEAD_LETTERED, 0))
                for k in DEAD_LETTERED:
                    by_type[k] += entry.last.stats.get(k, 0)
        total["dead_lettered"] = dead_lettered
        total.update(self._events_totals(total))
        own = {w.endpoint for w in self.workers.values() if w.kind == "conn"}
        conns = [c for w, rows in self.conn_stats.items() if w in own for c in rows]
        channels = [ch for c in conns for ch in c["channel_list"]]
        total["now"] = {
            "connections": len(conns), "channels": len(channels),
            "consumers": sum(len(ch["consumers"]) for ch in channels),
            "messages_unconfirmed": sum(ch.get("messages_unconfirmed", 0) for ch in channels),
            "channel_rows": [{"vhost": ch["vhost"], "name": ch["name"],
                              "messages_unacknowledged": ch.get("messages_unacknowledged", 0)}
                             for ch in channels],
            "publishers": sum(1 for ch in channels if ch.get("message_stats", {}).get("publish")),
            "connection_rows": [{k: c[k] for k in ("vhost", "name", "recv_oct", "send_oct",
                                                   "recv_cnt", "send_cnt", "channels")
                                 if k in c} for c in conns]}
        return total

    @handles(ops.MgmtState)
    def op_mgmt_state(self, rpc):
        """Definitions as the management API lists them (plain data; the password hashes stay
        inside the node process: the listener runs in it)."""
        exchanges = [{"vhost": v, "name": n, "type": x.type, "durable": x.durable,
                      "auto_delete": x.auto_delete, "internal": x.internal,
                      "arguments": dict(x.arguments), "user": x.user}
                     for (v, n), x in self._all_exchanges()]
        members = [{"member": member, "name": info.get("name", member),
                    "up": bool(info.get("up")), "amqp": info.get("amqp", "")}
                   for member, info in self.members.items()]
        if not members:
            members = [{"member": "", "name": self.config.node, "up": True,
                        "amqp": f"{self.config.host}:{self.config.port}"}]
        now = int(time.time() * 1000)
        stats = [[v, n, self.queue_stats.message_stats(v, n, now)] for (v, n) in self.queues]
        depth = [[v, n, self.queue_stats.depth_rates(v, n, now)] for (v, n) in self.queues]
        disk = [[v, n, self.queue_stats.disk_stats(v, n, now)] for (v, n) in self.queues]
        use = [[v, n, dict(self.queue_stats.consumer_use(v, n, now),
                           idle_since=self.queue_stats.idle_since(v, n, now))]
               for (v, n) in self.queues]
        return {"auth": self.auth.to_state(), "exchanges": exchanges,
                "queue_stats": [[v, n, s] for v, n, s in stats if s],
                "queue_depth_rates": [[v, n, d] for v, n, d in depth if d],
                "queue_disk": [[v, n, d] for v, n, d in disk if d],
                "queue_rows": self._sampled_queue_rows(),
                "queue_use": use,
                "counts": self._cluster_counts(now),
                "connections": self._connections_with_rates(now),
                "bindings": list(self._all_bindings()),
                "queues": [{k: v for k, v in q.items() if k not in ("address", "worker")}
                           for q in self.queues.values()],
                "policies": list(self.policies.values()),
                "operator_policies": list(self.op_policies.values()),
                "limits": [[scope, name, value] for (scope, name), value in self.limits.items()],
                "parameters": [[v, c, n, value]
                               for (v, c, n), value in self.parameters.items()],
                "node": self.config.node, "node_rows": self._node_rows(now),
                "members": members, "alarms": sorted(self.alarms),
                # the statistics collector's backlog (RabbitMQ's statistics_db_event_queue:
                # its collectors' message queues): what waits in this actor's mailbox now
                "statistics_db_event_queue": len(self.actor_inbox)}

    @handles(ops.MgmtCloseConnection)
    def op_mgmt_close_connection(self, rpc, name, reason):
        """DELETE /api/connections/{name}: the worker holding it closes it (any node's)."""
        for worker, rows in self.conn_stats.items():
            for c in rows:
                if c["name"] == name:
                    self.transport.send(make_address(worker, "control"),
                                        m.ForceClose(c["id"], reason))
                    return None
        raise ChannelError(404, amqp_text(404, f"no connection '{name}'"))

    @handles(ops.Environment)
    def op_environment(self, rpc):
        """rabbitmqctl environment: the node's settings (the cluster secret left out)."""
        return {k: v for k, v in vars(self.config).items()
                if k not in ("cluster_secret", "config_files")}

    @handles(ops.MgmtLogin)
    def op_mgmt_login(self, rpc, user, password):
        """HTTP basic auth: the user's tags, or 401's reason."""
        refused = self.auth.check_login(user, password)
        if refused is not None:
            raise ChannelError(403, amqp_text(403, refused))
        return self.auth.user_tags(user)
