"""The events the channel core emits about a publish's way: a direct reply-to delivery (S3) as a
delivery to the reply consumer, the alternate exchanges a publish went through, and the W3C
`traceparent` header of the publish. Without Spark (the job's side: tests/unit/analysis)."""

from __future__ import annotations

import gc

import msgpack

from actors import messages as m
from actors.core.channel import ChannelCore, ConnInfo
from spark_analysis import schema
from core_fakes import NODE, ChannelOut, cmd, make_replica, publish
from protocol import methods as am

RUN = "ipc:///var/lib/leveret/run"
A = f"{RUN}/conn-0-1.sock#ch/1/1/1"  # the requesting client's channel
B = f"{RUN}/conn-1-1.sock#ch/2/1/2"  # the RPC server's channel
PSEUDO = "amq.rabbitmq.reply-to"


class Recorder:
    """An event log that keeps what is emitted (the shape of actors.events)."""

    def __init__(self):
        self.got: list = []
        self.raw: list = []  # the values put() was given, as given
        self.synced_at: list = []  # len(got) at each sync()

    @staticmethod
    def enabled() -> bool:
        return True

    def emit(self, kind, msg_id=None, **fields) -> None:
        self.got.append((kind, msg_id, fields))

    @staticmethod
    def keeps(msg_id) -> bool:
        return True

    def put(self, kind, msg_id, values) -> None:
        """The hot kinds' positional values, named as a file's reader names them (through
        msgpack: tuples come back as lists)."""
        self.raw.append(values)
        values = msgpack.unpackb(msgpack.packb(values))
        self.got += [(k, msg_id, fields) for k, fields in schema.named(kind, values)]

    def put_published(self, msg_id, values) -> None:
        self.put("published", msg_id, values)

    def sync(self) -> None:
        """events_sync's seam: how many events had been emitted at each call."""
        self.synced_at.append(len(self.got))

    def of(self, kind) -> list:
        return [(mid, f) for k, mid, f in self.got if k == kind]


def channel(address, replica, events, owner):
    out = ChannelOut()
    conn = ConnInfo(owner, "guest", "/", 131072, {"consumer_cancel_notify": True}, NODE)
    return ChannelCore(1, address, conn, replica, out.port(events=events)), out


def send(core, *methods_or_cmds):
    core.handle_commands([cmd(x) if isinstance(x, am.Method) else x for x in methods_or_cmds])


def test_a_direct_reply_is_a_delivery_to_the_reply_consumer__S3():
    r = make_replica("rpc")
    ev_a, ev_b = Recorder(), Recorder()
    a, aout = channel(A, r, ev_a, "conn-a")
    b, bout = channel(B, r, ev_b, "conn-b")
    send(a, am.BasicConsume(queue=PSEUDO, consumer_tag="rc", no_ack=True))
    name = a.reply_consumer[1]
    send(b, publish(name, b"answer", correlation_id="c1"))
    (mid, routed), = ev_b.of("routed")
    assert routed["queues"] == [name] and not ev_b.of("unroutable")
    (msg,) = [x for _, x in bout.sends() if isinstance(x, m.DirectReply)]
    assert msg.msg_id == mid
    tag = a.next_tag
    a.on_direct_reply(msg)
    assert ev_a.of("delivered") == [(mid, dict(
        actor="channel", vhost="/", queue=name, connection="conn-a", channel=1,
        consumer_tag="rc", delivery_tag=tag, redelivered=False, no_ack=True))]


def test_a_reply_that_reaches_nobody_stays_unroutable__S3():
    r = make_replica()
    ev = Recorder()
    b, _ = channel(B, r, ev, "conn-b")
    send(b, publish(PSEUDO + ".nonsense", b"answer"))
    assert not ev.of("routed") and len(ev.of("unroutable")) == 1


def test_routed_names_the_alternate_exchanges_it_went_through():
    r = make_replica("kept", "caught")
    router = r.router
    router.declare_exchange("/", "last", "fanout")
    router.bind("/", "last", "queue", "caught", "")
    router.declare_exchange("/", "ae", "direct", arguments={"alternate-exchange": "last"})
    router.declare_exchange("/", "main", "direct", arguments={"alternate-exchange": "ae"})
    router.bind("/", "main", "queue", "kept", "k")
    ev = Recorder()
    c, _ = channel(A, r, ev, "conn-a")
    send(c, publish("k", b"1", exchange="main"), publish("other", b"2", exchange="main"))
    (_, first), (_, second) = ev.of("routed")
    assert first["queues"] == ["kept"] and "alternate_exchanges" not in first
    assert second["queues"] == ["caught"] and second["alternate_exchanges"] == ["ae", "last"]


