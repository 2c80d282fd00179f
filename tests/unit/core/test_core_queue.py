"""actors/core/queue.py (QueueCore) without IO: fed calls as actors/queue/queue_process.py makes them, its
effects recorded by a fake `out` (tests/unit/core/core_fakes.py)."""

import pytest

from actors.core.errors import ChannelError
from actors.core.credit_flow import MORE as FLOW_MORE, MORE_BYTES
from actors.core.consumers import activity
from actors.core.queue import Msg
from actors.core.queue_stats import DEAD_LETTERED
from actors.messages import Delivery, PublishItem
from core_fakes import make_queue

CH1, CH2, PUB = "w1#ch/1/1/1", "w1#ch/1/2/2", "w1#ch/9/1/3"
ACK, REQUEUE, DISCARD = 0, 1, 2


def mk(args=None, now=0, **kw):
    return make_queue(args, now=now, **kw)


def pub(q, *bodies, sender=PUB, now=0, seqs=None, persistent=False, priority=0, expiry=-1):
    items = [PublishItem((seqs[i] if seqs else 0), "x", "rk", b"\x00\x00", persistent, priority,
                         expiry) for i in range(len(bodies))]
    q.publish(sender, items, list(bodies), now)


def consume(q, ch=CH1, tag="A", no_ack=False, prefetch=0, channel_prefetch=0, now=0,
            exclusive=False):
    q.consume(ch, tag, no_ack, exclusive, prefetch, channel_prefetch, now)
    q.run(now)  # the shell runs the queue after every message


def bodies(out, ch=None):
    return [d[2] for d in out.delivered(ch)]


def ids_of(out, ch=CH1):
    """msg ids delivered to ch, in order."""
    got = []
    for c, items, _ in out.of("deliver"):
        if c == ch:
            got += [d.seq_id for d in items]
    return got


def ready_bodies(q):
    got = []
    for p in range(len(q.ready) - 1, -1, -1):
        got += [msg.body for msg in q.ready[p].items]
    return got


# --- delivery -------------------------------------------------------------------------------
def test_deliver_item_layout_and_batch():
    q, out = mk()
    pub(q, b"a", b"b", b"c")
    consume(q)
    assert out.of("deliver") == [(CH1, [Delivery("A", 1, False, "x", "rk", b"\x00\x00"),
                                        Delivery("A", 2, False, "x", "rk", b"\x00\x00"),
                                        Delivery("A", 3, False, "x", "rk", b"\x00\x00")],
                                  [b"a", b"b", b"c"])]
    assert q.stats() == {"messages": 3, "messages_ready": 0, "messages_unacknowledged": 3,
                         "consumers": 1}


def test_publish_without_consumer_stays_ready():
    q, out = mk()
    pub(q, b"a", b"b")
    assert out.of("deliver") == []
    assert q.info() == (2, 0)
    assert q.stats() == {"messages": 2, "messages_ready": 2, "messages_unacknowledged": 0,
                         "consumers": 0}


def test_round_robin_between_consumers():
    q, out = mk()
    consume(q, tag="A")
    consume(q, tag="B")
    consume(q, ch=CH2, tag="C")
    for i in range(6):
        pub(q, b"%d" % i)
    assert [(d[0], d[1], d[2]) for d in out.delivered()] == [
        (CH1, "A", b"0"), (CH1, "B", b"1"), (CH2, "C", b"2"),
        (CH1, "A", b"3"), (CH1, "B", b"4"), (CH2, "C", b"5")]


def test_consumer_prefetch_limits_unacked__P1():
    q, out = mk()
    pub(q, *[b"%d" % i for i in range(6)])
    consume(q, prefetch=2)
    assert bodies(out) == [b"0", b"1"]
    q.settle(CH1, ACK, [1], 0)
    assert bodies(out) == [b"0", b"1", b"2"]
    q.settle(CH1, ACK, [2, 3], 0)  # a multiple ack lets as many through
    assert bodies(out) == [b"0", b"1", b"2", b"3", b"4"]
    assert q.stats()["messages_unacknowledged"] == 2
    assert q.stats()["messages_ready"] == 1


def test_prefetch_zero_is_unlimited__P1():
    q, out = mk()
    pub(q, *[b"%d" % i for i in range(50)])
    consume(q, prefetch=0)
    assert len(out.delivered()) == 50


def test_prefetch_is_per_consumer__P2():
    q, out = mk()
    pub(q, *[b"%d" % i for i in range(10)])
    consume(q, tag="A", prefetch=1)
    consume(q, tag="B", prefetch=2)
    assert [(d[1], d[2]) for d in out.delivered()] == [("A", b"0"), ("B", b"1"), ("B", b"2")]


def test_no_ack_consumer_settles_at_once__A6():
    q, out = mk()
    pub(q, b"a", b"b", b"c")
    consume(q, no_ack=True, prefetch=1)  # prefetch does not apply to no_ack
    assert bodies(out) == [b"a", b"b", b"c"]
    # one batch per delivery run, not one message to the backing queue per delivery
    assert [[m.body for m in msgs] for (msgs,) in out.left()] == [[b"a", b"b", b"c"]]
    assert q.stats()["messages_unacknowledged"] == 0
    # acking it later does nothing: the queue does not know the id any more
    out.clear()
    q.settle(CH1, REQUEUE, [1], 0)
    assert q.ready_count == 0 and out.of("deliver") == []


def test_first_delivery_false_redelivery_true__A4():
    q, out = mk()
    pub(q, b"a")
    consume(q, tag="A")
    q.settle(CH1, REQUEUE, [1], 0)
    assert out.delivered() == [(CH1, "A", b"a", False), (CH1, "A", b"a", True)]


# --- settlement -----------------------------------------------------------------------------
def test_requeue_returns_to_original_position__A3():
    q, out = mk()
    pub(q, b"1", b"2", b"3", b"4", b"5")
    got = [q.get(CH1, False, 0) for _ in range(4)]
    assert [g[0][1] for g in got] == [1, 2, 3, 4]
    assert [g[2] for g in got] == [4, 3, 2, 1]  # message_count after the get
    q.settle(CH1, REQUEUE, [3], 0)
    assert ready_bodies(q) == [b"3", b"5"]
    q.settle(CH1, REQUEUE, [4, 1], 0)
    assert ready_bodies(q) == [b"1", b"3", b"4", b"5"]
    q.settle(CH1, REQUEUE, [2], 0)
    assert ready_bodies(q) == [b"1", b"2", b"3", b"4", b"5"]
    again = [q.get(CH1, True, 0) for _ in range(5)]
    assert [(g[1], g[0][2]) for g in again] == [
        (b"1", True), (b"2", True), (b"3", True), (b"4", True), (b"5", False)]


