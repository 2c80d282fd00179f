"""actors/core/stream.py and stream_readers.py: a stream's rules without sockets."""
from __future__ import annotations

import datetime

import pytest

from actors.core import stream
from actors.core.errors import ChannelError, ConnectionError_
from actors.core.stream import (BloomFilter, LogView, OffsetSpec, Segment, chunk_filter,
                                chunk_matches, parse_offset, segments_to_drop, start_offset)
from actors.core.stream_readers import Reader, StreamReaders
from protocol.properties import BasicProperties

PF = "PRECONDITION_FAILED - "


# --- x-max-age and interval units (rabbit_amqqueue:check_max_age/1) -----------------------
@pytest.mark.parametrize("value,ms", [
    ("1s", 1000), ("90m", 90 * 60_000), ("2h", 7_200_000), ("7D", 7 * 86_400_000),
    ("1M", 30 * 86_400_000), ("1Y", 365 * 86_400_000), (b"3h", 3 * 3_600_000),
])
def test_max_age_units(value, ms):
    assert stream.check_max_age(value) == ms


@pytest.mark.parametrize("value", ["0D", "1x", "abc", "", "h", "1 h", "-1h", "1.5h", 10, None])
def test_max_age_refuses(value):
    assert stream.check_max_age(value) is None


# --- x-stream-offset (parse_offset_arg/1) --------------------------------------------------
NOW = 1_700_000_000_000


@pytest.mark.parametrize("value,spec", [
    (None, OffsetSpec("next")), ("first", OffsetSpec("first")), ("last", OffsetSpec("last")),
    ("next", OffsetSpec("next")), (b"first", OffsetSpec("first")), (0, OffsetSpec("offset", 0)),
    (12345678901, OffsetSpec("offset", 12345678901)),
    ("1h", OffsetSpec("timestamp", NOW - 3_600_000)),
    (datetime.datetime(2023, 11, 14, tzinfo=datetime.timezone.utc),
     OffsetSpec("timestamp", 1_699_920_000_000)),
])
def test_parse_offset(value, spec):
    assert parse_offset(value, NOW) == spec


@pytest.mark.parametrize("value", ["abc", "1x", True, -1, 1.5, {"a": 1}])
def test_parse_offset_refuses(value):
    with pytest.raises(ValueError):
        parse_offset(value, NOW)


def test_bad_offset_text_is_rabbitmqs():
    with pytest.raises(ChannelError) as e:
        stream.check_consume_arguments({"x-stream-offset": "1x"}, "s", "/")
    assert e.value.text == PF + ("invalid arg 'x-stream-offset' for queue 's' in vhost '/': "
                                 "{invalid_stream_offset_arg,{longstr,<<\"1x\">>}}")


# --- where a reader starts ------------------------------------------------------------------
LOG = LogView(first=10, next=20, last_chunk=17, chunks=((10, 100), (13, 200), (17, 300)))


@pytest.mark.parametrize("spec,start", [
    (OffsetSpec("first"), 10), (OffsetSpec("last"), 17), (OffsetSpec("next"), 20),
    (OffsetSpec("offset", 12), 12), (OffsetSpec("offset", 3), 10), (OffsetSpec("offset", 99), 20),
    (OffsetSpec("timestamp", 150), 13), (OffsetSpec("timestamp", 0), 10),
    (OffsetSpec("timestamp", 301), 20),
])
def test_start_offset(spec, start):
    assert start_offset(spec, LOG) == start


def test_start_of_an_empty_log_is_its_end():
    empty = LogView(5, 5, 4)
    assert [start_offset(OffsetSpec(k), empty) for k in ("first", "last", "next")] == [5, 5, 5]


# --- retention: whole segments, oldest first, never the one being written ------------------
SEGS = [Segment(0, 0, 9, 1000, 100), Segment(1, 10, 19, 1000, 200),
        Segment(2, 20, 29, 1000, 300), Segment(3, 30, 31, 200, 400)]


def test_retention_by_size_drops_oldest_segments_until_under():
    assert segments_to_drop(SEGS, 2000, None, 0) == [0, 1]  # 3,200 -> 2,200 -> 1,200
    assert segments_to_drop(SEGS, 2500, None, 0) == [0]
    assert segments_to_drop(SEGS, 3200, None, 0) == []
    assert segments_to_drop(SEGS, 10_000, None, 0) == []


def test_retention_by_age_keeps_newer_segments_and_the_last():
    assert segments_to_drop(SEGS, None, 100, 350) == [0, 1]
    assert segments_to_drop(SEGS, None, 1, 10_000) == [0, 1, 2]  # the last always stays
    assert segments_to_drop(SEGS[-1:], 0, 1, 10_000) == []


# --- Bloom filters ------------------------------------------------------------------------
def test_bloom_has_no_false_negatives():
    bf = BloomFilter(16)
    values = [f"v{i}".encode() for i in range(20)]
    for v in values:
        bf.add(v)
    assert all(v in bf for v in values)


def test_bloom_false_positives_are_rare_for_a_few_values():
    bf = BloomFilter(16)
    for v in (b"red", b"blue"):
        bf.add(v)
    misses = sum(f"other{i}".encode() in bf for i in range(1000))
    assert misses < 100  # 2 values in 128 bits, 2 hashes: about 1 in 1,000


