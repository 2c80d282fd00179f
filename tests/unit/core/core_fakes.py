"""Fakes for the sans-IO tests of the queue, channel and connection cores.

No sockets, no processes, no actors: every `out`/`shell` here only records what a core asked
for, the way actors/queue/queue_process.py (Queue), actors/connection/channel_process.py (Channel) and
actors/connection/reader.py (Reader) would carry it out, and gives the core its port
(`port()`: QueuePort, ChannelPort, ConnectionPort) built by the port's own `of`. `Wire` connects
one ChannelCore to real QueueCores through an in-memory FIFO that gives each message to the
core's `handle`, exactly as the actor shells do, for the token/credit protocols that need both
sides.
"""

from __future__ import annotations

from collections import deque
from types import SimpleNamespace

from actors import messages as m
from actors.config import Config
from actors.core import NO_EVENTS
from actors.core.channel import ChannelCore, ChannelPort, ConnInfo
from actors.core.connection import ConnectionPort
from actors.core.permissions import AuthDB
from actors.naming import queue_actor_name
from actors.core.queue import QueueCore, QueuePort
from actors.core.queue_settings import parse as queue_settings
from actors.queue.dead_letter_publish import dead_letter_publish
from actors.replica import Replica
from protocol import methods as am
from protocol.frames import (BodyFrame, Command, CommandAssembler, FrameDecoder, HeaderFrame,
                             MethodFrame, encode_method)
from protocol.properties import BasicProperties

NODE = "node#meta"  # the node's metadata actor address
CH = "w1#ch/1/1/1"  # the channel's own address
OWNER = "w1/1"  # connection id


# --- frames ---------------------------------------------------------------------------------
def decode(data: bytes) -> list:
    """Frames written by a core -> whole Commands (content reassembled)."""
    dec = FrameDecoder(expect_header=False)
    dec.feed(data)
    asm = CommandAssembler()
    out = []
    for frame in dec.frames():
        if isinstance(frame, (MethodFrame, HeaderFrame, BodyFrame)):
            cmd = asm.process(frame)
            if cmd is not None:
                out.append(cmd)
        else:
            out.append(frame)
    assert dec.buffered == 0, "a partial frame was written"
    return out


def methods(data: bytes) -> list:
    return [c.method for c in decode(data) if isinstance(c, Command)]


def cmd(method, channel=1) -> Command:
    return Command(channel, method)


def publish(rk, body=b"x", exchange="", mandatory=False, channel=1, **props) -> Command:
    raw = BasicProperties(**props).encode()
    return Command(channel, am.BasicPublish(exchange=exchange, routing_key=rk,
                                            mandatory=mandatory), raw, body)


# --- queue core -----------------------------------------------------------------------------
class FakeMirrors:
    """A master's mirrors as QueuePort.of takes them (actors/queue/mirror.py's Masters):
    unmirrored unless `wait` is set. What left the queue for good (`forget_messages`, every
    message, stored or not) goes into the effects' record, in order, as
    "mirror_forget_messages"; what entered is kept apart (it would be every message)."""

    def __init__(self, calls: list):
        self.calls = calls  # the QueueOut's record
        self.wait = None  # (batch, low) confirm_batch answers; None: no mirror to wait for
        self.enqueued_ids: list = []  # seq_ids of the messages they were sent

    def enqueued(self, msg, now):
        self.enqueued_ids.append(msg.seq_id)

    def forget_messages(self, msgs):
        self.calls.append(("mirror_forget_messages", list(msgs)))

    def confirm_batch(self):
        return self.wait


class PageRequests:
    """The queue's `out` as far as paging (actors/core/paging.py) uses it: what was asked of
    the backing queue, in order."""

    def __init__(self):
        self.calls = []

    def page_in(self, after_seq, n, priority):
        self.calls.append(("page_in", after_seq, n, priority))

    def drop_paged(self, after_seq, n, priority):
        self.calls.append(("drop_paged", after_seq, n, priority))

    def purge_paged(self, after_seq, priority):
        self.calls.append(("purge_paged", after_seq, priority))


