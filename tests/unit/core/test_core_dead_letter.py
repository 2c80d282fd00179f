"""actors/core/dead_letter.py against rabbit_dead_letter.erl (3.10.8).

The multi-step sequences below were compared with what a RabbitMQ 3.10.8 node put in the
headers of messages dead-lettered round a ring of queues (reject, reject, expire, ...).
"""

import datetime

import msgpack

from actors.core.dead_letter import (dead_letter_headers, dead_letter_routing, death_routing_keys,
                                     detect_cycles, is_cycle)

UTC = datetime.timezone.utc


def summary(h):
    return [(e["queue"], e["reason"], e["count"]) for e in h["x-death"]]


def test_first_death():
    h = dead_letter_headers({"zz": 1, "aa": "x"}, "q1", "rejected", "ex", ["rk"], "60000",
                            1700000000)
    assert list(h) == ["aa", "x-death", "x-first-death-exchange", "x-first-death-queue",
                       "x-first-death-reason", "zz"]  # whole table sorted by key
    assert h["x-first-death-reason"] == "rejected"
    assert h["x-first-death-queue"] == "q1"
    assert h["x-first-death-exchange"] == "ex"
    (entry,) = h["x-death"]
    assert list(entry.items()) == [
        ("count", 1), ("reason", "rejected"), ("queue", "q1"),
        ("time", datetime.datetime.fromtimestamp(1700000000, UTC)), ("exchange", "ex"),
        ("routing-keys", ["rk"]), ("original-expiration", "60000")]


def test_input_not_modified_and_none_headers():
    src = {"a": 1}
    h = dead_letter_headers(src, "q", "expired", "", ["q"], None, 0)
    assert src == {"a": 1}
    h2 = dead_letter_headers(None, "q", "expired", "", ["q"], None, 0)
    assert "original-expiration" not in h2["x-death"][0]
    assert h2["x-death"][0]["routing-keys"] == ["q"]
    assert h2["x-first-death-exchange"] == ""


def test_same_queue_and_reason_counts_and_keeps_first_details():
    h = dead_letter_headers(None, "q", "expired", "e1", ["k1"], "100", 10)
    h = dead_letter_headers(h, "q", "expired", "e2", ["k2"], "200", 20)
    (entry,) = h["x-death"]
    # only the count changes; the entry is re-sorted by key
    assert list(entry.items()) == [
        ("count", 2), ("exchange", "e1"), ("original-expiration", "100"), ("queue", "q"),
        ("reason", "expired"), ("routing-keys", ["k1"]),
        ("time", datetime.datetime.fromtimestamp(10, UTC))]
    assert h["x-first-death-exchange"] == "e1"


def test_new_entry_after_existing_is_sorted_and_first():
    h = dead_letter_headers(None, "a", "rejected", "", ["a"], None, 1)
    h = dead_letter_headers(h, "b", "rejected", "", ["b"], "5", 2)
    assert summary(h) == [("b", "rejected", 1), ("a", "rejected", 1)]
    assert list(h["x-death"][0]) == ["count", "exchange", "original-expiration", "queue",
                                     "reason", "routing-keys", "time"]
    # first-death headers are set once
    assert h["x-first-death-queue"] == "a"


def test_same_queue_other_reason_is_another_entry():
    h = dead_letter_headers(None, "q", "rejected", "", ["q"], None, 1)
    h = dead_letter_headers(h, "q", "maxlen", "", ["q"], None, 2)
    assert summary(h) == [("q", "maxlen", 1), ("q", "rejected", 1)]


def test_ring_sequence_matches_rabbitmq_3_10():
    # A rejects to B, B rejects to C, C expires (ttl 0) to A, and round again. RabbitMQ 3.10
    # reverses the other entries whenever there were two or more (group_by_queue_and_reason).
    expected = [
        [("A", "rejected", 1)],
        [("B", "rejected", 1), ("A", "rejected", 1)],
        [("C", "expired", 1), ("A", "rejected", 1), ("B", "rejected", 1)],
        [("A", "rejected", 2), ("B", "rejected", 1), ("C", "expired", 1)],
        [("B", "rejected", 2), ("C", "expired", 1), ("A", "rejected", 2)],
        [("C", "expired", 2), ("A", "rejected", 2), ("B", "rejected", 2)],
    ]
    h = {"zz": 1}
    steps = [("A", "rejected", "B"), ("B", "rejected", "C"), ("C", "expired", "A")] * 2
    for i, (q, reason, nxt) in enumerate(steps):
        h = dead_letter_headers(h, q, reason, "", ["x"], None, i, nxt)
        assert summary(h) == expected[i]
    assert h["x-first-death-queue"] == "A"


def test_duplicates_in_existing_x_death_are_grouped():
    dup = [{"queue": "a", "reason": "expired"}, {"queue": "b", "reason": "expired", "count": 4},
           {"queue": "a", "reason": "expired", "count": 7}]
    h = dead_letter_headers({"x-death": dup}, "c", "expired", "", ["c"], None, 0)
    # a had no count: it gets the number of a-entries (2); the fold reverses the order
    assert summary(h) == [("c", "expired", 1), ("b", "expired", 4), ("a", "expired", 2)]
    h = dead_letter_headers({"x-death": dup}, "a", "expired", "", ["a"], None, 0)
    assert summary(h) == [("a", "expired", 3), ("b", "expired", 4)]


