"""The metadata actor's part in dynamic shovels: it owns the runtime parameters they come
from, so after every change of those or of the cluster's members it tells the node's
ShovelSupervisor (actors/shovel/supervisor.py) which shovels to run here; a shovel that
moved its src-delete-after count clears its own parameter through it (as
rabbit_shovel_worker's autodelete does); and it gathers every node's shovel statuses for
GET /api/shovels (`ShovelStates`).
"""

from __future__ import annotations

from actors import messages as m
from actors import metadata_ops as ops
from actors.core.errors import ChannelError, amqp_text
from actors.node.metadata_dispatch import handles
from actors.shovel.supervisor import ShovelSupervisor

SHOVEL_CHANGES = ("param_put", "param_del", "member_put")


class ShovelsMixin:
    def _shovels_init(self, config) -> None:
        self.shovels = ShovelSupervisor(config.node, config.node, self._shovel_done)
        # node name -> (at_ms, rows): the shovels other nodes run, from their ShovelStates
        self.peer_shovels: dict[str, tuple] = {}

    def _sync_shovels(self) -> None:
        if self.paused_flag.is_set():
            self.shovels.stop_all()  # pause_minority: this node serves nothing
            return
        self.shovels.cluster_name = self._cluster_name()
        self.shovels.sync(self.parameters, self.me, self.members if self.cluster else {})

    def _cluster_name(self) -> str:
        """The first member's name (the management API's cluster_name), this node's alone."""
        first = (self.config.cluster_nodes or ("",))[0]
        return (self.members.get(first) or {}).get("name") or self.config.node

    def _shovels_changed(self, changes) -> None:
        if any(c[0] in SHOVEL_CHANGES for c in changes):
            self._sync_shovels()

    def _shovel_done(self, vhost: str, name: str) -> None:
        """A runner's thread: its shovel deleted itself; clear the parameter as an operation
        of this actor (forwarded to the leader in a cluster)."""
        self.actor_ref.tell(ops.rpc("", 0, ops.Parameter("clear", vhost, "shovel", name)))

    def _shovel_tick(self, now_ms: int) -> None:
        note = m.ShovelStates(self.config.node, now_ms, self.shovels.rows())
        for member, info in self.members.items():
            if member != self.me and info.get("up") and info.get("metadata"):
                self.transport.send(info["metadata"], note)

    def _shovel_states(self, msg: m.ShovelStates) -> None:
        self.peer_shovels[msg.node] = (msg.at_ms, msg.rows)

    @handles(ops.ShovelStatus)
    def op_shovel_status(self, rpc, vhost=None):
        """Every shovel of the cluster as GET /api/shovels lists it: this node's own, and
        each other node up's from its last ShovelStates (sent every statistics interval)."""
        rows = list(self.shovels.rows())
        up = {info.get("name") for member, info in self.members.items()
              if member != self.me and info.get("up")}
        for node, (_, peer_rows) in self.peer_shovels.items():
            if node in up:
                rows.extend(peer_rows)
        rows = [r for r in rows if vhost is None or r["vhost"] == vhost]
        rows.sort(key=lambda r: (r["vhost"], r["name"]))
        return rows

    @handles(ops.ShovelRestart)
    def op_shovel_restart(self, rpc, vhost, name):
        """DELETE /api/shovels/vhost/{vhost}/{name}/restart (rabbit_shovel_util:
        restart_shovel/2): stop it and start it again, on the node that runs it."""
        if not self.shovels.restart((vhost, name)):
            raise ChannelError(404, amqp_text(404, f"shovel '{name}' in vhost '{vhost}' does "
                                                   "not run on this node"))
        return None