def test_settle_ack_forgets__A2():
    q, out = mk({"x-dead-letter-exchange": "dlx"})
    pub(q, b"a", b"b")
    consume(q)
    out.clear()
    q.settle(CH1, ACK, [1, 2], 0)
    assert [[m.seq_id for m in msgs] for (msgs,) in out.left()] == [[1, 2]]
    assert out.of("dead_letter") == []
    assert q.stats() == {"messages": 0, "messages_ready": 0, "messages_unacknowledged": 0,
                         "consumers": 1}


def test_settle_discard_drops_without_dlx__A3():
    q, out = mk()
    pub(q, b"a")
    consume(q)
    out.clear()
    q.settle(CH1, DISCARD, [1], 0)
    assert out.names() == ["mirror_forget_messages"]
    assert q.stats()["messages"] == 0


def test_settle_discard_dead_letters_with_dlx__A3():
    q, out = mk({"x-dead-letter-exchange": "dlx"})
    pub(q, b"a", b"b")
    consume(q)
    out.clear()
    q.settle(CH1, DISCARD, [2], 0)
    assert [(msg.body, reason) for msg, reason in out.of("dead_letter")] == [(b"b", "rejected")]
    assert [[m.body for m in msgs] for (msgs,) in out.left()] == [[b"b"]]
    assert q.stats()["messages"] == 1


def test_settle_from_a_channel_the_delivery_did_not_go_to_is_ignored():
    """A restarted queue (same address) must not take a settlement meant for an earlier
    incarnation's delivery as one for its own delivery of that seq_id to another channel."""
    q, out = mk()
    pub(q, b"a")
    consume(q)
    out.clear()
    q.settle(CH2, ACK, [1], 0)
    assert out.left() == []
    assert q.stats()["messages_unacknowledged"] == 1
    q.settle(CH1, ACK, [1], 0)
    assert q.stats()["messages"] == 0


def test_settle_unknown_or_twice_is_ignored():
    q, out = mk()
    pub(q, b"a")
    consume(q)
    q.settle(CH1, ACK, [1], 0)
    out.clear()
    q.settle(CH1, ACK, [1, 77], 0)
    q.settle(CH1, REQUEUE, [1], 0)
    assert out.calls == []
    assert q.stats()["messages"] == 0


def test_requeue_with_consumer_redelivers_at_once__A4():
    q, out = mk()
    pub(q, b"a", b"b")
    consume(q, prefetch=2)
    q.settle(CH1, REQUEUE, [2, 1], 0)
    assert out.delivered()[2:] == [(CH1, "A", b"a", True), (CH1, "A", b"b", True)]


# --- channel down ---------------------------------------------------------------------------
def test_channel_down_requeues_unacked_and_drops_consumers__A7():
    q, out = mk()
    pub(q, b"1", b"2", b"3", b"4")
    consume(q, ch=CH1, tag="A", prefetch=2)
    q.settle(CH1, ACK, [1], 0)  # acked: never redelivered
    assert ids_of(out, CH1) == [1, 2, 3]
    consume(q, ch=CH2, tag="B", prefetch=1)
    assert ids_of(out, CH2) == [4]
    q.channel_down(CH1, 0)
    assert q.info() == (2, 1)  # 2 and 3 back, only B left
    q.settle(CH2, ACK, [4], 0)
    q.settle(CH2, ACK, [2], 0)
    assert out.delivered(CH2) == [(CH2, "B", b"4", False), (CH2, "B", b"2", True),
                                  (CH2, "B", b"3", True)]
    assert q.stats()["messages_unacknowledged"] == 1


def test_channel_down_of_get_deliveries__A7():
    q, out = mk()
    pub(q, b"1", b"2")
    q.get(CH1, False, 0)
    q.channel_down(CH1, 0)
    assert ready_bodies(q) == [b"1", b"2"]
    assert q.get(CH2, True, 0)[0][2] is True


def test_channels_down_by_endpoint_prefix():
    q, out = mk()
    pub(q, b"1", b"2", b"3")
    consume(q, ch="w1#ch/a", tag="A", prefetch=1)
    consume(q, ch="w1#ch/b", tag="B", prefetch=1)
    consume(q, ch="w7#ch/c", tag="C", prefetch=1)
    q.channels_down("w1#", 0)
    assert [c.tag for c in q.consumers.values()] == ["C"]
    assert q.ready_count == 2
    assert set(q.channels) == {"w7#ch/c"}


# --- basic.get ------------------------------------------------------------------------------
def test_get_ignores_prefetch_and_counts__A9():
    q, out = mk({"x-max-priority": 2})
    assert q.get(CH1, False, 0) is None
    pub(q, b"a", b"b")
    consume(q, tag="A", prefetch=1, channel_prefetch=1)  # blocked on tokens
    item, body, count = q.get(CH1, False, 0)
    assert (item, body, count) == (Delivery("", 1, False, "x", "rk", b"\x00\x00"), b"a", 1)
    item, body, count = q.get(CH1, True, 0)
    assert (item.seq_id, body, count) == (2, b"b", 0)
    assert q.get(CH1, False, 0) is None
    assert q.stats()["messages_unacknowledged"] == 1  # the no_ack get is settled
    assert [[m.body for m in msgs] for (msgs,) in out.left()] == [[b"b"]]


# --- TTL ------------------------------------------------------------------------------------
def test_dead_lettered_counts_by_reason_and_strategy__A3():
    """What Prometheus' messages_dead_lettered_* count, where the queue decides: with a
    dead-letter exchange at_most_once, without one disabled."""
    q, _ = mk({"x-dead-letter-exchange": "dlx", "x-max-length": 1})
    pub(q, b"a", b"b")  # drop-head: a
    consume(q)
    q.settle(CH1, DISCARD, [2], 0)
    assert {k: n for k, n in q.dead_lettered.items() if n} == {
        "dead_lettered_maxlen_at_most_once": 1, "dead_lettered_rejected_at_most_once": 1}
    q, _ = mk({"x-message-ttl": 100})
    pub(q, b"a")
    q.tick(200)
    assert {k: n for k, n in q.dead_lettered.items() if n} == {
        "dead_lettered_expired_disabled": 1}
    assert set(q.dead_lettered) == set(DEAD_LETTERED)