class QueueOut:
    """The Queue actor side of QueueCore: records every effect, in order; `port()` is what
    the core gets, its clock (`now_ms`) reading `now`."""

    NAMES = ("deliver", "confirm", "reply", "get_reply", "consumer_gone", "credit", "demand",
             "release",
             "persist", "record_delivery", "forget", "dead_letter", "delete_self", "schedule",
             "page_in", "purge_paged", "drop_paged")

    def __init__(self):
        self.calls: list = []
        self.now = 0  # what the port's clock answers (monotonic ms)
        self.mirrors = FakeMirrors(self.calls)

    def now_ms(self) -> int:
        return self.now

    def port(self, **given) -> QueuePort:
        return QueuePort.of(self, self.mirrors, **given)

    def __getattr__(self, name):
        if name not in self.NAMES:
            raise AttributeError(name)

        def effect(*args):
            self.calls.append((name, *args))
        return effect

    def of(self, name) -> list:
        return [c[1:] for c in self.calls if c[0] == name]

    def names(self) -> list:
        return [c[0] for c in self.calls]

    def left(self) -> list:
        """[(msgs,)]: each batch of messages that left the queue for good, stored or not (the
        backing queue's `forget` gets the stored ones of it)."""
        return self.of("mirror_forget_messages")

    def delivered(self, channel=None) -> list:
        """[(channel, consumer tag, body, redelivered)] in delivery order."""
        got = []
        for ch, items, bodies in self.of("deliver"):
            if channel is None or ch == channel:
                got += [(ch, d.consumer_tag, body, d.redelivered)
                        for d, body in zip(items, bodies)]
        return got

    def clear(self):
        self.calls.clear()


# --- channel core ---------------------------------------------------------------------------
class ChannelOut:
    """The Channel actor side of ChannelCore, recorded; `port()` is what the core gets, its
    clock (`now_ms`) reading `now`."""

    def __init__(self):
        self.events: list = []  # ("write", bytes, sent) | ("send", addr, msg) | ...
        self.dead: set = set()  # addresses is_dead() answers True for
        self.now = 0  # what the port's clock answers (monotonic ms)

    def port(self, **given) -> ChannelPort:
        return ChannelPort.of(self, self.send, **given)

    def now_ms(self) -> int:
        return self.now

    def write(self, data, sent=None):
        self.events.append(("write", data, sent))

    def send(self, address, msg):
        self.events.append(("send", address, msg))

    def close_connection(self, code, text, class_id, method_id):
        self.events.append(("close_connection", code, text, class_id, method_id))

    def block(self):
        self.events.append(("block",))

    def unblock(self):
        self.events.append(("unblock",))

    def closed(self):
        self.events.append(("closed",))

    def is_dead(self, address):
        return address in self.dead

    # --- reading back ---
    def frames(self) -> list:
        return decode(b"".join(e[1] for e in self.events if e[0] == "write" and e[1]))

    def methods(self) -> list:
        return [c.method for c in self.frames() if isinstance(c, Command)]

    def sent(self, kind=None, to=None) -> list:
        return [e[2] for e in self.events if e[0] == "send" and
                (kind is None or isinstance(e[2], kind)) and (to is None or e[1] == to)]

    def sends(self) -> list:
        """[(address, msg)]"""
        return [(e[1], e[2]) for e in self.events if e[0] == "send"]

    def kinds(self) -> list:
        return [e[0] for e in self.events]

    def clear(self):
        self.events.clear()


def make_replica(*queues, exclusive_owner="") -> Replica:
    """A replica with vhost "/", guest/guest, and the given queues (name -> address w1#q/name)."""
    r = Replica()
    r.auth = AuthDB.default()
    r.router.add_vhost("/")
    for name in queues:
        r.router.add_queue("/", name)
        r.queues[("/", name)] = {"vhost": "/", "name": name, "durable": False,
                                 "exclusive": exclusive_owner, "auto_delete": False,
                                 "arguments": {}, "address": qaddr(name)}
    return r


def qaddr(name) -> str:
    return f"w2#{queue_actor_name('/', name)}"


