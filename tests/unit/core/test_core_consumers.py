"""actors/core/consumers.py: to whom a queue delivers next (rabbit_queue_consumers' role)."""

from __future__ import annotations

from actors.core.consumers import QueueConsumers


def test_round_robin_skips_a_consumer_at_its_prefetch():
    c = QueueConsumers(delivery_window=10)
    a = c.add("ch1", "A", False, 1, False)
    c.add("ch2", "B", False, 0, False)
    assert c.next().tag == "A"
    a.unacked += 1  # the queue delivered to A: its prefetch of 1 is used
    assert [c.next().tag for _ in range(3)] == ["B", "B", "B"]
    c.settled("ch1", "A")
    assert c.next().tag == "A"


def test_a_full_writer_window_stops_the_channel_and_sent_reopens_it():
    c = QueueConsumers(delivery_window=2)
    c.add("ch1", "A", True, 0, False)
    st = c.channel("ch1")
    c.delivering(st, 10)
    c.delivering(st, 20)
    assert c.next() is None and not c.any_can_take()
    assert c.sent("ch1", 1) and c.next().tag == "A"
    assert (st.in_flight, st.in_flight_bytes) == (1, 20)
    assert not c.sent("gone", 1)


def test_a_writer_window_full_of_bytes_stops_the_channel_before_its_message_count():
    c = QueueConsumers(delivery_window=100, delivery_window_bytes=1000)
    c.add("ch1", "A", True, 0, False)
    st = c.channel("ch1")
    for size in (600, 300, 100):
        c.delivering(st, size)
    assert c.next() is None  # 3 deliveries of 100 allowed, but 1,000 bytes in flight
    assert c.sent("ch1", 1) and st.in_flight_bytes == 400 and c.next().tag == "A"
    assert c.sent("ch1", 5) and (st.in_flight, st.in_flight_bytes) == (0, 0)


def test_a_channel_wide_limit_without_tokens_marks_the_channel_wanting():
    c = QueueConsumers(delivery_window=10)
    c.add("ch1", "A", False, 0, False)
    st = c.channel("ch1")
    st.limit, st.tokens = 5, 0
    assert c.next() is None and st.wants
    st.tokens = 1
    assert c.next().tag == "A"


def test_dropping_a_channel_drops_its_consumers_only():
    c = QueueConsumers(delivery_window=10)
    c.add("ch1", "A", False, 0, False)
    c.add("ch2", "B", False, 0, False)
    c.drop_channel("ch1")
    assert list(c.by_key) == [("ch2", "B")] and "ch1" not in c.channels