def test_message_ttl_expires_on_tick_and_dead_letters():
    q, out = mk({"x-message-ttl": 100, "x-dead-letter-exchange": "dlx"})
    pub(q, b"a", now=0)
    pub(q, b"b", now=50)
    assert out.of("schedule") == [(100,)]
    q.tick(99)
    assert q.ready_count == 2
    q.tick(100)
    assert ready_bodies(q) == [b"b"]
    assert [(msg.body, r) for msg, r in out.of("dead_letter")] == [(b"a", "expired")]
    assert out.of("schedule")[-1] == (150,)
    q.tick(150)
    assert q.ready_count == 0


def test_per_message_expiration_takes_the_smaller_ttl():
    q, out = mk({"x-message-ttl": 1000})
    pub(q, b"short", expiry=10, now=0)
    pub(q, b"long", expiry=5000, now=0)
    assert [m.expires_at for m in q.ready[0].items] == [10, 1000]
    assert [m.ttl for m in q.ready[0].items] == [10, 5000]
    q.tick(10)
    assert ready_bodies(q) == [b"long"]
    assert out.of("dead_letter") == []  # no DLX: dropped
    assert [[m.body for m in msgs] for (msgs,) in out.left()] == [[b"short"]]


def test_expired_message_is_not_delivered_to_a_late_consumer():
    q, out = mk({"x-message-ttl": 100})
    pub(q, b"a", now=0)
    pub(q, b"b", now=90)
    consume(q, now=150)
    assert bodies(out) == [b"b"]
    assert [[m.body for m in msgs] for (msgs,) in out.left()] == [[b"a"]]


def test_ttl_zero_without_consumer_expires_at_once_and_confirms():
    q, out = mk({"x-message-ttl": 0, "x-dead-letter-exchange": "dlx"})
    pub(q, b"a", seqs=[7])
    assert q.ready_count == 0
    assert [(msg.body, r) for msg, r in out.of("dead_letter")] == [(b"a", "expired")]
    assert out.of("confirm") == [(PUB, [7], True)]


def test_ttl_zero_with_consumer_is_delivered():
    q, out = mk({"x-message-ttl": 0})
    consume(q)
    pub(q, b"a", now=5)
    q.tick(10_000)
    assert bodies(out) == [b"a"]
    assert out.of("dead_letter") == [] and q.stats()["messages_unacknowledged"] == 1


def test_ttl_zero_keeps_round_robin():
    q, out = mk({"x-message-ttl": 0})
    consume(q, tag="A")
    consume(q, tag="B")
    for i in range(4):
        pub(q, b"%d" % i)
    assert [d[1] for d in out.delivered()] == ["A", "B", "A", "B"]


# --- max length -----------------------------------------------------------------------------
def test_max_length_drop_head():
    q, out = mk({"x-max-length": 2, "x-dead-letter-exchange": "dlx"})
    pub(q, b"1", b"2", b"3", seqs=[1, 2, 3])
    assert ready_bodies(q) == [b"2", b"3"]
    assert [(msg.body, r) for msg, r in out.of("dead_letter")] == [(b"1", "maxlen")]
    assert out.of("confirm") == [(PUB, [1, 2, 3], True)]  # dropped ones are confirmed too


def test_max_length_counts_only_ready_messages():
    q, out = mk({"x-max-length": 1, "x-overflow": "reject-publish"})
    consume(q, prefetch=1)
    for seq in (1, 2, 3):
        pub(q, b"%d" % seq, seqs=[seq])
    assert bodies(out) == [b"1"]
    assert ready_bodies(q) == [b"2"]
    assert out.of("confirm") == [(PUB, [1], True), (PUB, [2], True), (PUB, [3], False)]


def test_max_length_reject_publish_batch_same_as_one_by_one__C6():
    q, out = mk({"x-max-length": 1, "x-overflow": "reject-publish"})
    consume(q, prefetch=1)
    pub(q, b"1", b"2", b"3", seqs=[1, 2, 3])
    assert bodies(out) == [b"1"]
    assert ready_bodies(q) == [b"2"]
    assert out.of("confirm") == [(PUB, [1, 2], True), (PUB, [3], False)]


def test_max_length_drop_head_batch_same_as_one_by_one():
    q, out = mk({"x-max-length": 1})
    consume(q, prefetch=1)
    pub(q, b"1", b"2", b"3")
    assert bodies(out) == [b"1"]
    assert ready_bodies(q) == [b"3"]


def test_max_length_reject_publish_nacks__C6():
    q, out = mk({"x-max-length": 2, "x-overflow": "reject-publish",
                 "x-dead-letter-exchange": "dlx"})
    pub(q, b"1", b"2", b"3", b"4", seqs=[1, 2, 3, 0])
    assert ready_bodies(q) == [b"1", b"2"]
    assert out.of("confirm") == [(PUB, [1, 2], True), (PUB, [3], False)]
    assert out.of("dead_letter") == []  # reject-publish does not dead-letter


def test_max_length_zero_reject_publish_nacks_everything__C6():
    q, out = mk({"x-max-length": 0, "x-overflow": "reject-publish"})
    consume(q)
    pub(q, b"1", seqs=[1])
    assert out.of("confirm") == [(PUB, [1], False)]
    assert out.of("deliver") == []


def test_max_length_reject_publish_dlx_dead_letters_refused():
    q, out = mk({"x-max-length": 1, "x-overflow": "reject-publish-dlx",
                 "x-dead-letter-exchange": "dlx"})
    pub(q, b"1", b"2", seqs=[1, 2])
    assert out.of("confirm") == [(PUB, [1], True), (PUB, [2], False)]
    [(msg, reason)] = out.of("dead_letter")
    assert (msg.body, msg.routing_key, reason) == (b"2", "rk", "maxlen")
    assert ready_bodies(q) == [b"1"]


