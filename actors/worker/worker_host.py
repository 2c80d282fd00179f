"""What every worker process's host part has: the process's Transport, its metadata replica, the
node's address, its slot, one timer thread. ConnectionHost and QueueHost add their kind's work."""

from __future__ import annotations

from actors.timers import Timers


class WorkerHost:
    def __init__(self, config, transport, replica, node, index):
        self.config = config  # node configuration
        self.transport = transport  # this process's Transport
        self.replica = replica  # metadata replica
        self.node = node  # the node's metadata actor address
        self.index = index  # worker slot
        self.timers = Timers()  # every timer of this process (heartbeats, TTL, time-outs)
        self.control = None  # the WorkerControl actor's ref (it monitors the kind's actors)

    def start(self) -> None:
        """Called once the metadata snapshot is in."""

    def stop(self) -> None:
        self.timers.stop()

    def worker_down(self, kind, endpoint) -> None:
        """Another worker process died."""

    def queue_down(self, msg) -> None:
        """A queue's process crashed (QueueDown): a connection worker tells its channels."""

    def actor_down(self, msg) -> None:
        """An actor this host monitors ended (ActorDown): a queue worker's supervision."""

    def pause(self, paused: bool) -> None:
        """The node pauses (cluster, pause_minority) or resumes."""

    def metadata_changed(self, changes) -> None:
        """The replica has just applied these changes."""

    def rpc_reply(self, reply) -> None:
        """An answer to an Rpc this host sent with its control address and a req_id."""

    def resource_alarm(self, alarms: list) -> None:
        """The node's memory or disk alarms changed (connection workers block publishers)."""
