"""The metadata actor's side of the management listener (actors/management/): one read of
everything the HTTP API lists that the node's definitions hold, and the login check of HTTP
basic auth. Queue counts come from `op_list("queues")`; writes use the operations AMQP
channels and leveretctl already use (queue.declare, exchange.declare, bind, auth, policy...)."""

from __future__ import annotations

import time

from actors import messages as m
from actors.core.errors import ChannelError, amqp_text
from actors.transport import make_address


class ManagementMixin:
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
        return {"auth": self.auth.to_state(), "exchanges": exchanges,
                "queue_stats": [s for s in stats if s[2]],
                "connections": [c for rows in self.conn_stats.values() for c in rows],
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