def test_max_length_bytes_drop_head():
    q, out = mk({"x-max-length-bytes": 5})
    pub(q, b"aa", b"bb", b"cc")
    assert ready_bodies(q) == [b"bb", b"cc"]
    assert q.ready_bytes == 4


def test_max_length_bytes_reject_publish():
    q, out = mk({"x-max-length-bytes": 5, "x-overflow": "reject-publish"})
    pub(q, b"aa", b"bbb", b"c", seqs=[1, 2, 3])
    assert ready_bodies(q) == [b"aa", b"bbb"]
    assert out.of("confirm") == [(PUB, [1, 2], True), (PUB, [3], False)]


def test_requeue_over_max_length_drops_the_head():
    """docs/behaviour-tests.md #17: the requeued message goes back to the head and is dropped."""
    q, out = mk({"x-max-length": 2})
    pub(q, b"1")
    q.get(CH1, False, 0)
    pub(q, b"2", b"3")
    q.settle(CH1, REQUEUE, [1], 0)
    assert ready_bodies(q) == [b"2", b"3"]
    assert [[m.body for m in msgs] for (msgs,) in out.left()] == [[b"1"]]


def test_dropped_persistent_message_is_not_persisted_after_forget():
    q, out = mk({"x-max-length": 0})
    pub(q, b"a", seqs=[1], persistent=True)
    forgotten = [m.seq_id for (msgs,) in out.left() for m in msgs]
    assert forgotten == [1]
    persisted = [(i, m.seq_id) for i, c in enumerate(out.calls) if c[0] == "persist"
                 for m in c[1]]
    forget_at = out.names().index("mirror_forget_messages")
    assert all(i < forget_at for i, _ in persisted)  # persist (if any) before forget


# --- priorities -----------------------------------------------------------------------------
def test_priorities_highest_first_fifo_within():
    q, out = mk({"x-max-priority": 5})
    for body, p in ((b"a0", 0), (b"b5", 5), (b"c3", 3), (b"d5", 5), (b"e9", 9), (b"f0", 0)):
        q.publish(PUB, [PublishItem(0, "x", "rk", b"\x00\x00", False, p, -1)], [body], 0)
    assert q.ready[5].items[-1].priority == 5  # 9 clamps to the maximum
    consume(q)
    assert bodies(out) == [b"b5", b"d5", b"e9", b"c3", b"a0", b"f0"]


def test_priority_ignored_without_max_priority():
    q, out = mk()
    q.publish(PUB, [PublishItem(0, "x", "rk", b"", False, 9, -1),
                    PublishItem(0, "x", "rk", b"", False, 0, -1)],
              [b"a", b"b"], 0)
    consume(q)
    assert bodies(out) == [b"a", b"b"]


def test_requeue_within_priority_keeps_position__A3():
    q, out = mk({"x-max-priority": 2})
    for body, p in ((b"l1", 0), (b"h1", 2), (b"h2", 2), (b"l2", 0)):
        q.publish(PUB, [PublishItem(0, "x", "rk", b"", False, p, -1)], [body], 0)
    got = [q.get(CH1, False, 0) for _ in range(3)]
    assert [g[1] for g in got] == [b"h1", b"h2", b"l1"]
    q.settle(CH1, REQUEUE, [got[2][0][1], got[0][0][1]], 0)
    assert ready_bodies(q) == [b"h1", b"l1", b"l2"]


# --- auto-delete and x-expires --------------------------------------------------------------
def test_auto_delete_after_last_consumer_cancelled():
    q, out = mk(auto_delete=True)
    assert q.cancel(CH1, "nobody", 0) is False
    assert out.of("delete_self") == []  # never had a consumer
    consume(q, tag="A")
    consume(q, tag="B")
    assert q.cancel(CH1, "A", 0) is True
    assert out.of("delete_self") == []
    q.cancel(CH1, "B", 0)
    assert out.of("delete_self") == [("auto-delete: last consumer cancelled",)]


def test_auto_delete_when_consumer_channel_goes_down():
    q, out = mk(auto_delete=True)
    consume(q)
    q.channel_down(CH1, 0)
    assert len(out.of("delete_self")) == 1


def test_not_auto_delete_keeps_queue():
    q, out = mk()
    consume(q)
    q.cancel(CH1, "A", 0)
    q.channel_down(CH1, 0)
    assert out.of("delete_self") == []


def test_x_expires_deletes_unused_queue():
    q, out = mk({"x-expires": 1000}, now=0)
    assert out.of("schedule") == [(1000,)]
    q.tick(999)
    assert out.of("delete_self") == []
    q.tick(1000)
    assert out.of("delete_self") == [("x-expires: unused for 1000 ms",)]


def test_x_expires_use_restarts_timer_and_consumers_keep_it():
    q, out = mk({"x-expires": 1000}, now=0)
    q.get(CH1, True, 600)  # a use
    q.tick(1000)
    assert out.of("delete_self") == []
    assert out.of("schedule")[-1] == (1600,)
    consume(q, now=1100)
    q.tick(5000)
    assert out.of("delete_self") == []
    q.cancel(CH1, "A", 5000)
    q.tick(5999)
    assert out.of("delete_self") == []
    q.tick(6000)
    assert len(out.of("delete_self")) == 1


def test_publish_is_not_a_use_for_x_expires():
    q, out = mk({"x-expires": 1000}, now=0)
    pub(q, b"a", now=900)
    q.tick(1000)
    assert len(out.of("delete_self")) == 1


# --- admin ----------------------------------------------------------------------------------
def test_purge_drops_ready_keeps_unacked():
    q, out = mk({"x-dead-letter-exchange": "dlx"})
    pub(q, b"1", b"2", b"3")
    q.get(CH1, False, 0)
    out.clear()
    assert q.purge() == 2
    assert [[m.body for m in msgs] for (msgs,) in out.left()] == [[b"2", b"3"]]
    assert out.of("dead_letter") == []
    assert q.stats() == {"messages": 1, "messages_ready": 0, "messages_unacknowledged": 1,
                         "consumers": 0}
    assert q.purge() == 0


