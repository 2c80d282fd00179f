"""Channel actor: the shell around actors/core/channel.py (rabbit_channel.erl's process).

Receives whole commands from its Reader, deliveries/confirms/credit from queues and replies from
the node; the core decides, this shell sends: frames to the Writer, messages over the
Transport, block/unblock to the Reader.
"""

from __future__ import annotations

import itertools
import logging
import time

import pykka

from actors import events
from actors import messages as m
from actors.core import channel_dispatch
from actors.core.channel import ChannelCore
from actors.core.errors import ChannelError
from actors.runtime import LightActor

log = logging.getLogger("leveret.channel")

_incarnations = itertools.count(1)  # a reopened channel number gets a new address


class _Out:
    def __init__(self, actor: "Channel"):
        self.actor = actor
        self.writer = actor.writer
        self.transport = actor.host.transport
        self.send = self.transport.send

    def write(self, data, sent=None):
        if data or sent:
            _tell(self.writer, m.Write(data, [((q, self.actor.address), n) for q, n in sent]
                                       if sent else None))

    def is_dead(self, address):
        return self.transport.is_dead(address.partition("#")[0])

    def close_connection(self, code, text, class_id, method_id):
        _tell(self.actor.reader, m.CloseConnection(code, text, class_id, method_id))

    def block(self):
        _tell(self.actor.reader, m.Block(self.actor.number, True))

    def unblock(self):
        _tell(self.actor.reader, m.Block(self.actor.number, False))

    def closed(self):
        _tell(self.actor.reader, m.ChannelFinished(self.actor.number, self.actor.actor_ref))


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
        self.core = ChannelCore(number, self.address, conn, host.replica, _Out(self),
                                host.config.credit_initial, events,
                                credit_initial_bytes=host.config.credit_initial_bytes,
                                consumer_timeout=host.config.consumer_timeout,
                                consumer_timeout_action=host.config.consumer_timeout_action,
                                clock=time.monotonic)
        self.armed_at = 0  # the consumer-timeout check the timer will tell us of (ms), 0 = none

    def on_start(self):
        self.host.transport.register(self.name, self.actor_ref)
        self.host.register_channel(self.address, self.actor_ref)

    def on_stop(self):
        self.host.transport.unregister(self.name)
        self.host.unregister_channel(self.address, self.core.stats)

    def on_receive(self, msg):
        core = self.core
        try:
            if channel_dispatch.handle(core, msg, _now_ms):
                pass
            elif isinstance(msg, ConsumerTimeoutCheck):
                if msg.at == self.armed_at:  # else an earlier arming's, superseded
                    self.armed_at = 0
                    core.consumer_timeout_check(_now_ms())
            elif isinstance(msg, m.Terminate):
                core.terminate()
                self.stop()
                return
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
