"""Channel actor: the shell around actors/core/channel.py (rabbit_channel.erl's process).

Receives whole commands from its Reader, deliveries/confirms/credit from queues and replies from
the node, and gives them to the core's `handle`; the core decides, this shell sends through the
core's `ChannelPort` (its own methods below): frames to the Writer, messages over the Transport,
block/unblock to the Reader.
"""

from __future__ import annotations

import itertools
import logging
import time

import pykka

from actors import events
from actors import messages as m
from actors.core.channel import ChannelCore, ChannelPort
from actors.core.errors import ChannelError
from actors.runtime import LightActor

log = logging.getLogger("leveret.channel")

_incarnations = itertools.count(1)  # a reopened channel number gets a new address


def _tell(ref, msg) -> None:
    """Tell the connection's reader or writer; once the connection is gone (the client aborted,
    say, with confirms or deliveries still on their way from queues) there is no one to tell:
    the reader's teardown stops this channel next, and its queues learn of it then."""
    try:
        ref.tell(msg)
    except pykka.ActorDeadError:
        pass


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


class ConsumerTimeoutCheck:
    """Timer -> channel (local only): time for the core's consumer_timeout_check (S5)."""

    __slots__ = ("at",)

    def __init__(self, at: int):
        self.at = at  # the check_at it was armed for


class Channel(LightActor):
    scheduler_name = "conn"

    def __init__(self, host, number, conn, reader, writer):
        super().__init__()
        self.host = host  # ConnectionHost of this process
        self.number = number  # channel number
        self.reader = reader  # Reader actor ref
        self.writer = writer  # Writer actor ref
        # transport name: unique per incarnation, so replies meant for a closed channel never
        # reach the channel that reopens its number
        self.name = f"ch/{conn.owner.rpartition('/')[2]}/{number}/{next(_incarnations)}"
        self.address = host.transport.address(self.name)
        self.transport = host.transport  # this process's Transport
        self.core = ChannelCore(number, self.address, conn, host.replica,
                                ChannelPort.of(self, host.transport.send, events=events,
                                               clock=time.monotonic),
                                host.config.credit_initial,
                                credit_initial_bytes=host.config.credit_initial_bytes,
                                consumer_timeout=host.config.consumer_timeout,
                                consumer_timeout_action=host.config.consumer_timeout_action)
        self.armed_at = 0  # the consumer-timeout check the timer will tell us of (ms), 0 = none

    # --- its core's port (ChannelPort.of): each only sends or answers -----------------------
    now_ms = staticmethod(_now_ms)

    def write(self, data, sent=None) -> None:
        if data or sent:
            _tell(self.writer, m.Write(data, [((q, self.address), n) for q, n in sent]
                                       if sent else None))

    def is_dead(self, address) -> bool:
        return self.transport.is_dead(address.partition("#")[0])

    def close_connection(self, code, text, class_id, method_id) -> None:
        _tell(self.reader, m.CloseConnection(code, text, class_id, method_id))

    def block(self) -> None:
        _tell(self.reader, m.Block(self.number, True))

    def unblock(self) -> None:
        _tell(self.reader, m.Block(self.number, False))

    def closed(self) -> None:
        _tell(self.reader, m.ChannelFinished(self.number, self.actor_ref))

    def on_start(self):
        self.host.transport.register(self.name, self.actor_ref)
        self.host.register_channel(self.address, self.actor_ref)

    def on_stop(self):
        self.host.transport.unregister(self.name)
        self.host.unregister_channel(self.address, self.core.stats)

    def on_receive(self, msg):
        core = self.core
        try:
            kind = type(msg)
            if kind is ConsumerTimeoutCheck:
                if msg.at == self.armed_at:  # else an earlier arming's, superseded
                    self.armed_at = 0
                    core.consumer_timeout_check(_now_ms())
            elif kind is m.Terminate:
                core.terminate()
                self.stop()
                return
            else:
                core.handle(msg)
            if core.check_at and core.check_at != self.armed_at:
                self.armed_at = core.check_at
                self.host.timers.at(core.check_at, self.actor_ref,
                                    ConsumerTimeoutCheck(core.check_at))
        except Exception:
            log.exception("channel %s failed", self.name)
            try:
                core.error(ChannelError(541, "INTERNAL_ERROR - internal error in channel"))
            except Exception:
                log.exception("channel %s could not close", self.name)