def test_delete_if_unused_and_if_empty():
    q, out = mk()
    pub(q, b"1")
    consume(q, prefetch=1)
    pub(q, b"2")
    with pytest.raises(ChannelError) as e:
        q.delete(True, False)
    assert (e.value.reply_code, e.value.text) == (
        406, "PRECONDITION_FAILED - queue 'q' in vhost '/' in use")
    with pytest.raises(ChannelError) as e:
        q.delete(False, True)
    assert (e.value.reply_code, e.value.text) == (
        406, "PRECONDITION_FAILED - queue 'q' in vhost '/' not empty")
    assert q.deleted is False and len(q.consumers) == 1


def test_delete_cancels_consumers_and_counts_ready():
    q, out = mk()
    consume(q, tag="A", prefetch=1)
    consume(q, ch=CH2, tag="B", prefetch=1)
    pub(q, b"1", b"2", b"3")
    assert q.delete(False, False) == 1
    assert out.of("consumer_gone") == [(CH1, "A"), (CH2, "B")]
    assert q.deleted and not q.consumers


def test_delete_if_empty_ignores_unacked():
    q, out = mk()
    pub(q, b"1")
    q.get(CH1, False, 0)
    assert q.delete(False, True) == 0


def test_exclusive_consumer():
    q, out = mk()
    consume(q, tag="A")
    with pytest.raises(ChannelError) as e:
        q.consume(CH2, "X", False, True, 0, 0, 0)
    assert e.value.reply_code == 403
    assert e.value.text == "ACCESS_REFUSED - queue 'q' in vhost '/' in exclusive use"
    q.cancel(CH1, "A", 0)
    q.consume(CH2, "X", False, True, 0, 0, 0)
    with pytest.raises(ChannelError):
        q.consume(CH1, "B", False, False, 0, 0, 0)
    assert list(q.consumers) == [(CH2, "X")]


# --- writer credit (delivery_window) --------------------------------------------------------
def test_delivery_window_limits_in_flight_until_sent():
    q, out = mk(delivery_window=2)
    pub(q, *[b"%d" % i for i in range(5)])
    consume(q, no_ack=True)
    assert bodies(out) == [b"0", b"1"]
    q.sent(CH1, 1, 0)
    assert bodies(out) == [b"0", b"1", b"2"]
    q.sent(CH1, 2, 0)
    assert bodies(out) == [b"0", b"1", b"2", b"3", b"4"]
    q.sent("w9#unknown", 5, 0)  # an unknown channel is ignored
    assert q.channels[CH1].in_flight == 2


def test_delivery_window_is_per_channel():
    q, out = mk(delivery_window=1)
    pub(q, b"0", b"1", b"2")
    consume(q, ch=CH1, tag="A")
    consume(q, ch=CH2, tag="B")
    assert [(d[0], d[2]) for d in out.delivered()] == [(CH1, b"0"), (CH2, b"1")]
    q.sent(CH2, 1, 0)
    assert [(d[0], d[2]) for d in out.delivered()] == [(CH1, b"0"), (CH2, b"1"), (CH2, b"2")]


def test_run_budget_reports_work_left():
    q, out = mk()
    pub(q, *[b"%d" % i for i in range(5)])
    q.consume(CH1, "A", False, False, 0, 0, 0)
    assert q.run(0, budget=2) is True
    assert len(out.delivered()) == 2
    assert q.run(0, budget=3) is False
    assert len(out.delivered()) == 5


# --- publisher credit and confirms ----------------------------------------------------------
def test_publisher_credit_bumped_every_flow_more():
    q, out = mk()
    assert FLOW_MORE == 200
    for _ in range(FLOW_MORE - 1):
        pub(q, b"m")
    assert out.of("credit") == []
    pub(q, b"m", b"m")
    assert out.of("credit") == [(PUB, FLOW_MORE + 1, FLOW_MORE + 1)]
    for _ in range(FLOW_MORE - 1):
        pub(q, b"m")
    assert out.of("credit") == [(PUB, FLOW_MORE + 1, FLOW_MORE + 1)]
    pub(q, b"m")
    assert out.of("credit") == [(PUB, FLOW_MORE + 1, FLOW_MORE + 1), (PUB, FLOW_MORE, FLOW_MORE)]