def make_queue(args=None, out=None, now=0, policy=None, **kw) -> tuple:
    """A QueueCore "q" in vhost "/" declared with `args` (and `policy`), and its QueueOut;
    `events` and `random_bytes` go in its port, the rest of `kw` to the core."""
    out = out or QueueOut()
    out.now = now
    given = {k: kw.pop(k) for k in ("events", "random_bytes") if k in kw}
    return QueueCore("/", "q", queue_settings(args, policy), out.port(**given), now, **kw), out


def make_channel(*queues, number=1, capabilities=None, credit_initial=400, replica=None,
                 out=None):
    out = out or ChannelOut()
    conn = ConnInfo(OWNER, "guest", "/", 131072,
                    {"consumer_cancel_notify": True} if capabilities is None else capabilities,
                    NODE)
    core = ChannelCore(number, CH, conn, replica or make_replica(*queues), out.port(),
                       credit_initial)
    return core, out


def deliver_msg(queue, items, bodies=None):
    """A Deliver from queue `queue` (name): items [(ctag, seq_id, redelivered)]."""
    full = [m.Delivery(ctag, mid, red, "", "rk", b"\x00\x00") for ctag, mid, red in items]
    return m.Deliver(qaddr(queue), queue, full, bodies or [b"b%d" % it[1] for it in items])


def consume(core, out, queue, tag, no_ack=False, ok=True):
    """basic.consume answered by the queue; returns the Consume message sent."""
    core.handle_commands([cmd(am.BasicConsume(queue=queue, consumer_tag=tag, no_ack=no_ack))])
    sent = out.sent(m.Consume)[-1]
    core.on_reply(m.RpcReply(sent.req_id, ok, queue if ok else None,
                             0 if ok else 403, "" if ok else "ACCESS_REFUSED - no"))
    return sent


# --- channel + queues wired together --------------------------------------------------------
class _WireQueueOut(QueueOut):
    def __init__(self, wire, name):
        super().__init__()
        self.wire, self.name = wire, name

    def now_ms(self) -> int:
        return self.wire.now

    def __getattr__(self, name):
        record = super().__getattr__(name)
        wire, q = self.wire, qaddr(self.name)

        def effect(*args):
            record(*args)
            if name == "deliver":
                wire.post(args[0], m.Deliver(q, self.name, args[1], args[2]))
            elif name == "confirm" and args[0]:
                wire.post(args[0], m.Confirm(q, *args[1:]))  # (ok, reason when given)
            elif name == "reply":
                wire.post(args[0], m.RpcReply(args[1], args[2], *args[3:]))
            elif name == "get_reply":
                channel, req_id, item, count, body = args
                wire.post(channel, m.GetReply(req_id, q, item, count,
                                              [] if item is None else [body]))
            elif name == "consumer_gone":
                wire.post(args[0], m.ConsumerGone(q, args[1]))
            elif name == "credit" and args[0]:
                wire.post(args[0], m.Credit(q, args[1], args[2]))
            elif name == "demand":
                wire.post(args[0], m.Demand(q))
            elif name == "release":
                wire.post(args[0], m.Release(q, args[1]))
            elif name == "dead_letter" and wire.dead_letters:
                # the shell's own re-publish, through the wire's replica and mailbox
                core = wire.q(self.name)
                dead_letter_publish(SimpleNamespace(
                    core=core, vhost=core.vhost, qname=self.name, replica=wire.replica,
                    transport=SimpleNamespace(send=wire.post),
                    config=SimpleNamespace(host="127.0.0.1")), *args)
        return effect


class _WireChannelOut(ChannelOut):
    def __init__(self, wire):
        super().__init__()
        self.wire = wire

    def write(self, data, sent=None):
        super().write(data, sent)
        if sent and self.wire.auto_sent:
            for q, n in sent:  # the writer put them on the socket
                self.wire.post(q, m.Sent(CH, n))

    def send(self, address, msg):
        super().send(address, msg)
        self.wire.post(address, msg)


