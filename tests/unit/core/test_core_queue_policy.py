"""QueueCore.apply_settings: what a policy (or operator policy) change does to a running queue, as
rabbit_amqqueue_process:process_args_policy/1 does (issue 13 item 4)."""
from __future__ import annotations

from actors.core.queue import QueueCore
from actors.core.queue_settings import parse as queue_settings
from actors.messages import PublishItem
from core_fakes import QueueOut

PUB = "w1#ch/9/1/3"


def mk(args=None, now=0, **kw):
    out = QueueOut()
    return QueueCore("/", "q", queue_settings(args), out.port(), now, **kw), out


def pub(q, *bodies, now=0, seqs=None):
    items = [PublishItem((seqs[i] if seqs else 0), "x", "rk", b"\x00\x00", False, 0, -1)
             for i in range(len(bodies))]
    q.publish(PUB, items, list(bodies), now)


def ready(q):
    return [m.body for r in q.ready for m in r.items]


def test_new_max_length_drops_the_head_at_once_and_dead_letters_it():
    q, out = mk()
    pub(q, b"1", b"2", b"3", b"4")
    q.apply_settings(queue_settings({}, {"max-length": 2, "dead-letter-exchange": "d"}), 5)
    assert ready(q) == [b"3", b"4"]
    assert [(m.body, why) for m, why in out.of("dead_letter")] == [(b"1", "maxlen"),
                                                                    (b"2", "maxlen")]


def test_reject_publish_from_policy_keeps_the_queue_and_nacks_what_comes():
    q, out = mk()
    pub(q, b"1", b"2", b"3")
    q.apply_settings(queue_settings({}, {"max-length": 2, "overflow": "reject-publish"}),
                   5)
    assert ready(q) == [b"1", b"2", b"3"]                # nothing dropped under reject-publish
    out.clear()
    pub(q, b"4", seqs=[7])
    assert out.of("confirm") == [(PUB, [7], False)]


def test_max_length_bytes_from_policy():
    q, _ = mk()
    pub(q, b"aaaa", b"bbbb", b"cccc")
    q.apply_settings(queue_settings({}, {"max-length-bytes": 8}), 5)
    assert ready(q) == [b"bbbb", b"cccc"]


def test_message_ttl_applies_to_messages_published_after_the_change():
    q, out = mk()
    pub(q, b"old", now=0)
    q.apply_settings(queue_settings({}, {"message-ttl": 100}), 10)
    pub(q, b"new", now=10)
    assert [m.expires_at for r in q.ready for m in r.items] == [0, 110]
    q.tick(110)
    assert ready(q) == [b"old", b"new"]    # expiry is looked at the head only, as RabbitMQ


def test_expires_from_policy_schedules_and_deletes_an_unused_queue():
    q, out = mk(now=0)
    q.apply_settings(queue_settings({}, {"expires": 1000}), 10)
    assert out.of("schedule")[-1] == (1000,)
    q.tick(1000)
    assert out.of("delete_self")


def test_clearing_the_policy_lifts_the_limit_and_keeps_the_arguments():
    q, _ = mk({"x-max-length": 3})
    q.apply_settings(queue_settings({"x-max-length": 3}, {"max-length": 1}), 0)
    assert q.max_length == 1
    q.apply_settings(queue_settings({"x-max-length": 3}, {}), 0)
    assert q.max_length == 3
    q.apply_settings(queue_settings({}, {}), 0)
    assert (q.max_length, q.ttl, q.dlx, q.overflow) == (None, None, None, "drop-head")


def test_a_queue_that_becomes_length_limited_goes_on_paging():
    q, _ = mk(page_bytes=10)
    assert q.paging.pageable
    q.apply_settings(queue_settings({"x-max-length": 5}), 0)
    assert q.paging.pageable  # classic queues v2: the limit counts paged messages too
