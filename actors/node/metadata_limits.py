"""The metadata actor's connection and channel tracking for vhost and user limits
(rabbit_connection_tracking / rabbit_channel_tracking, rabbit_vhost_limit, user limits).

Every connection past its vhost check registers here (`connection.open`) and every channel
open and close is told (`channel.open`, `channel.closed`); a connection's end
(`connection.closed`, or its worker's death) drops it and its channels. A connection or
channel whose vhost or user has a limit waits for the answer (RabbitMQ's refusal texts, from
actors/core/limits.py); the others only tell, so that they are counted if a limit comes later.

The counts are this node's (the definitions, limits included, are the cluster's): in a cluster
each node admits up to the limit, where RabbitMQ counts cluster-wide (docs/policies.md).
"""

from __future__ import annotations

from actors import metadata_ops as ops
from actors.core import limits
from actors.node.metadata_dispatch import handles


class LimitsMixin:
    def _limits_init(self) -> None:
        self.tracked: dict[str, tuple[str, str]] = {}  # conn id -> (vhost, user), this node's
        self.tracked_channels: dict[str, set] = {}  # conn id -> open channel numbers

    @handles(ops.ConnectionOpen)
    def op_connection_open(self, rpc, conn, vhost, user):
        """A connection asks to be counted; refused (530) past its vhost's or user's limit."""
        if conn in self.tracked:
            return None
        vlim = self.limits.get(("vhost", vhost))
        if vlim:
            limits.check_vhost_connections(
                vlim, sum(1 for v, _ in self.tracked.values() if v == vhost), vhost, user)
        ulim = self.limits.get(("user", user))
        if ulim:
            limits.check_user_connections(
                ulim, sum(1 for _, u in self.tracked.values() if u == user), user)
        self.tracked[conn] = (vhost, user)
        return None

    @handles(ops.ChannelOpen)
    def op_channel_open(self, rpc, conn, number):
        """A channel asks to be counted; refused (530) past its user's max-channels."""
        vu = self.tracked.get(conn)
        if vu is None:
            return None  # its connection is gone (or was never counted)
        chans = self.tracked_channels.setdefault(conn, set())
        if number in chans:
            return None
        ulim = self.limits.get(("user", vu[1]))
        if ulim:
            count = sum(len(self.tracked_channels.get(c, ())) for c, (_, u) in
                        self.tracked.items() if u == vu[1])
            limits.check_user_channels(ulim, count, vu[1])
        chans.add(number)
        return None

    @handles(ops.ChannelClosed)
    def op_channel_closed(self, rpc, conn, number):
        chans = self.tracked_channels.get(conn)
        if chans is not None:
            chans.discard(number)
        return None

    def _untrack(self, conn: str) -> None:
        self.tracked.pop(conn, None)
        self.tracked_channels.pop(conn, None)

    def _untrack_endpoint(self, endpoint: str) -> None:
        """A connection worker died: its connections end with it."""
        for conn in [c for c in self.tracked if c.startswith(endpoint + "/")]:
            self._untrack(conn)