class Wire:
    """One ChannelCore and QueueCores (by name) joined by a FIFO mailbox, dispatched the way
    actors/connection/channel_process.py and actors/queue/queue_process.py do. `run()` delivers until nothing is
    left."""

    def __init__(self, queues: dict, auto_sent=True, events=NO_EVENTS, dead_letters=False):
        """events: the cores' event log (actors.events to write a real one); dead_letters:
        carry out the queues' dead_letter effects as the shell does (dead_letter_publish.py)."""
        self.mail: deque = deque()
        self.now = 1000
        self.auto_sent = auto_sent
        self.dead_letters = dead_letters
        self.out = _WireChannelOut(self)
        conn = ConnInfo(OWNER, "guest", "/", 131072, {"consumer_cancel_notify": True}, NODE)
        self.replica = make_replica(*queues)
        self.channel = ChannelCore(1, CH, conn, self.replica, self.out.port(events=events))
        self.queues = {}
        self.qouts = {}
        for name, args in queues.items():
            qo = _WireQueueOut(self, name)
            self.qouts[name] = qo
            self.queues[qaddr(name)] = QueueCore("/", name, queue_settings(args),
                                                 qo.port(events=events), self.now)

    def q(self, name) -> QueueCore:
        return self.queues[qaddr(name)]

    def post(self, address, msg):
        self.mail.append((address, msg))

    def client(self, *commands):
        self.post(CH, m.Commands(list(commands)))
        self.run()

    def run(self, limit=100000):
        while self.mail and limit:
            limit -= 1
            address, msg = self.mail.popleft()
            if address == CH:
                self._to_channel(msg)
            elif address in self.queues:
                self._to_queue(self.queues[address], msg)
        assert not self.mail, "message loop did not settle"

    def _to_channel(self, msg):
        self.channel.handle(msg)

    def _to_queue(self, core: QueueCore, msg):
        core.handle(msg)
        while core.ready_count and core.consumers and core.run(self.now):
            pass

    # --- the client's view ---
    def deliveries(self) -> list:
        """[(delivery_tag, consumer_tag, body, redelivered)] written so far."""
        return [(c.method.delivery_tag, c.method.consumer_tag, c.body, c.method.redelivered)
                for c in self.out.frames()
                if isinstance(c, Command) and isinstance(c.method, am.BasicDeliver)]


# --- connection core ------------------------------------------------------------------------
class FakeShell:
    """What ConnectionCore calls on its Reader, recorded; `port()` is what the core gets."""

    def __init__(self):
        self.events: list = []
        self.channels: dict = {}  # number -> ConnInfo
        self.tracked: list = []  # (what, args, wait): counts told to the node (limits)

    def write(self, data):
        self.events.append(("write", data))

    def opened(self, heartbeat):
        self.events.append(("opened", heartbeat))

    def open_channel(self, number, info):
        self.channels[number] = info
        self.events.append(("open_channel", number))

    def track_connection(self, vhost, user, wait):
        self.tracked.append(("connection", (vhost, user), wait))

    def track_channel(self, number, wait):
        self.tracked.append(("channel", number, wait))

    def channel_commands(self, number, commands):
        self.events.append(("commands", number, list(commands)))

    def forget_channel(self, number):
        self.channels.pop(number, None)
        self.events.append(("forget_channel", number))

    def channel_open(self, number):
        return number in self.channels

    def channel_count(self):
        return len(self.channels)

    def close_after(self, seconds):
        self.events.append(("close_after", seconds))

    def throttle(self, on):
        self.events.append(("throttle", on))

    def terminate(self, why, linger=0.0):
        self.events.append(("terminate", why) if not linger else ("terminate", why, linger))

    def port(self) -> ConnectionPort:
        return ConnectionPort.of(self, NODE)

    # --- reading back ---
    def written(self) -> bytes:
        return b"".join(e[1] for e in self.events if e[0] == "write")

    def methods(self) -> list:
        return methods(self.written())

    def kinds(self) -> list:
        return [e[0] for e in self.events]

    def clear(self):
        self.events.clear()


def config(**kw) -> Config:
    return Config(**kw)


def frame(channel, method) -> bytes:
    return encode_method(channel, method)
