"""The metadata actor's group commit (actors/node/change_feed.py): the change lists of one
drain go out as one batch, in order, with the highest version, persisted when any of them
touched the stored definitions, and the StartQueues deferred behind them."""
from __future__ import annotations

from actors import messages as m
from actors.node.change_feed import ChangeFeed, FeedBatch


def put(name):
    return ["queue_put", {"vhost": "/", "name": name}]


def test_nothing_pending_takes_nothing():
    feed = ChangeFeed()
    assert not feed.pending
    assert feed.take() is None
    assert feed.batches == 0


def test_the_change_lists_of_a_drain_go_as_one_batch_in_order_at_the_last_version():
    feed = ChangeFeed()
    assert feed.add([["router", "add_queue", ["/", "a"]], put("a")], 7, False) is True
    assert feed.add([put("a")], 8, False) is False  # (a flush is already arranged)
    assert feed.add([put("b")], 9, False) is False
    batch = feed.take()
    assert batch == FeedBatch([["router", "add_queue", ["/", "a"]], put("a"), put("a"),
                               put("b")], 9, False, [])
    assert not feed.pending and feed.take() is None and feed.batches == 1


def test_one_durable_change_list_makes_the_batch_persist_and_the_next_starts_clean():
    feed = ChangeFeed()
    feed.add([put("t")], 1, False)
    feed.add([put("d")], 2, True)
    feed.add([put("t2")], 3, False)
    assert feed.take().durable is True
    feed.add([put("t3")], 4, False)
    assert feed.take().durable is False


def test_starts_wait_behind_the_changes_in_the_order_deferred():
    feed = ChangeFeed()
    feed.add([put("a")], 1, False)
    start_a = m.StartQueue({"vhost": "/", "name": "a"}, "node#metadata")
    start_b = m.StartQueue({"vhost": "/", "name": "b"}, "node#metadata")
    assert feed.defer("q0#control", start_a) is False
    feed.add([put("b")], 2, False)
    feed.defer("q1#control", start_b)
    batch = feed.take()
    assert batch.changes == [put("a"), put("b")] and batch.version == 2
    assert batch.after == [("q0#control", start_a), ("q1#control", start_b)]


def test_a_start_alone_is_pending_and_asks_for_a_flush():
    feed = ChangeFeed()
    start = m.StartQueue({"vhost": "/", "name": "a"}, "node#metadata", True)
    assert feed.defer("q0#control", start) is True
    assert feed.pending
    batch = feed.take()
    assert batch.changes == [] and batch.after == [("q0#control", start)]