def test_chunk_matching():
    only_unfiltered = chunk_filter([None, None])
    assert only_unfiltered is None
    mixed = chunk_filter(["red", None])
    red = chunk_filter(["red"])
    assert chunk_matches(None, (), False) and chunk_matches(red, (), False)  # no filter: all
    assert chunk_matches(red, ("red",), False)
    assert not chunk_matches(red, ("blue",), False)
    assert not chunk_matches(None, ("red",), False)
    assert chunk_matches(None, ("red",), True)  # match-unfiltered reads value-less chunks
    assert chunk_matches(mixed, ("blue",), True) and not chunk_matches(mixed, ("blue",), False)


# --- declare and consume rules ------------------------------------------------------------
def test_declare_flags_and_segment_limit():
    with pytest.raises(ChannelError) as e:
        stream.check_declare_flags(False, False, False, {}, "s", "/")
    assert e.value.text == PF + "invalid property 'non-durable' for queue 's' in vhost '/'"
    with pytest.raises(ChannelError) as e:
        stream.check_declare_flags(True, False, False,
                                   {"x-stream-max-segment-size-bytes": 3_000_000_001}, "s", "/")
    assert e.value.text == PF + "Exceeded max value for x-stream-max-segment-size-bytes"


def test_declare_arguments_of_other_types_are_refused():
    with pytest.raises(ChannelError) as e:
        stream.check_declare_arguments({"x-queue-type": "stream", "x-max-priority": 3}, "s", "/")
    assert e.value.text == PF + ("invalid arg 'x-max-priority' for queue 's' in vhost '/' of "
                                 "queue type rabbit_stream_queue")


def test_consume_refusals_in_rabbitmqs_order():
    with pytest.raises(ChannelError) as e:
        stream.check_consume(0, True, 5, "s", "/")
    assert e.value.reply_code == 406
    with pytest.raises(ConnectionError_) as e:
        stream.check_consume(10, True, 5, "s", "/")
    assert "automatic acknowledgement" in e.value.text
    with pytest.raises(ConnectionError_) as e:
        stream.check_consume(10, False, 5, "s", "/")
    assert e.value.text == "NOT_IMPLEMENTED - queue 's' in vhost '/' does not support global qos"
    stream.check_consume(10, False, 0, "s", "/")


def test_settings_policy_wins_over_arguments():
    s = stream.settings({"x-max-length-bytes": 10, "x-max-age": "1h"}, {"max-age": "2h"})
    assert (s.max_bytes, s.max_age_ms, s.segment_bytes) == (10, 7_200_000, 500_000_000)


def test_offset_header_is_a_long():
    raw = BasicProperties(headers={"a": "b"}).encode()
    props = BasicProperties.decode(stream.with_offset_header(raw, 1 << 40))
    assert props.headers == {"a": "b", "x-stream-offset": 1 << 40}


# --- readers: credit and positions ----------------------------------------------------------
def test_acks_give_credit_back_to_the_reader_that_had_the_delivery():
    rs = StreamReaders(window=100)
    a, b = Reader("ch1", "a", 0, 2), Reader("ch1", "b", 0, 2)
    rs.add(a)
    rs.add(b)
    rs.delivered(a, [0, 1])
    rs.delivered(b, [0])
    assert (a.credit, b.credit, rs.unacked()) == (0, 1, 3)
    assert [r.tag for r in rs.wanting(10)] == ["b"]
    assert rs.settle("ch1", [0, 1]) == 2  # the first reader holding each offset
    assert (a.credit, b.credit) == (2, 1)
    assert rs.settle("ch1", [0]) == 1 and b.credit == 2
    assert rs.settle("ch1", [7]) == 0  # nobody's


def test_window_bounds_what_goes_to_one_channel():
    rs = StreamReaders(window=3)
    r = Reader("ch", "t", 0, 100)
    rs.add(r)
    assert rs.room(r) == 3
    rs.delivered(r, [0, 1, 2])
    assert rs.room(r) == 0 and list(rs.wanting(10)) == []
    rs.sent("ch", 2)
    assert rs.room(r) == 2


def test_drop_channels_of_a_dead_worker():
    rs = StreamReaders()
    rs.add(Reader("w1#c1", "a", 0, 1))
    rs.add(Reader("w2#c1", "b", 0, 1))
    assert [r.tag for r in rs.drop_channels("w1#")] == ["a"]
    assert len(rs) == 1


def test_filter_size_is_16_to_255_and_sizes_the_chunk_filter():
    stream.check_declare_arguments({"x-queue-type": "stream",
                                    "x-stream-filter-size-bytes": 255}, "s", "/")
    with pytest.raises(ChannelError) as e:
        stream.check_declare_arguments({"x-queue-type": "stream",
                                        "x-stream-filter-size-bytes": 8}, "s", "/")
    assert e.value.text.endswith("{value_out_of_range,8}")
    assert stream.settings({"x-stream-filter-size-bytes": 64}).filter_size == 64
    assert len(chunk_filter(["a"], 64)) == 64