def test_invalid_x_death_is_reset_without_first_death_headers():
    h = dead_letter_headers({"x-death": "garbage"}, "q", "expired", "e", ["k"], None, 5)
    assert summary(h) == [("q", "expired", 1)]
    assert "x-first-death-queue" not in h


def test_routing_keys_in_x_death_include_cc_and_bcc():
    hdr = {"CC": ["c1", "c2", 5, b"bin"], "BCC": ["b1"]}
    assert death_routing_keys(["main", "c1", "c2"], hdr) == ["main", "c1", "c2", "b1"]
    h = dead_letter_headers(hdr, "q", "rejected", "amq.direct", ["main", "c1"], None, 0)
    assert h["x-death"][0]["routing-keys"] == ["main", "c1", "c2", "b1"]
    assert h["CC"] == hdr["CC"]  # kept without a dead-letter routing key


def test_dlx_routing_key_removes_cc():
    h = dead_letter_headers({"CC": ["other"], "k": 1}, "q", "rejected", "x", ["rk"], None, 0,
                            dlx_routing_key="dl")
    assert "CC" not in h
    assert h["x-death"][0]["routing-keys"] == ["rk", "other"]


def test_dead_letter_routing():
    assert dead_letter_routing("dl", ["a", "b"]) == ["dl"]
    assert dead_letter_routing(None, ["a", "b"]) == ["a", "b"]
    assert dead_letter_routing("", ["a"]) == [""]


def test_is_cycle():
    # q expired into itself: the copy's x-death starts with q
    h = dead_letter_headers(None, "q", "expired", "", ["q"], None, 0)
    assert is_cycle(h["x-death"], "q", "expired")
    assert not is_cycle(h["x-death"], "other", "expired")
    # rejections are never cycles
    assert not is_cycle(h["x-death"], "q", "rejected")
    h2 = dead_letter_headers(None, "q", "rejected", "", ["q"], None, 0)
    assert not is_cycle(h2["x-death"], "q", "expired")
    # x -> y -> x, all expiring: a cycle when y's copy would go back to x
    h = dead_letter_headers(None, "x", "expired", "", ["x"], None, 0)
    assert not is_cycle(h["x-death"], "y", "expired")
    h = dead_letter_headers(h, "y", "expired", "", ["y"], None, 0)
    assert is_cycle(h["x-death"], "x", "expired")
    # a rejection anywhere before the target's first appearance breaks the cycle
    deaths = [{"queue": "y", "reason": "rejected"}, {"queue": "x", "reason": "expired"}]
    assert not is_cycle(deaths, "x", "maxlen")
    deaths = [{"queue": "x", "reason": "expired"}, {"queue": "y", "reason": "rejected"}]
    assert is_cycle(deaths, "x", "maxlen")
    assert not is_cycle(None, "x", "expired")
    assert not is_cycle("junk", "x", "expired")
    assert not is_cycle(["junk", {"queue": "x", "reason": "expired"}], "x", "expired")


def test_detect_cycles():
    h = dead_letter_headers(None, "x", "expired", "", ["x"], None, 0)
    h = dead_letter_headers(h, "y", "maxlen", "", ["y"], None, 0)
    ok, cycles = detect_cycles("maxlen", h, ["x", "z", "y"])
    assert ok == ["z"]
    assert cycles == [["x", "y", "x"], ["y", "y", "x"]]
    assert detect_cycles("rejected", h, ["x"]) == (["x"], [])
    assert detect_cycles("expired", None, ["x"]) == (["x"], [])


def test_headers_survive_msgpack_shape():
    # nothing exotic besides the datetime: the codec encodes it as an AMQP timestamp
    h = dead_letter_headers({"a": [1, 2]}, "q", "maxlen", "", ["k"], "7", 3)
    h["x-death"][0]["time"] = int(h["x-death"][0]["time"].timestamp())
    assert msgpack.unpackb(msgpack.packb(h)) == h


def test_counts_are_longs_and_typed_headers_keep_their_types():
    # rabbit_dead_letter writes {<<"count">>, long, N}; the other headers keep the types
    # rabbit_binary_parser read them with (headers decoded with typed=True)
    from protocol.fields import Long, SignedInt, UnsignedByte, decode_table, encode_table
    h = dead_letter_headers({"i": SignedInt(7), "b": UnsignedByte(200)}, "q", "rejected", "",
                            ["q"], None, 1)
    assert type(h["x-death"][0]["count"]) is Long
    assert (type(h["i"]), type(h["b"])) == (SignedInt, UnsignedByte)
    h = dead_letter_headers(decode_table(encode_table(h), typed=True)[0], "q", "rejected", "",
                            ["q"], None, 2)
    assert h["x-death"][0]["count"] == 2 and type(h["x-death"][0]["count"]) is Long