def test_an_unroutable_publish_names_the_alternate_exchange_it_tried():
    r = make_replica()
    r.router.declare_exchange("/", "ae", "fanout")
    r.router.declare_exchange("/", "main", "direct", arguments={"alternate-exchange": "ae"})
    ev = Recorder()
    c, _ = channel(A, r, ev, "conn-a")
    send(c, publish("x", b"1", exchange="main"))
    (_, f), = ev.of("unroutable")
    assert f["alternate_exchanges"] == ["ae"]


def test_publish_received_carries_the_traceparent_header():
    r = make_replica("q")
    ev = Recorder()
    c, _ = channel(A, r, ev, "conn-a")
    tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    send(c, publish("q", b"1", headers={"traceparent": tp}), publish("q", b"2"))
    (_, traced), (_, plain) = ev.of("publish_received")
    assert traced["traceparent"] == tp
    assert "traceparent" not in plain


def test_alternate_exchanges_are_looked_up_again_after_a_metadata_change():
    r = make_replica("kept", "caught")
    r.router.declare_exchange("/", "ae", "fanout")
    r.router.bind("/", "ae", "queue", "caught", "")
    r.router.declare_exchange("/", "main", "direct", arguments={"alternate-exchange": "ae"})
    r.router.bind("/", "main", "queue", "kept", "k")
    ev = Recorder()
    c, _ = channel(A, r, ev, "conn-a")
    send(c, publish("other", b"1", exchange="main"), publish("other", b"2", exchange="main"))
    r.router.bind("/", "main", "queue", "kept", "other")
    r.version += 1  # (as Replica.apply does for a binding that reaches the worker)
    send(c, publish("other", b"3", exchange="main"))
    hops = [(f["queues"], f.get("alternate_exchanges")) for _, f in ev.of("routed")]
    assert hops == [(["caught"], ["ae"]), (["caught"], ["ae"]), (["kept"], None)]


def test_a_publish_buffers_no_container_the_garbage_collector_must_walk():
    # a list in a buffered record keeps it tracked, and the collector's full passes then walk
    # every record held between two writes of the log (measured: most of full's cost)
    r = make_replica("kept", "caught")
    r.router.declare_exchange("/", "ae", "fanout")
    r.router.bind("/", "ae", "queue", "caught", "")
    r.router.declare_exchange("/", "main", "direct", arguments={"alternate-exchange": "ae"})
    r.router.bind("/", "main", "queue", "kept", "k")
    ev = Recorder()
    c, _ = channel(A, r, ev, "conn-a")
    send(c, am.ConfirmSelect(), publish("k", b"1", exchange="main"),
         publish("x", b"2", exchange="main", message_id="m", delivery_mode=2),
         publish("nowhere", b"3", mandatory=True))
    assert {k for k, _, _ in ev.got} == {"publish_received", "routed", "unroutable", "returned",
                                         "confirmed"}
    gc.collect()
    gc.collect()  # (a pass may look at a tuple before the tuple inside it)
    assert len(ev.raw) == 6 and not [v for v in ev.raw if gc.is_tracked(v)]  # 2 published


class Sampled(Recorder):
    """sampled:N as the channel sees it: only the messages `keep` names are kept."""

    def __init__(self, keep):
        super().__init__()
        self.keep = keep

    def keeps(self, msg_id) -> bool:
        return self.keep(msg_id)


def test_a_message_sampling_leaves_out_gets_no_event_and_a_transient_one_no_id():
    r = make_replica("q")
    ev = Sampled(lambda mid: False)
    c, out = channel(A, r, ev, "conn-a")
    send(c, am.ConfirmSelect(), publish("q", b"t"), publish("q", b"p", delivery_mode=2))
    c.flush()
    items = [it for _, x in out.sends() if isinstance(x, m.Publish) for it in x.items]
    assert [it.msg_id is None for it in items] == [True, False]  # the store needs the id
    assert ev.got == []
    kept = Sampled(lambda mid: True)
    c, out = channel(A, r, kept, "conn-a")
    send(c, publish("q", b"t"))
    c.flush()
    (item,) = [it for _, x in out.sends() if isinstance(x, m.Publish) for it in x.items]
    assert [k for k, _, _ in kept.got] == ["publish_received", "routed"]
    assert kept.got[0][1] == item.msg_id is not None
