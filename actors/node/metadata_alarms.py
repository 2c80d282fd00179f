"""The metadata actor's part in resource alarms (rabbit_alarm's role on a node): it hears the
node's monitor (actors/node/resources.py) set or clear an alarm, tells every connection worker
(whose readers block publishing connections), tells a connection worker that (re)starts, and
answers leveretctl's `status`, `set_vm_memory_high_watermark` and `set_disk_free_limit`.

Alarms are this node's: in a cluster each node blocks its own publishers (RabbitMQ blocks the
publishers of every node while any node has an alarm; see docs/cluster.md)."""

from __future__ import annotations

import time

from actors import messages as m
from actors import metadata_ops as ops
from actors.core.errors import ChannelError
from actors.node.metadata_dispatch import handles
from actors.node.resources import parse_bytes

ALARM_OPS = {"status", "set_vm_memory_high_watermark", "set_disk_free_limit"}  # node-local


class AlarmsMixin:
    resources = None  # the node's ResourceMonitor (shared with the node's main thread)
    alarms: frozenset = frozenset()  # alarms on, as last told by the monitor

    def _alarms_changed(self, msg: m.AlarmsChanged) -> None:
        # the monitor's state now, not the message's: a notice from the supervision thread may
        # arrive after a newer change made here by leveretctl
        alarms = frozenset(self.resources.alarms if self.resources is not None else msg.alarms)
        if alarms == self.alarms:
            return
        self.alarms = alarms
        notice = m.ResourceAlarm(sorted(self.alarms))
        for w in self.workers.values():
            if w.kind == "conn":
                self.transport.send(w.control, notice)

    def _alarms_to(self, worker) -> None:
        """A connection worker (re)started: it hears the alarms that are on."""
        if worker.kind == "conn" and self.alarms:
            self.transport.send(worker.control, m.ResourceAlarm(sorted(self.alarms)))

    @handles(ops.Status)
    def op_status(self, rpc):
        status = self.resources.status() if self.resources is not None else {}
        status["alarms"] = sorted(self.alarms)
        status["events"] = dict(self._events_totals(), level=self.config.events)
        return status

    @handles(ops.SetVmMemoryHighWatermark)
    def op_set_vm_memory_high_watermark(self, rpc, value, absolute=False):
        try:
            if absolute:
                self.resources.set_memory_watermark(absolute=parse_bytes(value))
            else:
                self.resources.set_memory_watermark(relative=float(value))
        except ValueError as e:
            raise ChannelError(406, f"PRECONDITION_FAILED - {e}") from None
        self._check_now()
        return self.resources.memory_limit()

    @handles(ops.SetDiskFreeLimit)
    def op_set_disk_free_limit(self, rpc, value, mem_relative=False):
        try:
            if mem_relative:
                self.resources.set_disk_free_limit(relative=float(value))
            else:
                self.resources.set_disk_free_limit(absolute=parse_bytes(value))
        except ValueError as e:
            raise ChannelError(406, f"PRECONDITION_FAILED - {e}") from None
        self._check_now()
        return self.resources.disk_limit()

    def _check_now(self) -> None:
        """A limit changed: judge it at once, as vm_memory_monitor does, so that `status`
        right after says what it did."""
        alarms = self.resources.check(time.monotonic())
        if alarms is not None:
            self._alarms_changed(m.AlarmsChanged(alarms))
