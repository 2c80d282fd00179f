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


# --- consumer priorities (x-priority), S2 ---------------------------------------------------
def test_equal_priorities_keep_the_plain_round_robin__S2():
    c = QueueConsumers(delivery_window=10)
    for tag in "ABC":
        c.add("ch1", tag, True, 0, False, 5)
    assert c.buckets is None  # one priority: no buckets
    assert [c.next().tag for _ in range(6)] == ["A", "B", "C", "A", "B", "C"]


def test_the_highest_priority_that_can_take_gets_the_message__S2():
    c = QueueConsumers(delivery_window=10)
    low = c.add("ch1", "low", False, 1, False, -3)
    hi1 = c.add("ch2", "hi1", False, 1, False, 10)
    mid = c.add("ch3", "mid", False, 1, False, 0)
    hi2 = c.add("ch4", "hi2", False, 1, False, 10)
    got = []
    for _ in range(4):
        x = c.next()
        got.append(x.tag)
        x.unacked += 1  # each has a prefetch of 1: taken, then blocked
    assert got == ["hi1", "hi2", "mid", "low"] and c.next() is None
    c.settled("ch3", "mid")
    c.settled("ch1", "low")
    assert c.next() is mid  # the highest priority with room
    hi2.unacked = hi1.unacked = low.unacked = 0
    assert [c.next().tag for _ in range(4)] == ["hi1", "hi2", "hi1", "hi2"]


def test_a_higher_priority_consumer_joining_late_is_served_first__S2():
    c = QueueConsumers(delivery_window=10)
    c.add("ch1", "A", True, 0, False)
    c.add("ch1", "B", True, 0, False)
    assert [c.next().tag for _ in range(3)] == ["A", "B", "A"]
    c.add("ch2", "H", True, 0, False, 1)
    assert c.buckets is not None and [c.next().tag for _ in range(2)] == ["H", "H"]


def test_buckets_go_when_one_priority_is_left_and_round_robin_order_holds__S2():
    c = QueueConsumers(delivery_window=10)
    c.add("ch1", "A", True, 0, False)
    c.add("ch1", "B", True, 0, False)
    c.add("ch2", "N", True, 0, False, -1)
    assert [p for p, _ in c.buckets] == [0, -1]
    c.add("ch3", "M", True, 0, False, 3)
    assert [p for p, _ in c.buckets] == [3, 0, -1]
    c.remove("ch3", "M")
    assert [p for p, _ in c.buckets] == [0, -1]
    c.drop_channel("ch2")
    assert c.buckets is None and c.levels == {0: 2}
    assert [c.next().tag for _ in range(4)] == ["A", "B", "A", "B"]


def test_negative_priorities_only_get_what_others_cannot_take__S2():
    c = QueueConsumers(delivery_window=10)
    n = c.add("ch1", "N", True, 0, False, -1)
    c.add("ch2", "Z", True, 0, False, 0)
    assert [c.next().tag for _ in range(3)] == ["Z", "Z", "Z"]
    for _ in range(10):
        c.delivering(c.channel("ch2"), 1)  # Z's writer window is full
    assert c.next() is n


# --- single active consumer (x-single-active-consumer), S1 ----------------------------------
def test_single_active_consumer_only_the_first_registered_receives__S1():
    c = QueueConsumers(delivery_window=10, single_active=True)
    a = c.add("ch1", "A", False, 1, False)
    c.add("ch2", "B", False, 0, False)
    assert c.active is a and c.next() is a
    a.unacked = 1  # at its prefetch: nobody else gets the message
    assert c.next() is None and not c.any_can_take()
    assert not c.receiving(c.by_key[("ch2", "B")]) and c.receiving(a)


def test_single_active_consumer_fails_over_in_registration_order__S1():
    c = QueueConsumers(delivery_window=10, single_active=True)
    for tag, ch in (("A", "ch1"), ("B", "ch2"), ("C", "ch1"), ("D", "ch3")):
        c.add(ch, tag, True, 0, False)
    c.remove("ch2", "B")  # a waiting one goes: nothing changes
    assert c.active.tag == "A"
    c.remove("ch1", "A")
    assert c.active.tag == "C" and c.next().tag == "C"
    c.drop_channel("ch1")
    assert c.active.tag == "D"
    c.drop_channel("ch3")
    assert c.active is None and c.next() is None
    e = c.add("ch4", "E", True, 0, False)
    assert c.active is e


def test_single_active_consumer_with_priorities_as_rabbitmq_3_10__S1_S2():
    """The first registered is active whatever its priority, a higher priority joining later
    does not take over; at failover the highest-priority waiting consumer (first registered
    among equals) becomes active (rabbit_queue_consumers:get_consumer/1)."""
    c = QueueConsumers(delivery_window=10, single_active=True)
    c.add("ch1", "A", True, 0, False, 0)
    c.add("ch2", "B", True, 0, False, 1)
    c.add("ch3", "C", True, 0, False, 5)
    c.add("ch4", "D", True, 0, False, 5)
    assert c.active.tag == "A" and [c.next().tag for _ in range(3)] == ["A", "A", "A"]
    c.remove("ch1", "A")
    assert c.active.tag == "C"
    c.remove("ch3", "C")
    assert c.active.tag == "D"
    c.remove("ch4", "D")
    assert c.active.tag == "B"


def test_clear_forgets_every_consumer():
    c = QueueConsumers(delivery_window=10, single_active=True)
    c.add("ch1", "A", True, 0, False, 1)
    c.add("ch1", "B", True, 0, False, 2)
    c.clear()
    assert not c.by_key and c.active is None and c.buckets is None and not c.levels
    assert "ch1" in c.channels
