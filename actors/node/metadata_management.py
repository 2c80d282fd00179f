"""The metadata actor's side of the management listener (actors/management/): one read of
everything the HTTP API lists that the node's definitions hold, and the login check of HTTP
basic auth. Queue counts come from `op_list("queues")`; writes use the operations AMQP
channels and leveretctl already use (queue.declare, exchange.declare, bind, auth, policy...)."""

from __future__ import annotations

import time

from actors import events
from actors import messages as m
from actors.core import channel_stats
from actors.core.queue_stats import CONFIRMS
from actors.core.errors import ChannelError, amqp_text
from actors.transport import make_address


CONNECTION_RATES = ("recv_oct", "send_oct")  # rabbit_mgmt_format: the two with _details
CHANNEL_RATES = ("publish", "confirm", "return_unroutable", "drop_unroutable", "deliver",
                 "deliver_no_ack", "get", "get_no_ack", "get_empty", "redeliver", "ack",
                 "deliver_get")


class ManagementMixin:
    # --- the connection workers' statistics (ConnectionStats) ----------------------------------
    def _connection_sample(self, msg) -> None:
        last = self.conn_sampled.get(msg.worker)
        if last is not None and msg.at_ms <= last[0]:
            return  # late or repeated
        previous = (last[0], self.conn_stats.get(msg.worker, [])) if last else None
        self.conn_sampled[msg.worker] = (msg.at_ms, previous)
        self.conn_stats[msg.worker] = msg.connections
        self.worker_totals[msg.worker] = msg.totals

    def _forget_worker_stats(self, endpoint: str, own: bool = False) -> None:
        """A connection worker died: its connections are gone; the counts of one of this
        node's own workers stay in the node's totals (a counter never goes back while the
        node runs)."""
        self.conn_stats.pop(endpoint, None)
        self.conn_sampled.pop(endpoint, None)
        totals = self.worker_totals.pop(endpoint, None)
        if totals and own:
            self.dead_totals = channel_stats.merge(self.dead_totals, totals)

    def _connections_with_rates(self, now_ms: int) -> list:
        """Every connection of the samples, with recv_oct/send_oct and its channels'
        message_stats rates between a worker's last two samples (0 once its last sample is
        older than two intervals: a worker sends nothing while nothing changes)."""
        stale_ms = 2 * self.config.collect_statistics_interval
        out = []
        for worker, rows in self.conn_stats.items():
            at, previous = self.conn_sampled.get(worker, (0, None))
            quiet = now_ms - at > stale_ms
            before = {} if previous is None or quiet else {c["name"]: c for c in previous[1]}
            dt = 0 if previous is None or quiet else at - previous[0]
            for c in rows:
                pc = before.get(c["name"])
                row = channel_stats.with_rates(c, pc, dt, CONNECTION_RATES)
                pchannels = {ch["name"]: ch for ch in (pc or {}).get("channel_list", ())}
                row["channel_list"] = [
                    dict(ch, message_stats=channel_stats.with_rates(
                        ch.get("message_stats", {}),
                        pchannels[ch["name"]].get("message_stats", {})
                        if ch["name"] in pchannels else None, dt, CHANNEL_RATES))
                    for ch in c["channel_list"]]
                out.append(row)
        return out

    def op_mgmt_counters(self, rpc):
        """This node's statistics for Prometheus (per node, as rabbitmq_prometheus: a
        dashboard sums over the nodes): its connection workers' process totals (live and dead
        ones), their connections, channels and consumers now, this actor's queue churn (the
        leader's, in a cluster: it decides declares and deletes) and the node process's
        events written."""
        own = {w.endpoint for w in self.workers.values() if w.kind == "conn"}
        total = dict(self.dead_totals)
        for worker, t in self.worker_totals.items():
            if worker in own:
                total = channel_stats.merge(total, t)
        total = channel_stats.merge(total, self.queue_churn)
        for (v, n), entry in self.queue_stats.samples.items():  # this node's queues' confirms
            q = self.queues.get((v, n))
            if q is not None and q.get("home", self.me) == self.me:
                for k in CONFIRMS:
                    total[k] = total.get(k, 0) + entry[0][1].get(k, 0)
        total["events_written"] = total.get("events_written", 0) + events.written()
        conns = [c for w, rows in self.conn_stats.items() if w in own for c in rows]
        channels = [ch for c in conns for ch in c["channel_list"]]
        total["now"] = {
            "connections": len(conns), "channels": len(channels),
            "consumers": sum(len(ch["consumers"]) for ch in channels),
            "messages_unconfirmed": sum(ch.get("messages_unconfirmed", 0) for ch in channels),
            "publishers": sum(1 for ch in channels if ch.get("message_stats", {}).get("publish")),
            "connection_rows": [{k: c[k] for k in ("vhost", "name", "recv_oct", "send_oct",
                                                   "recv_cnt", "send_cnt", "channels")
                                 if k in c} for c in conns]}
        return total

    def op_mgmt_state(self, rpc):
        """Definitions as the management API lists them (plain data; the password hashes stay
        inside the node process: the listener runs in it)."""
        exchanges = [{"vhost": v, "name": n, "type": x.type, "durable": x.durable,
                      "auto_delete": x.auto_delete, "internal": x.internal,
                      "arguments": dict(x.arguments)} for (v, n), x in self._all_exchanges()]
        members = [{"name": info.get("name", member), "up": bool(info.get("up")),
                    "amqp": info.get("amqp", "")} for member, info in self.members.items()]
        if not members:
            members = [{"name": self.config.node, "up": True,
                        "amqp": f"{self.config.host}:{self.config.port}"}]
        now = int(time.time() * 1000)
        stats = [[v, n, self.queue_stats.message_stats(v, n, now)] for (v, n) in self.queues]
        depth = [[v, n, self.queue_stats.depth_rates(v, n, now)] for (v, n) in self.queues]
        return {"auth": self.auth.to_state(), "exchanges": exchanges,
                "queue_stats": [s for s in stats if s[2]],
                "queue_depth_rates": [d for d in depth if d[2]],
                "connections": self._connections_with_rates(now),
                "bindings": list(self._all_bindings()),
                "queues": [{k: v for k, v in q.items() if k not in ("address", "worker")}
                           for q in self.queues.values()],
                "policies": list(self.policies.values()),
                "operator_policies": list(self.op_policies.values()),
                "limits": [[scope, name, value] for (scope, name), value in self.limits.items()],
                "node": self.config.node,
                "members": members, "alarms": sorted(self.alarms)}

    def op_mgmt_close_connection(self, rpc, name, reason):
        """DELETE /api/connections/{name}: the worker holding it closes it (any node's)."""
        for worker, rows in self.conn_stats.items():
            for c in rows:
                if c["name"] == name:
                    self.transport.send(make_address(worker, "control"),
                                        m.ForceClose(c["id"], reason))
                    return None
        raise ChannelError(404, amqp_text(404, f"no connection '{name}'"))

    def op_environment(self, rpc):
        """rabbitmqctl environment: the node's settings (the cluster secret left out)."""
        return {k: v for k, v in vars(self.config).items() if k != "cluster_secret"}

    def op_mgmt_login(self, rpc, user, password):
        """HTTP basic auth: the user's tags, or 401's reason."""
        refused = self.auth.check_login(user, password)
        if refused is not None:
            raise ChannelError(403, amqp_text(403, refused))
        return self.auth.user_tags(user)
