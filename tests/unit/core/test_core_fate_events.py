"""The events the cores emit where a message's fate changes outside its own copy events: a
purge or deletion (one event, however many copies, paged ones included), a transaction's end,
a dead-lettering's link, a nack's reason. Without Spark: the job's side is
tests/unit/analysis/test_fates_job.py."""

from __future__ import annotations

import msgpack

from actors.core.queue import QueueCore
from actors.core.queue_settings import parse as queue_settings
from actors.messages import PublishItem
from spark_analysis import schema
from core_fakes import QueueOut, Wire, cmd, publish
from protocol import methods as am

PUB = "w1#ch/9/1/3"


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


def mk(args=None, events=None, page_bytes=0):
    out = QueueOut()
    return QueueCore("/", "q", queue_settings(args), out.port(events=events or Recorder()), 0,
                     page_bytes=page_bytes, page_size=2), out


def pub(q, n, pub_seq=0, body=b"bbbbbb"):
    q.publish(PUB, [PublishItem(pub_seq, "", "q", b"\x00\x00", False, 0, -1, bytes([i]) * 16)
                    for i in range(n)], [body] * n, 0)


def test_a_purge_is_one_event_whatever_it_removes_paged_messages_included():
    ev = Recorder()
    q, out = mk(events=ev, page_bytes=10)
    pub(q, 6)
    assert q.paging.paged and out.of("page_in") == []  # some are in the index only
    assert q.purge() == 6
    ((mid, fields),) = ev.of("purged")
    assert mid is None and (fields["queue"], fields["count"], fields["seq_below"]) == ("q", 6, 7)


def test_a_delete_says_why_and_is_not_also_a_purge():
    ev = Recorder()
    q, _ = mk(events=ev)
    pub(q, 2)
    assert q.delete(False, False, "x-expires") == 2
    q.purge()  # what the shell does next
    ((_, fields),) = ev.of("queue_deleted")
    assert (fields["reason"], fields["count"], fields["unacked"], fields["seq_below"]) == (
        "x-expires", 2, 0, 3)
    assert ev.of("purged") == []


def test_enqueued_says_durable():
    ev = Recorder()
    q, _ = mk(events=ev)
    pub(q, 1)
    assert [f["durable"] for _, f in ev.of("enqueued")] == [False]


def test_dead_lettering_names_the_copy_it_makes():
    ev = Recorder()
    q, out = mk({"x-dead-letter-exchange": "dlx", "x-max-length": 1}, events=ev)
    pub(q, 2)  # drop-head: the first is dead-lettered
    ((mid, fields),) = ev.of("dead_lettered")
    (msg, reason, child), = out.of("dead_letter")
    assert (mid, fields["reason"], fields["exchange"], fields["new_msg_id"], reason) == (
        bytes([0]) * 16, "maxlen", "dlx", child, "maxlen")
    assert len(child) == 16 and child != mid


def test_a_nack_carries_its_reason_only_while_events_are_on():
    on, out_on = mk({"x-max-length": 0, "x-overflow": "reject-publish"})
    pub(on, 1, pub_seq=5)
    assert out_on.of("confirm") == [(PUB, [5], False, "reject-publish")]
    off, out_off = mk({"x-max-length": 0, "x-overflow": "reject-publish"})
    off.events = type("Off", (), {"enabled": staticmethod(lambda: False)})()
    pub(off, 1, pub_seq=5)
    assert out_off.of("confirm") == [(PUB, [5], False)]


def test_tx_rollback_and_commit_list_their_publishes():
    ev = Recorder()
    w = Wire({"q": {}}, events=ev)
    w.client(cmd(am.TxSelect()), publish("q", message_id="r"), cmd(am.TxRollback()),
             publish("q", message_id="c"), cmd(am.TxCommit()))
    (rb,), (cm,) = ev.of("tx_rolled_back"), ev.of("tx_committed")
    published = [mid for mid, _ in ev.of("publish_received")]
    assert rb[1]["msg_ids"] == published[:1] and rb[1]["publishes"] == 1
    assert cm[1]["msg_ids"] == published[1:] and cm[1]["settles"] == 0
    assert [mid for mid, _ in ev.of("enqueued")] == published[1:]


def test_a_publisher_nack_event_says_why():
    ev = Recorder()
    w = Wire({"full": {"x-max-length": 0, "x-overflow": "reject-publish"}}, events=ev)
    w.client(cmd(am.ConfirmSelect()), publish("full", message_id="n"))
    ((_, fields),) = ev.of("nacked_to_publisher")
    assert fields["reason"] == "reject-publish"


def test_the_channel_syncs_the_log_before_a_confirm_leaves():
    """events_sync: the channel calls sync() after its confirmed events and before the
    basic.ack is written (the log decides whether that writes anything)."""
    ev = Recorder()
    w = Wire({"q": {}}, events=ev)
    w.client(cmd(am.ConfirmSelect()), publish("q", message_id="c"))
    at = next(i for i, e in enumerate(ev.got) if e[0] == "confirmed")
    assert ev.synced_at and ev.synced_at[-1] > at