def test_publisher_credit_bumped_by_bytes_before_messages():
    q, out = mk()
    big = b"x" * (MORE_BYTES // 2)
    pub(q, big)
    assert out.of("credit") == []
    pub(q, big, b"m")
    assert out.of("credit") == [(PUB, 3, MORE_BYTES + 1)]


def test_withheld_credit_is_paid_in_messages_and_bytes():
    q, out = mk(backlog_bytes=10)
    for _ in range(FLOW_MORE):
        pub(q, b"0123456789ab")
    assert out.of("credit") == []  # the backlog is over its mark: withheld
    q.consume(CH1, "A", True, False, 0, 0, 0)
    q.run(0)
    assert out.of("credit") == [(PUB, FLOW_MORE, 12 * FLOW_MORE)]


def test_no_credit_for_anonymous_sender():
    q, out = mk()
    for _ in range(FLOW_MORE):
        q.publish("", [PublishItem(0, "x", "rk", b"", False, 0, -1)], [b"m"], 0)
    assert out.of("credit") == []


def test_transient_messages_confirmed_on_publish__C5():
    q, out = mk()
    pub(q, b"a", b"b", b"c", seqs=[4, 0, 5])
    assert out.of("confirm") == [(PUB, [4, 5], True)]
    assert out.of("persist") == []


def test_persistent_messages_confirmed_when_persisted__C5():
    q, out = mk(durable=True)
    pub(q, b"a", b"b", seqs=[1, 2], persistent=True)
    pub(q, b"c", seqs=[0], persistent=True)
    assert out.of("confirm") == []
    batches = [msgs for (msgs,) in out.of("persist")]
    # every persistent message of a durable queue is stored, confirm wanted or not
    assert [[(m.seq_id, m.pub_seq, m.publisher) for m in b] for b in batches] == \
        [[(1, 1, PUB), (2, 2, PUB)], [(3, 0, PUB)]]
    assert all(len(m.msg_id) == 16 for b in batches for m in b)
    other = Msg(9, "x", "rk", b"", b"z", True, publisher=CH2, pub_seq=3)
    q.persisted(batches[0] + [other])
    assert out.of("confirm") == [(PUB, [1, 2], True), (CH2, [3], True)]


def test_persistent_message_in_transient_queue_confirmed_on_accept__C5():
    q, out = mk()
    pub(q, b"a", seqs=[1], persistent=True)
    assert out.of("persist") == [] and out.of("confirm") == [(PUB, [1], True)]


def test_first_delivery_of_persistent_message_is_recorded_once():
    q, out = mk(durable=True)
    pub(q, b"a", persistent=True)
    consume(q)
    [(msgs,)] = out.of("record_delivery")
    assert [m.body for m in msgs] == [b"a"]
    q.settle(CH1, REQUEUE, [1], 0)  # redelivered: no second record
    assert len(out.of("record_delivery")) == 1 and len(bodies(out)) == 2


def test_refused_messages_leave_the_queue_and_are_nacked():
    q, out = mk(durable=True)
    pub(q, b"a", b"b", seqs=[1, 2], persistent=True)
    (msgs,) = out.of("persist")[0]
    q.refused(msgs[:1])
    assert ready_bodies(q) == [b"b"] and q.ready_bytes == 1
    assert out.of("confirm") == [(PUB, [1], False)]


# --- channel-wide prefetch tokens (basic.qos global=true) -----------------------------------
def test_global_limit_waits_for_a_grant_and_asks_once__P2():
    q, out = mk()
    pub(q, b"1", b"2", b"3")
    consume(q, channel_prefetch=2)
    assert out.of("deliver") == []
    assert out.of("demand") == [(CH1,)]
    pub(q, b"4")
    q.run(0)
    assert out.of("demand") == [(CH1,)]  # one Demand out at a time
    q.grant(CH1, 2, 0)
    assert bodies(out) == [b"1", b"2"]
    assert out.of("demand") == [(CH1,), (CH1,)]  # more ready: asks again
    assert q.channels[CH1].tokens == 0


def test_no_demand_when_nothing_is_ready():
    q, out = mk()
    consume(q, channel_prefetch=2)
    assert out.of("demand") == []
    pub(q, b"1")
    assert out.of("demand") == [(CH1,)]


def test_unusable_tokens_are_released():
    q, out = mk()
    pub(q, b"1", b"2")
    consume(q, channel_prefetch=10)
    q.grant(CH1, 5, 0)
    assert bodies(out) == [b"1", b"2"]
    assert out.of("release") == [(CH1, 3)]
    assert q.channels[CH1].tokens == 0


def test_tokens_released_when_consumer_prefetch_is_reached():
    q, out = mk()
    pub(q, b"1", b"2", b"3")
    consume(q, prefetch=1, channel_prefetch=10)
    q.grant(CH1, 4, 0)
    assert bodies(out) == [b"1"]
    assert out.of("release") == [(CH1, 3)]


def test_tokens_kept_while_only_the_writer_blocks_then_released_on_cancel():
    q, out = mk(delivery_window=1)
    pub(q, b"1", b"2", b"3")
    consume(q, channel_prefetch=10)
    consume(q, tag="B", channel_prefetch=10)
    q.grant(CH1, 3, 0)
    assert bodies(out) == [b"1"]
    assert out.of("release") == []  # usable once the writer has sent
    q.cancel(CH1, "B", 0)
    assert out.of("release") == []
    q.cancel(CH1, "A", 0)
    assert out.of("release") == [(CH1, 2)]
    assert q.channels[CH1].tokens == 0


def test_grant_ignored_for_unlimited_or_unknown_channel():
    q, out = mk()
    q.grant(CH1, 5, 0)
    assert CH1 not in q.channels
    consume(q)
    q.grant(CH1, 5, 0)
    assert q.channels[CH1].tokens == 0


def test_no_ack_consumer_needs_no_token():
    q, out = mk()
    pub(q, b"1", b"2")
    consume(q, no_ack=True, channel_prefetch=1)
    assert bodies(out) == [b"1", b"2"]
    assert out.of("demand") == []


def test_set_limit_zero_lifts_global_limit_and_drops_tokens__P2():
    q, out = mk()
    pub(q, b"1", b"2", b"3")
    consume(q, channel_prefetch=1)
    q.grant(CH1, 1, 0)
    assert bodies(out) == [b"1"]
    q.set_limit(CH1, 0, 0)
    assert bodies(out) == [b"1", b"2", b"3"]
    st = q.channels[CH1]
    assert (st.limit, st.tokens, st.asked) == (0, 0, False)
    assert CH1 not in q.limited


def test_set_limit_on_running_consumer_starts_asking():
    q, out = mk()
    consume(q)
    q.set_limit(CH1, 2, 0)
    pub(q, b"1", b"2")
    assert out.of("deliver") == [] and out.of("demand") == [(CH1,)]
    q.grant(CH1, 2, 0)
    assert bodies(out) == [b"1", b"2"]


def test_channel_down_forgets_token_state():
    q, out = mk()
    pub(q, b"1")
    consume(q, channel_prefetch=3)
    q.channel_down(CH1, 0)
    assert CH1 not in q.channels and CH1 not in q.limited
    q.grant(CH1, 3, 0)  # a late grant for a channel that is gone
    assert CH1 not in q.channels and out.of("deliver") == []


def test_ids_come_from_the_injected_source():
    """Cores take their ids injected: a stored message that came without a msg id gets one
    from `random_bytes`, not from the OS behind the test's back."""
    q, _ = mk(durable=True, random_bytes=lambda n: b"\x07" * n)
    pub(q, b"p", persistent=True)
    [msg] = q.messages()
    assert msg.msg_id == b"\x07" * 16


# --- single active consumer (x-single-active-consumer), S1 ----------------------------------
SAC = {"x-single-active-consumer": True}


def test_single_active_consumer_gets_everything_others_wait__S1():
    q, out = mk(SAC)
    consume(q, ch=CH1, tag="A")
    consume(q, ch=CH2, tag="B")
    pub(q, b"1", b"2", b"3")
    assert out.delivered() == [(CH1, "A", b"1", False), (CH1, "A", b"2", False),
                               (CH1, "A", b"3", False)]
    assert q.stats()["consumers"] == 2  # waiting consumers count, as in RabbitMQ


def test_single_active_consumer_at_its_prefetch_holds_the_queue__S1():
    q, out = mk(SAC)
    consume(q, ch=CH1, tag="A", prefetch=1)
    consume(q, ch=CH2, tag="B")
    pub(q, b"1", b"2")
    assert out.delivered() == [(CH1, "A", b"1", False)]  # B waits though it could take
    q.settle(CH1, ACK, [1], 0)
    assert out.delivered()[1:] == [(CH1, "A", b"2", False)]


def test_single_active_consumer_cancel_hands_over_unacked_stay__S1():
    """basic.cancel (RabbitMQ 3.10): the next consumer becomes active; the cancelled one's
    unacked deliveries stay with its channel, and a requeue sends them to the new one."""
    q, out = mk(SAC)
    consume(q, ch=CH1, tag="A", prefetch=1)
    consume(q, ch=CH2, tag="B", prefetch=5)
    consume(q, ch=CH2, tag="C", prefetch=5)
    pub(q, b"1", b"2", b"3")
    assert ids_of(out, CH1) == [1]
    assert q.cancel(CH1, "A", 0)
    q.run(0)
    assert out.delivered(CH2) == [(CH2, "B", b"2", False), (CH2, "B", b"3", False)]
    assert q.stats()["messages_unacknowledged"] == 3
    q.settle(CH1, REQUEUE, [1], 0)
    assert out.delivered(CH2)[2:] == [(CH2, "B", b"1", True)]


def test_single_active_consumer_channel_down_requeues_to_the_next__S1_A7():
    q, out = mk(SAC)
    consume(q, ch=CH1, tag="A", prefetch=2)
    consume(q, ch=CH2, tag="B", prefetch=10)
    pub(q, b"1", b"2", b"3")
    q.settle(CH1, ACK, [1], 0)
    assert ids_of(out, CH1) == [1, 2, 3] and ids_of(out, CH2) == []
    q.channel_down(CH1, 0)
    assert out.delivered(CH2) == [(CH2, "B", b"2", True), (CH2, "B", b"3", True)]
    assert q.cons.active.tag == "B"


def test_the_queue_names_its_single_active_and_exclusive_consumer__S1():
    """QueueConsumers.holders (the sample's single_active_consumer_tag /
    exclusive_consumer_tag) and consumers.activity (each consumer row's active and
    activity_status) follow the queue's state."""
    q, _ = mk(SAC)
    assert q.cons.holders() == {"single_active_consumer_tag": None,
                                "single_active_consumer": None, "exclusive_consumer_tag": None}
    consume(q, ch=CH1, tag="A")
    consume(q, ch=CH2, tag="A")  # the same tag on another channel: not the holder
    holder = q.cons.holders()["single_active_consumer"]
    assert q.cons.holders()["single_active_consumer_tag"] == "A" and holder == [CH1, "A"]
    assert activity(True, holder, CH1, "A") == (True, "single_active")
    assert activity(True, holder, CH2, "A") == (False, "waiting")
    assert activity(False, None, CH2, "A") == (True, "up")
    q.cancel(CH1, "A", 0)
    assert q.cons.holders()["single_active_consumer"] == [CH2, "A"]
    plain, _ = mk()
    consume(plain, ch=CH1, tag="X", exclusive=True)
    assert plain.cons.holders() == {"single_active_consumer_tag": None,
                                    "single_active_consumer": None,
                                    "exclusive_consumer_tag": "X"}


def test_single_active_consumer_refuses_exclusive_consume__S1():
    q, out = mk(SAC)
    with pytest.raises(ChannelError) as ei:
        consume(q, exclusive=True)  # even on a queue without consumers
    assert (ei.value.reply_code, ei.value.text) == (
        403, "ACCESS_REFUSED - queue 'q' in vhost '/' in exclusive use")
    assert not q.consumers


def test_single_active_consumer_off_unless_the_boolean_true():
    for args in ({}, {"x-single-active-consumer": False}):
        q, out = mk(args)
        consume(q, ch=CH1, tag="A")
        consume(q, ch=CH2, tag="B")
        pub(q, b"1", b"2")
        assert [d[1] for d in out.delivered()] == ["A", "B"]


def test_basic_get_on_a_single_active_consumer_queue__S1():
    """basic.get takes the head whatever the consumers (rabbit_amqqueue_process basic_get)."""
    q, out = mk(SAC)
    consume(q, ch=CH1, tag="A", prefetch=1)
    pub(q, b"1", b"2")
    item, body, count = q.get(CH2, False, 0)
    assert (body, count) == (b"2", 0)


def test_single_active_consumer_tokens_only_for_the_active_one__S1_P2():
    q, out = mk(SAC)
    consume(q, ch=CH1, tag="A", prefetch=1)
    consume(q, ch=CH2, tag="B", channel_prefetch=5)  # waiting: asks no tokens
    pub(q, b"1", b"2")
    assert out.of("demand") == []
    q.cancel(CH1, "A", 0)
    q.run(0)
    assert out.of("demand") == [(CH2,)]
    q.grant(CH2, 5, 0)
    assert out.delivered(CH2) == [(CH2, "B", b"2", False)]
    assert out.of("release") == [(CH2, 4)]  # nothing else ready: the rest goes back


# --- consumer priorities (x-priority), S2 ---------------------------------------------------
def consume_p(q, ch, tag, priority, prefetch=0, **kw):
    q.consume(ch, tag, False, False, prefetch, 0, 0, {"x-priority": priority}, **kw)
    q.run(0)


def test_priority_consumers_are_served_first_then_lower_ones__S2():
    q, out = mk()
    consume_p(q, CH1, "low", 0, prefetch=10)
    consume_p(q, CH2, "high", 10, prefetch=2)
    pub(q, b"1", b"2", b"3", b"4")
    assert [(d[1], d[2]) for d in out.delivered()] == [
        ("high", b"1"), ("high", b"2"), ("low", b"3"), ("low", b"4")]
    q.settle(CH2, ACK, [1], 0)
    pub(q, b"5")
    assert out.delivered()[-1][1:3] == ("high", b"5")


def test_priority_x_priority_not_an_integer_is_refused__S2():
    q, out = mk()
    with pytest.raises(ChannelError) as ei:
        consume_p(q, CH1, "A", "high")
    assert (ei.value.reply_code, ei.value.text) == (
        406, "PRECONDITION_FAILED - invalid arg 'x-priority' for queue 'q' in vhost '/': "
             '"expected integer, got longstr"')
    with pytest.raises(ChannelError):
        consume_p(q, CH1, "A", True)
    assert not q.consumers


# --- delivery limit (S6) --------------------------------------------------------------------
def _delivery_count(props_raw):
    from protocol.properties import BasicProperties
    return (BasicProperties.decode(props_raw).headers or {}).get("x-delivery-count")


def test_redelivery_carries_x_delivery_count__S6():
    q, out = mk()
    pub(q, b"a")
    consume(q)
    first = out.of("deliver")[-1][1][0]
    assert first[5] == b"\x00\x00"  # a first delivery is untouched
    q.settle(CH1, REQUEUE, [1], 0)
    q.channel_down(CH1, 0)  # a consumer on another channel gets it the third time
    consume(q, ch=CH2, tag="B")
    items = [it for _, its, _ in out.of("deliver") for it in its]
    assert [(_delivery_count(d.props_raw), d.redelivered) for d in items] == [
        (None, False), (1, True), (2, True)]


def test_delivery_limit_dead_letters_past_the_limit__S6():
    q, out = mk({"x-delivery-limit": 1, "x-dead-letter-exchange": "dlx"})
    pub(q, b"a", b"b")
    consume(q)
    q.settle(CH1, REQUEUE, [1], 0)  # a: returned once (= the limit): delivered again
    assert out.of("dead_letter") == []
    assert ids_of(out) == [1, 2, 1]
    q.settle(CH1, REQUEUE, [1], 0)  # a: a second return is past the limit
    assert [(msg.body, reason) for msg, reason in out.of("dead_letter")] == [
        (b"a", "delivery_limit")]
    assert ids_of(out) == [1, 2, 1]
    assert q.ready_count == 0 and list(q.unacked) == [2]


def test_delivery_limit_counts_channel_close_and_drops_without_dlx__S6():
    q, out = mk({"x-delivery-limit": 0})
    pub(q, b"a")
    consume(q)
    q.channel_down(CH1, 0)  # the channel closed with the delivery unacked (or timed out)
    assert out.of("dead_letter") == [] and q.ready_count == 0 and not q.unacked
    assert [x.body for (ms,) in out.left() for x in ms] == [b"a"]


def test_delivery_limit_none_by_default_and_set_by_policy__S6():
    q, out = mk()
    assert q.delivery_limit is None
    pub(q, b"a")
    consume(q)
    for _ in range(5):
        q.settle(CH1, REQUEUE, [1], 0)
    assert out.of("dead_letter") == [] and list(q.unacked) == [1]
    q.set_delivery_limit(2)
    q.settle(CH1, REQUEUE, [1], 0)  # its 6th return, past the policy's limit
    assert not q.unacked and q.ready_count == 0


# --- head_message_timestamp (the management API's, rabbit_variable_queue's) -----------------
def test_head_message_timestamp_is_the_smallest_of_the_heads_and_the_oldest_unacked():
    from protocol.properties import BasicProperties

    def item(priority, ts=None):
        props = BasicProperties(timestamp=ts).encode() if ts is not None else b"\x00\x00"
        return PublishItem(0, "x", "rk", props, False, priority, -1)

    q, out = mk({"x-max-priority": 2})
    assert q.head_message_timestamp() is None  # empty: null
    q.publish(PUB, [item(0)], [b"plain"], 0)
    assert q.head_message_timestamp() is None  # a head without the property: null
    q.publish(PUB, [item(0, 2000), item(2, 1000)], [b"later", b"urgent"], 0)
    assert q.head_message_timestamp() == 1000  # the priority-2 head; priority 0's has none
    consume(q, prefetch=1)
    assert bodies(out) == [b"urgent"]
    assert q.head_message_timestamp() == 1000  # now the oldest unacked delivery
    q.settle(CH1, ACK, ids_of(out), 0)
    q.run(0)
    assert bodies(out) == [b"urgent", b"plain"]  # unacked now: no timestamp; ready: 2000
    assert q.head_message_timestamp() == 2000
    assert q.head_message_timestamp() == 2000  # (the heads' properties decoded once: cached)


def test_storage_stats_count_bytes_ready_unacked_in_memory_and_paged_out():
    q, out = mk(page_bytes=10, page_size=2)
    pub(q, b"aaaa", b"bbbb", b"cccc", b"dddd")  # past 10 bytes in memory: to the index only
    s = q.storage_stats()
    assert s["message_bytes"] == s["message_bytes_ready"] == 16
    assert s["messages_paged_out"] + s["messages_ram"] == 4 and s["messages_paged_out"] >= 1
    assert s["message_bytes_paged_out"] == 4 * s["messages_paged_out"]
    assert s["message_bytes_ram"] == 4 * s["messages_ram"]
    q2, out2 = mk()

    def unacked_bytes_match():
        got = q2.storage_stats()
        assert got["message_bytes_unacknowledged"] == sum(
            len(msg.body) for msg in q2.unacked.values())
        assert got["messages_unacknowledged_ram"] == len(q2.unacked)
        assert got["message_bytes"] == 6  # nothing left the queue
        return got

    pub(q2, b"aaaa", b"bb")
    consume(q2, prefetch=1)
    assert unacked_bytes_match()["message_bytes_unacknowledged"] == 4
    q2.settle(CH1, REQUEUE, ids_of(out2), 0)  # back in the queue (and maybe out again)
    unacked_bytes_match()
    q2.channel_down(CH1, 0)  # the channel's unacked go back
    assert unacked_bytes_match()["message_bytes_unacknowledged"] == 0
    consume(q2, ch=CH2, prefetch=5)
    assert unacked_bytes_match()["message_bytes_unacknowledged"] == 6
    q2.settle(CH2, ACK, ids_of(out2, CH2), 0)
    s = q2.storage_stats()
    assert (s["message_bytes"], s["message_bytes_unacknowledged"], s["messages_ram"]) == (
        0, 0, 0)


def test_get_drops_the_expired_messages_it_brings_to_the_head__A9():
    # rabbit_amqqueue_process:fetch/2: drop_expired_msgs after the fetch, before the count
    for no_ack in (False, True):
        q, _ = mk()
        pub(q, b"long", expiry=600000)
        pub(q, b"short", b"short2", expiry=50)
        pub(q, b"keep")
        item, body, count = q.get(CH1, no_ack, 100)
        assert (body, count) == (b"long", 1)
        assert q.get(CH1, True, 100)[1:] == (b"keep", 0)
