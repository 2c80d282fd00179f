"""Issue 13 item 6: the edge cases where Leveret differed from RabbitMQ 3.10.8, each answered as
RabbitMQ 3.10.8 answers it (codes, reply texts, headers).

Every expectation here was observed on RabbitMQ 3.10.8 (Debian's rabbitmq-server) by running
this module against it (docs/behaviour-tests.md, "Running against RabbitMQ"):

    python -m bench.refbroker --serve        # prints the two variables below
    LEVERET_TEST_URL=amqp://guest:guest@127.0.0.1:PORT/ LEVERET_TEST_RABBITMQCTL='...' \\
        .venv/bin/python -m pytest tests/integration/test_edge_cases.py

x-max-length-bytes, reject-publish-dlx, x-death, header wire types kept through dead-lettering,
CC/BCC, headers exchange (values compared with and without their types), alternate exchanges,
exchange-to-exchange bindings, exchange types, system exchange deletion, unbind, expiration
strings, per-message TTL at the head (and a get's message-count), priority queues with a length
limit, heartbeats on a channel, tune-ok limits, channel_max, and queue names that are not UTF-8.
"""
from __future__ import annotations

import datetime
import struct
import time

import pika
import pytest
from pamqp import commands
from pika.exceptions import ChannelClosedByBroker, NackError

import rawamqp
from amqp_helpers import declare, get, get_all, publish, unique, wait_count


def _closed(conn, fn):
    """Run fn(channel) on a new channel; return the ChannelClosedByBroker it raised."""
    c = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as ei:
        fn(c)
    return ei.value


def _dlx(ch, kind="fanout", bind=("",)):
    dlx, dead = unique("dlx"), unique("dead")
    ch.exchange_declare(dlx, kind, auto_delete=True)
    declare(ch, dead)
    for rk in bind:
        ch.queue_bind(dead, dlx, rk)
    return dlx, dead


# -- x-max-length-bytes and reject-publish-dlx ---------------------------------------------------
def test_max_length_bytes_reject_publish_nacks_what_does_not_fit__C6(conn):
    ch = conn.channel()
    q = declare(ch, unique("q"), arguments={"x-max-length-bytes": 10,
                                            "x-overflow": "reject-publish"})
    ch.confirm_delivery()
    ch.basic_publish("", q, b"aaaaaa")          # 6 bytes
    ch.basic_publish("", q, b"bbbb")            # 10: still fits (the limit is reached, not passed)
    with pytest.raises(NackError):
        ch.basic_publish("", q, b"c")           # 11 > 10: refused
    assert [d.body for d in get_all(ch, q)] == [b"aaaaaa", b"bbbb"]


def test_max_length_bytes_reject_publish_dlx_dead_letters_the_refused__C6(conn):
    ch = conn.channel()
    dlx, dead = _dlx(ch)
    q = declare(ch, unique("q"), arguments={"x-max-length-bytes": 4,
                                            "x-overflow": "reject-publish-dlx",
                                            "x-dead-letter-exchange": dlx})
    ch.confirm_delivery()
    ch.basic_publish("", q, b"keep")
    with pytest.raises(NackError):
        ch.basic_publish("", q, b"refused")
    wait_count(conn, dead, 1)
    [d] = get_all(ch, dead)
    assert d.body == b"refused"
    [death] = d.properties.headers["x-death"]
    assert (death["reason"], death["queue"], death["count"]) == ("maxlen", q, 1)
    assert death["exchange"] == "" and death["routing-keys"] == [q]
    assert [x.body for x in get_all(ch, q)] == [b"keep"]


def test_max_length_and_bytes_both_apply_drop_head(ch):
    q = declare(ch, unique("q"), arguments={"x-max-length": 3, "x-max-length-bytes": 5})
    publish(ch, q, [b"12", b"34", b"56"])       # 6 bytes > 5: the head goes
    assert [d.body for d in get_all(ch, q)] == [b"34", b"56"]


# -- x-death --------------------------------------------------------------------------------------
def test_x_death_full_contents_and_first_death_headers(conn):
    ch = conn.channel()
    dlx, dead = _dlx(ch)
    q = declare(ch, unique("q"), arguments={"x-dead-letter-exchange": dlx})
    src = unique("src")
    ch.exchange_declare(src, "direct", auto_delete=True)
    ch.queue_bind(q, src, "rk1")
    ch.basic_publish(src, "rk1", b"m", pika.BasicProperties(expiration="60000",
                                                              headers={"CC": ["other"]}))
    wait_count(conn, q, 1)
    d = get(ch, q)
    ch.basic_reject(d.delivery_tag, requeue=False)
    wait_count(conn, dead, 1)
    [d] = get_all(ch, dead)
    h = d.properties.headers
    [death] = h["x-death"]
    assert set(death) == {"count", "reason", "queue", "time", "exchange", "routing-keys",
                          "original-expiration"}
    assert death["count"] == 1
    assert death["reason"] == "rejected"
    assert death["queue"] == q
    assert death["exchange"] == src
    assert death["routing-keys"] == ["rk1", "other"]
    assert death["original-expiration"] == "60000"
    assert isinstance(death["time"], datetime.datetime)
    assert h["x-first-death-queue"] == q
    assert h["x-first-death-reason"] == "rejected"
    assert h["x-first-death-exchange"] == src
    assert "x-last-death-queue" not in h          # 3.13's headers, not 3.10's
    assert d.properties.expiration is None          # the expiration moved to the x-death entry
    assert h["CC"] == ["other"]                     # kept: no dead-letter routing key


def test_x_death_two_queues_newest_first_first_death_kept(conn):
    ch = conn.channel()
    last = unique("last")
    declare(ch, last)
    q2 = declare(ch, unique("q2"), arguments={"x-dead-letter-exchange": "",
                                              "x-dead-letter-routing-key": last})
    q1 = declare(ch, unique("q1"), arguments={"x-dead-letter-exchange": "",
                                              "x-dead-letter-routing-key": q2,
                                              "x-message-ttl": 0})
    ch.basic_publish("", q1, b"m")
    wait_count(conn, q2, 1)
    d = get(ch, q2)
    ch.basic_nack(d.delivery_tag, requeue=False)
    wait_count(conn, last, 1)
    [d] = get_all(ch, last)
    h = d.properties.headers
    deaths = h["x-death"]
    assert [(x["queue"], x["reason"], x["count"]) for x in deaths] == \
        [(q2, "rejected", 1), (q1, "expired", 1)]
    assert deaths[0]["routing-keys"] == [q2] and deaths[1]["routing-keys"] == [q1]
    assert (h["x-first-death-queue"], h["x-first-death-reason"],
            h["x-first-death-exchange"]) == (q1, "expired", "")


# -- dead-lettering keeps the headers' wire types ----------------------------------------------------
def _entry(key: str, t: str, packed: bytes) -> bytes:
    return bytes([len(key)]) + key.encode() + t.encode() + packed


# field types no client library picks for these values (pika would send I, l, d and S)
_TYPED_HEADERS = [
    ("i32", "I", struct.pack(">i", 7)), ("u8", "B", struct.pack(">B", 200)),
    ("f32", "f", struct.pack(">f", 1.5)), ("i8", "b", struct.pack(">b", -3)),
    ("i16", "s", struct.pack(">h", 300)), ("u16", "u", struct.pack(">H", 60000)),
    ("u32", "i", struct.pack(">I", 4000000000)), ("i64", "l", struct.pack(">q", 5)),
    ("dbl", "d", struct.pack(">d", 2.25)), ("ts", "T", struct.pack(">Q", 1700000000)),
    ("dec", "D", struct.pack(">BI", 2, 150)), ("bin", "x", struct.pack(">I", 2) + b"\x00\xff"),
    ("arr", "A", struct.pack(">I", 7) + b"I" + struct.pack(">i", 1) + b"B\x02"),
    ("tbl", "F", struct.pack(">I", 7) + b"\x01kf" + struct.pack(">f", 0.5)),
]
_TYPED_EXPECTED = [
    ("i32", "I", 7), ("u8", "B", 200), ("f32", "f", 1.5), ("i8", "b", -3), ("i16", "s", 300),
    ("u16", "u", 60000), ("u32", "i", 4000000000), ("i64", "l", 5), ("dbl", "d", 2.25),
    ("ts", "T", 1700000000), ("dec", "D", (2, 150)), ("bin", "x", b"\x00\xff"),
    ("arr", "A", [("I", 1), ("B", 2)]), ("tbl", "F", [("k", "f", 0.5)]),
]


def _raw_get(c: rawamqp.RawClient, queue: str, timeout: float = 5.0) -> rawamqp.Content:
    """basic.get on channel 1 until a message comes (dead-lettering is asynchronous)."""
    deadline = time.monotonic() + timeout
    while True:
        c.send_method(1, commands.Basic.Get(queue=queue))
        got = c.read_command()
        if isinstance(got, rawamqp.Content):
            return got
        assert time.monotonic() < deadline, f"nothing arrived in {queue}"
        time.sleep(0.05)


def test_dead_lettered_headers_keep_their_wire_types__A3(raw_factory):
    """rabbit_binary_parser keeps each header's type and rabbit_binary_generator writes it
    back: a dead-lettered copy carries I, B, f ... as published, and x-death's count is a long
    (l), its time a timestamp (T), its strings longstr (S)."""
    c = raw_factory()
    dead, q = unique("dead"), unique("q")
    c.rpc(1, commands.Queue.Declare(queue=dead, exclusive=True), commands.Queue.DeclareOk)
    c.rpc(1, commands.Queue.Declare(queue=q, exclusive=True, arguments={
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dead}),
        commands.Queue.DeclareOk)
    table = b"".join(_entry(*e) for e in _TYPED_HEADERS)
    c.send(rawamqp.method_frame(1, commands.Basic.Publish(exchange="", routing_key=q))
           + rawamqp.content_header_frame(1, 1, table) + rawamqp.frame(rawamqp.FRAME_BODY, 1, b"m"))
    got = _raw_get(c, q)
    assert rawamqp.content_headers(got.header_payload) == _TYPED_EXPECTED
    c.send_method(1, commands.Basic.Reject(delivery_tag=got.method.delivery_tag, requeue=False))
    headers = {k: (t, v) for k, t, v in rawamqp.content_headers(_raw_get(c, dead).header_payload)}
    for key, t, v in _TYPED_EXPECTED:
        assert headers[key] == (t, v), key
    for key in ("x-first-death-reason", "x-first-death-queue", "x-first-death-exchange"):
        assert headers[key][0] == "S", key
    kind, [(entry_type, entry)] = headers["x-death"]
    assert (kind, entry_type) == ("A", "F")
    types = {k: t for k, t, _ in entry}
    assert types == {"count": "l", "reason": "S", "queue": "S", "time": "T", "exchange": "S",
                     "routing-keys": "A"}
    values = {k: v for k, _, v in entry}
    assert values["count"] == 1 and values["routing-keys"] == [("S", q.encode())]


def test_x_death_count_stays_a_long_when_counted_again__A3(raw_factory):
    c = raw_factory()
    q = unique("q")
    # rejected back into itself: the same (queue, reason) entry is counted again
    c.rpc(1, commands.Queue.Declare(queue=q, exclusive=True, arguments={
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": q}), commands.Queue.DeclareOk)
    c.publish(1, "", q, b"m")
    for _ in range(2):
        got = _raw_get(c, q)
        c.send_method(1, commands.Basic.Reject(delivery_tag=got.method.delivery_tag,
                                               requeue=False))
    headers = {k: (t, v) for k, t, v in rawamqp.content_headers(_raw_get(c, q).header_payload)}
    [(_, entry)] = headers["x-death"][1]
    assert [(k, t) for k, t, _ in entry][0] == ("count", "l")
    assert entry[0][2] == 2


# -- dead-lettering with CC ------------------------------------------------------------------------
def test_dead_letter_routing_key_drops_cc_and_routes_by_it_alone__S4(conn):
    ch = conn.channel()
    dlx = unique("dlx")
    ch.exchange_declare(dlx, "direct", auto_delete=True)
    by_dlrk, by_cc = declare(ch, unique("dlrk")), declare(ch, unique("cc"))
    ch.queue_bind(by_dlrk, dlx, "dl")
    ch.queue_bind(by_cc, dlx, "c1")
    q = declare(ch, unique("q"), arguments={"x-dead-letter-exchange": dlx,
                                            "x-dead-letter-routing-key": "dl"})
    ch.basic_publish("", q, b"m", pika.BasicProperties(headers={"CC": ["c1"]}))
    wait_count(conn, q, 1)
    d = get(ch, q)
    ch.basic_reject(d.delivery_tag, requeue=False)
    wait_count(conn, by_dlrk, 1)
    [d] = get_all(ch, by_dlrk)
    assert "CC" not in d.properties.headers
    assert d.properties.headers["x-death"][0]["routing-keys"] == [q, "c1"]
    assert d.routing_key == "dl"
    assert get_all(ch, by_cc) == []


def test_dead_letter_without_routing_key_routes_by_the_original_keys_and_cc__S4(conn):
    ch = conn.channel()
    dlx = unique("dlx")
    ch.exchange_declare(dlx, "direct", auto_delete=True)
    by_rk, by_cc = declare(ch, unique("rk")), declare(ch, unique("cc"))
    q = declare(ch, unique("q"), arguments={"x-dead-letter-exchange": dlx})
    ch.queue_bind(by_rk, dlx, q)
    ch.queue_bind(by_cc, dlx, "c1")
    ch.basic_publish("", q, b"m", pika.BasicProperties(headers={"CC": ["c1"]}))
    wait_count(conn, q, 1)
    d = get(ch, q)
    ch.basic_reject(d.delivery_tag, requeue=False)
    wait_count(conn, by_rk, 1)
    wait_count(conn, by_cc, 1)
    [a], [b] = get_all(ch, by_rk), get_all(ch, by_cc)
    assert a.body == b.body == b"m"
    assert a.properties.headers["CC"] == ["c1"]


# -- headers exchange ------------------------------------------------------------------------------
def _headers_routes(ch, conn, binding: dict, headers: dict) -> bool:
    x = unique("hx")
    ch.exchange_declare(x, "headers", auto_delete=True)
    q = declare(ch, unique("hq"))
    ch.queue_bind(q, x, "", arguments=binding)
    ch.basic_publish(x, "", b"m", pika.BasicProperties(headers=headers))
    got = get_all(ch, q)
    ch.queue_delete(q)
    return len(got) == 1


@pytest.mark.parametrize("binding,headers,routed", [
    ({"x-match": "all", "n": 1}, {"n": 1}, True),
    ({"x-match": "all", "n": 1}, {"n": "1"}, False),
    ({"x-match": "all", "n": 1}, {"n": 2 ** 40 - 2 ** 40 + 1}, True),
    ({"x-match": "all", "n": 5}, {"n": 5 + 2 ** 33 - 2 ** 33}, True),
    ({"x-match": "all", "b": True}, {"b": True}, True),
    ({"x-match": "all", "b": True}, {"b": 1}, False),
    ({"x-match": "all", "s": "v"}, {"s": b"v"}, True),        # longstr and bytes: same binary
    ({"x-match": "all", "v": None}, {"v": "anything"}, True),  # void: the key must be there
    ({"x-match": "all", "v": None}, {"w": 1}, False),
    ({"x-match": "all", "a": 1, "b": 2}, {"a": 1}, False),
    ({"x-match": "any", "a": 1, "b": 2}, {"a": 1}, True),
    ({"x-match": "any", "a": 1, "b": 2}, {"a": 2, "b": 1}, False),
    ({"a": 1, "b": 2}, {"a": 1}, False),                      # default: all
    ({"x-match": "all"}, {}, True),
    ({"x-match": "any"}, {"a": 1}, False),
    ({"x-match": "all", "x-k": "v"}, {}, True),               # x- keys ignored by all/any
    ({"x-match": "any", "x-k": "v", "a": 1}, {"x-k": "v"}, False),
    ({"x-match": "all-with-x", "x-k": "v"}, {}, False),
    ({"x-match": "all-with-x", "x-k": "v"}, {"x-k": "v"}, True),
    ({"x-match": "any-with-x", "x-k": "v", "a": 1}, {"x-k": "v"}, True),
    ({"x-match": "any-with-x", "x-k": "v"}, {"x-k": "w"}, False),
    ({"x-match": "all", "t": {"a": 1}}, {"t": {"a": 1}}, True),
    ({"x-match": "all", "l": [1, "a"]}, {"l": [1, "a"]}, True),
])
def test_headers_exchange_matching(conn, binding, headers, routed):
    ch = conn.channel()
    assert _headers_routes(ch, conn, binding, headers) is routed


def _bind_payload(queue: str, exchange: str, table: bytes) -> bytes:
    # queue.bind (50, 20): reserved-1, queue, exchange, routing key "", nowait 0, arguments
    return struct.pack(">HHH", 50, 20, 0) + bytes([len(queue)]) + queue.encode() + \
        bytes([len(exchange)]) + exchange.encode() + b"\x00\x00" + \
        struct.pack(">I", len(table)) + table


_T5, _L5, _B5 = b"T" + struct.pack(">Q", 5), b"l" + struct.pack(">q", 5), b"b\x05"
_TS = b"T" + struct.pack(">Q", 1700000000)
_SA, _XA = b"S\x00\x00\x00\x01a", b"x\x00\x00\x00\x01a"


def _array(*values: bytes) -> bytes:
    return b"A" + struct.pack(">I", len(b"".join(values))) + b"".join(values)


@pytest.mark.parametrize("binding,header,routed", [
    (_TS, _TS, True),                          # the same timestamp
    (_T5, _L5, True),                          # PV == DV: a timestamp is its seconds
    (_L5, _B5, True),                          # integer widths compare by value
    (_array(_T5), _array(_T5), True),
    (_array(_T5), _array(_L5), False),         # inside an array {Type, Value} is compared
    (_array(_L5), _array(_B5), False),
    (_SA, _XA, True),                          # longstr and binary: the same octets
    (_array(_SA), _array(_XA), False),
], ids=["T-T", "T-l", "l-b", "A[T]-A[T]", "A[T]-A[l]", "A[l]-A[b]", "S-x", "A[S]-A[x]"])
def test_headers_exchange_compares_values_as_rabbitmq_does(broker, raw_factory, binding, header,
                                                           routed):
    """rabbit_exchange_type_headers:headers_match/5 compares a binding's value with the
    header's by Erlang ==: a top-level value's type does not count (T 5 == l 5), but within an
    array or table the type is part of the term ({timestamp,5} /= {long,5})."""
    if binding == _array(_L5) and not broker.external:
        pytest.skip("Leveret compares integers inside arrays and tables by value whatever their "
                    "width (docs/behaviour-tests.md): binding arguments cross processes as "
                    "msgpack, which keeps no width")
    c = raw_factory()
    x, q = unique("hx"), unique("hq")
    c.rpc(1, commands.Exchange.Declare(exchange=x, exchange_type="headers", auto_delete=True),
          commands.Exchange.DeclareOk)
    c.rpc(1, commands.Queue.Declare(queue=q, exclusive=True), commands.Queue.DeclareOk)
    c.send(rawamqp.frame(rawamqp.FRAME_METHOD, 1, _bind_payload(q, x, _entry("h", "", binding))))
    c.expect(commands.Queue.BindOk, channel=1)
    c.send(rawamqp.method_frame(1, commands.Basic.Publish(exchange=x, routing_key=""))
           + rawamqp.content_header_frame(1, 1, _entry("h", "", header))
           + rawamqp.frame(rawamqp.FRAME_BODY, 1, b"m"))
    c.send_method(1, commands.Basic.Get(queue=q, no_ack=True))
    got = c.read_command()
    if routed and not isinstance(got, rawamqp.Content):   # the queue's enqueue may lag
        time.sleep(0.3)
        c.send_method(1, commands.Basic.Get(queue=q, no_ack=True))
        got = c.read_command()
    assert isinstance(got, rawamqp.Content) is routed


def test_headers_exchange_invalid_x_match_is_406(conn):
    ch = conn.channel()
    x, q = unique("hx"), declare(ch, unique("hq"))
    ch.exchange_declare(x, "headers", auto_delete=True)
    err = _closed(conn, lambda c: c.queue_bind(q, x, "", arguments={"x-match": "some"}))
    assert err.reply_code == 406
    assert err.reply_text == ("PRECONDITION_FAILED - Invalid x-match field value <<\"some\">>; "
                              "expected all, any, all-with-x, or any-with-x")


# -- alternate exchanges with CC and headers -------------------------------------------------------
def _ae_setup(ch, ae_kind="direct"):
    x, ae = unique("x"), unique("ae")
    ch.exchange_declare(ae, ae_kind, auto_delete=True)
    ch.exchange_declare(x, "direct", auto_delete=True, arguments={"alternate-exchange": ae})
    return x, ae


def test_alternate_exchange_gets_the_cc_keys_too__S4(conn):
    ch = conn.channel()
    x, ae = _ae_setup(ch)
    in_x, in_ae = declare(ch, unique("inx")), declare(ch, unique("inae"))
    ch.queue_bind(in_x, x, "b")
    ch.queue_bind(in_ae, ae, "c")
    # nothing in x for "a" nor "c": the AE routes with both keys and "c" matches there
    ch.basic_publish(x, "a", b"1", pika.BasicProperties(headers={"CC": ["c"]}))
    # a CC key that x routes: the AE is not used
    ch.basic_publish(x, "a", b"2", pika.BasicProperties(headers={"CC": ["b"]}))
    # BCC too, and it is removed before delivery
    ch.basic_publish(x, "a", b"3", pika.BasicProperties(headers={"BCC": ["c"]}))
    wait_count(conn, in_ae, 2)
    got_ae = get_all(ch, in_ae)
    assert [d.body for d in got_ae] == [b"1", b"3"]
    assert got_ae[0].properties.headers == {"CC": ["c"]}
    assert got_ae[1].properties.headers == {}
    assert [d.body for d in get_all(ch, in_x)] == [b"2"]


def test_headers_alternate_exchange_routes_by_the_headers(conn):
    ch = conn.channel()
    x, ae = _ae_setup(ch, "headers")
    q = declare(ch, unique("q"))
    ch.queue_bind(q, ae, "", arguments={"x-match": "any", "h": "v"})
    ch.confirm_delivery()
    ch.basic_publish(x, "nowhere", b"yes", pika.BasicProperties(headers={"h": "v"}),
                     mandatory=True)
    ch.basic_publish(x, "nowhere", b"no", pika.BasicProperties(headers={"h": "w"}))
    assert [d.body for d in get_all(ch, q)] == [b"yes"]


# -- exchange-to-exchange bindings -----------------------------------------------------------------
def test_exchange_bind_errors(conn):
    ch = conn.channel()
    x = unique("x")
    ch.exchange_declare(x, "direct", auto_delete=True)
    missing = unique("missing")
    err = _closed(conn, lambda c: c.exchange_bind(missing, x, "k"))
    assert (err.reply_code, err.reply_text) == (404, f"NOT_FOUND - no exchange '{missing}' in vhost '/'")
    err = _closed(conn, lambda c: c.exchange_bind(x, missing, "k"))
    assert (err.reply_code, err.reply_text) == (404, f"NOT_FOUND - no exchange '{missing}' in vhost '/'")
    err = _closed(conn, lambda c: c.exchange_bind(x, "", "k"))
    assert (err.reply_code, err.reply_text) == (
        403, "ACCESS_REFUSED - operation not permitted on the default exchange")
    err = _closed(conn, lambda c: c.exchange_bind("", x, "k"))
    assert (err.reply_code, err.reply_text) == (
        403, "ACCESS_REFUSED - operation not permitted on the default exchange")


def test_unbind_of_missing_bindings(conn):
    ch = conn.channel()
    x, y = unique("x"), unique("y")
    ch.exchange_declare(x, "direct", auto_delete=False)
    ch.exchange_declare(y, "direct", auto_delete=False)
    q = declare(ch, unique("q"))
    ch.queue_unbind(q, x, "never-bound")            # unbind-ok
    ch.exchange_unbind(y, x, "never-bound")         # unbind-ok
    # RabbitMQ 3.10 answers unbind-ok even when the queue or an exchange does not exist
    missing = unique("missing")
    ch.queue_unbind(missing, x, "k")
    ch.queue_unbind(q, missing, "k")
    ch.exchange_unbind(x, missing, "k")
    ch.exchange_unbind(missing, x, "k")
    # ...but the default exchange is refused as for a bind
    for op in (lambda c: c.queue_unbind(q, "", "k"), lambda c: c.exchange_unbind(x, "", "k")):
        err = _closed(conn, op)
        assert (err.reply_code, err.reply_text) == (
            403, "ACCESS_REFUSED - operation not permitted on the default exchange")
    ch = conn.channel()
    ch.exchange_delete(x)
    ch.exchange_delete(y)


# -- exchange types --------------------------------------------------------------------------------
# each type's binding and a publish it routes: (binding key, binding arguments, routing key,
# headers)
_ROUTED_BY = {"direct": ("k", None, "k", None), "fanout": ("", None, "any", None),
              "topic": ("a.*", None, "a.b", None),
              "headers": ("", {"x-match": "all", "h": "v"}, "", {"h": "v"})}


@pytest.mark.parametrize("kind", ["direct", "fanout", "topic", "headers"])
def test_declare_each_built_in_type(conn, kind):
    ch = conn.channel()
    x = unique("x")
    ch.exchange_declare(x, kind, auto_delete=True)
    ch.exchange_declare(x, kind, passive=True)
    key, args, rk, headers = _ROUTED_BY[kind]
    q = declare(ch, unique("q"), exclusive=True)
    ch.queue_bind(q, x, key, arguments=args)
    ch.basic_publish(x, rk, b"routed", pika.BasicProperties(headers=headers))
    wait_count(conn, q, 1)
    assert get(ch, q, auto_ack=True).body == b"routed"
    ch.exchange_delete(x)
    with pytest.raises(ChannelClosedByBroker) as ei:
        ch.exchange_declare(x, kind, passive=True)
    assert ei.value.reply_code == 404


@pytest.mark.parametrize("kind", ["fanout2", "DIRECT", "x-consistent-hash", "x-random",
                                  "x-delayed-message", "type-made-up"])
def test_declare_unknown_exchange_type_is_503(broker, raw_factory, kind):
    c = raw_factory()
    c.send_method(1, commands.Exchange.Declare(exchange=unique("x"), exchange_type=kind))
    close = c.expect_connection_close()
    assert (close.reply_code, close.reply_text) == (
        503, f"COMMAND_INVALID - unknown exchange type '{kind}'")


@pytest.mark.parametrize("kind", ["foo", "", "bar", "queue", "binding"])
def test_declare_exchange_type_that_is_an_erlang_atom_is_invalid__E2(broker, raw_factory, kind):
    """rabbit_exchange:check_type/1 says "unknown" when the name is not an existing atom of
    RabbitMQ's VM and "invalid" when it is one (foo, the empty name) without an exchange module
    behind it."""
    c = raw_factory()
    c.send_method(1, commands.Exchange.Declare(exchange=unique("x"), exchange_type=kind))
    close = c.expect_connection_close()
    assert (close.reply_code, close.reply_text) == (
        503, f"COMMAND_INVALID - invalid exchange type '{kind}'")


@pytest.mark.parametrize("name", ["amq.direct", "amq.headers", "amq.no-such-exchange"])
def test_deleting_a_system_exchange_is_403__E2(conn, name):
    """rabbit_channel:check_exchange_deletion/1 refuses any amq.* name, existing or not."""
    err = _closed(conn, lambda c: c.exchange_delete(name))
    assert (err.reply_code, err.reply_text) == (
        403, f"ACCESS_REFUSED - deletion of system exchange '{name}' in vhost '/' not allowed")


def test_deleting_the_default_exchange_is_403__E2(conn):
    err = _closed(conn, lambda c: c.exchange_delete(""))
    assert (err.reply_code, err.reply_text) == (
        403, "ACCESS_REFUSED - operation not permitted on the default exchange")


def test_redeclare_predeclared_exchanges(conn):
    ch = conn.channel()
    ch.exchange_declare("amq.direct", "direct", durable=True)
    err = _closed(conn, lambda c: c.exchange_declare("amq.direct", "fanout", durable=True))
    assert err.reply_code == 406
    assert err.reply_text == ("PRECONDITION_FAILED - inequivalent arg 'type' for exchange "
                              "'amq.direct' in vhost '/': received 'fanout' but current is 'direct'")
    err = _closed(conn, lambda c: c.exchange_declare("amq.fanout", "fanout", durable=False))
    assert err.reply_code == 406
    assert err.reply_text == ("PRECONDITION_FAILED - inequivalent arg 'durable' for exchange "
                              "'amq.fanout' in vhost '/': received 'false' but current is 'true'")


# -- per-message expiration ------------------------------------------------------------------------
@pytest.mark.parametrize("value,text", [
    ("abc", "PRECONDITION_FAILED - invalid expiration 'abc': no_integer"),
    ("-1", "PRECONDITION_FAILED - invalid expiration '-1': {value_negative,-1}"),
    ("1.5", "PRECONDITION_FAILED - invalid expiration '1.5': {leftover_string,\".5\"}"),
    (" 5", "PRECONDITION_FAILED - invalid expiration ' 5': no_integer"),
    ("5 ", "PRECONDITION_FAILED - invalid expiration '5 ': {leftover_string,\" \"}"),
    ("", "PRECONDITION_FAILED - invalid expiration '': no_integer"),
    ("99999999999999", "PRECONDITION_FAILED - invalid expiration '99999999999999': "
                       "{value_too_large,99999999999999}"),
])
def test_invalid_expiration_strings(conn, value, text):
    ch = conn.channel()
    q = declare(ch, unique("q"))
    ch.basic_publish("", q, b"x", pika.BasicProperties(expiration=value))
    with pytest.raises(ChannelClosedByBroker) as ei:
        ch.queue_declare(q, passive=True)
    assert (ei.value.reply_code, ei.value.reply_text) == (406, text)


@pytest.mark.parametrize("value", ["+5", "007", "0"])
def test_expiration_strings_rabbitmq_accepts(conn, value):
    # accepted and read as that many milliseconds: the message expires (dead-lettered, so the
    # expiry is seen rather than inferred from an empty queue)
    ch = conn.channel()
    dlq = declare(ch, unique("dlq"))
    q = declare(ch, unique("q"), arguments={"x-dead-letter-exchange": "",
                                            "x-dead-letter-routing-key": dlq})
    ch.basic_publish("", q, b"x", pika.BasicProperties(expiration=value))
    wait_count(conn, dlq, 1)
    assert ch.queue_declare(q, passive=True).method.message_count == 0
    death = get(ch, dlq, auto_ack=True).properties.headers["x-death"][0]
    assert (death["reason"], death["original-expiration"]) == ("expired", value)


def test_per_message_ttl_expires_only_at_the_head(conn):
    ch = conn.channel()
    q = declare(ch, unique("q"))
    canary = declare(ch, unique("canary"))
    ch.basic_publish("", q, b"long", pika.BasicProperties(expiration="600000"))
    ch.basic_publish("", q, b"short", pika.BasicProperties(expiration="50"))
    ch.basic_publish("", canary, b"c", pika.BasicProperties(expiration="50"))
    # the canary's message, alone at its head, expires...
    wait_count(conn, canary, 0)
    # ...while "short", expired too by now, stays counted behind "long"
    assert ch.queue_declare(q, passive=True).method.message_count == 2
    d = get(ch, q)
    assert d.body == b"long"
    ch.basic_ack(d.delivery_tag)
    assert get(ch, q) is None                     # at the head now: dropped, never delivered
    wait_count(conn, q, 0)


def test_expired_messages_reaching_the_head_after_a_get_are_dropped_at_once__A9(conn):
    """rabbit_amqqueue_process:fetch/2 runs drop_expired_msgs after taking the head: the
    expired messages that the get brought to the head are gone before get-ok's message-count
    is taken, whether the get acks or not."""
    ch = conn.channel()
    for auto_ack in (False, True):
        q = declare(ch, unique("q"))
        canary = declare(ch, unique("canary"))
        ch.basic_publish("", q, b"long", pika.BasicProperties(expiration="600000"))
        ch.basic_publish("", q, b"short", pika.BasicProperties(expiration="50"))
        ch.basic_publish("", q, b"short2", pika.BasicProperties(expiration="50"))
        ch.basic_publish("", q, b"keep")
        ch.basic_publish("", canary, b"c", pika.BasicProperties(expiration="50"))
        wait_count(conn, canary, 0)
        assert ch.queue_declare(q, passive=True).method.message_count == 4
        method, _, body = ch.basic_get(q, auto_ack=auto_ack)
        assert (body, method.message_count) == (b"long", 1)
        assert ch.queue_declare(q, passive=True).method.message_count == 1
        if not auto_ack:
            ch.basic_ack(method.delivery_tag)
        method, _, body = ch.basic_get(q, auto_ack=True)
        assert (body, method.message_count) == (b"keep", 0)


# -- priority queues with a length limit -----------------------------------------------------------
def test_priority_queue_max_length_drops_the_highest_priority_head(ch):
    q = declare(ch, unique("q"), arguments={"x-max-priority": 10, "x-max-length": 2})
    for body, prio in ((b"low", 1), (b"mid", 5), (b"high", 9)):
        ch.basic_publish("", q, body, pika.BasicProperties(priority=prio))
    assert [d.body for d in get_all(ch, q)] == [b"mid", b"low"]


def test_priority_queue_reject_publish_refuses_whatever_the_priority__C6(conn):
    ch = conn.channel()
    q = declare(ch, unique("q"), arguments={"x-max-priority": 10, "x-max-length": 1,
                                            "x-overflow": "reject-publish"})
    ch.confirm_delivery()
    ch.basic_publish("", q, b"low", pika.BasicProperties(priority=1))
    with pytest.raises(NackError):
        ch.basic_publish("", q, b"high", pika.BasicProperties(priority=9))
    assert [d.body for d in get_all(ch, q)] == [b"low"]


# -- protocol limits -------------------------------------------------------------------------------
def test_heartbeat_on_a_channel_is_505_with_rabbitmq_text__E2(raw_factory):
    c = raw_factory()
    c.send(rawamqp.frame(rawamqp.FRAME_HEARTBEAT, 1, b""))
    close = c.expect_connection_close()
    assert close.reply_code == 505
    assert close.reply_text == "UNEXPECTED_FRAME - type 8, all octets = <<>>"


@pytest.mark.parametrize("frame_max,channel_max", [
    (131073, 2047), (0, 2047), (131072, 2048), (131072, 0)])
def test_tune_ok_above_the_server_limits_closes_the_socket__E2(broker, frame_max, channel_max):
    """RabbitMQ logs "failed to negotiate connection parameters: negotiated frame_max = 131073
    is higher than the maximum allowed value (131072)" (channel_max 0 reads "0 (no limit)")
    and closes the socket about 3 s later without connection.close, as for the other failures
    before connection.open (docs/behaviour-tests.md, point 12). No open-ok ever comes."""
    c = rawamqp.RawClient(broker.host, broker.port, timeout=10.0)
    try:
        c.handshake(user=broker.user, password=broker.password, vhost=broker.vhost,
                    frame_max=frame_max, channel_max=channel_max, open_vhost=False)
        try:
            c.send_method(0, commands.Connection.Open(virtual_host=broker.vhost))
        except OSError:
            return
        frames = c.read_until_closed(timeout=10.0)
        assert not any(isinstance(f[1], commands.Connection.OpenOk) for f in frames), frames
        assert not any(isinstance(f[1], commands.Connection.Close) for f in frames), frames
    finally:
        c.close()


def test_tune_ok_below_the_server_limits_is_accepted(raw_factory):
    # accepted, and the client's lower channel_max is the one the server then holds it to
    c = raw_factory(open_channel=False, frame_max=4096, channel_max=1)
    c.open_channel(1)
    c.rpc(1, commands.Queue.Declare(queue="", exclusive=True), commands.Queue.DeclareOk)
    c.send_method(2, commands.Channel.Open())
    close = c.expect_connection_close()
    assert (close.reply_code, close.reply_text) == (
        530, "NOT_ALLOWED - number of channels opened (1) has reached the negotiated "
             "channel_max (1)")


def test_opening_more_channels_than_negotiated_is_530__E2(broker, raw_factory):
    c = raw_factory(open_channel=False, channel_max=2)
    c.open_channel(1)
    c.open_channel(2)
    c.send_method(3, commands.Channel.Open())
    close = c.expect_connection_close()
    assert (close.reply_code, close.reply_text) == (
        530, "NOT_ALLOWED - number of channels opened (2) has reached the negotiated "
             "channel_max (2)")


def test_channel_number_above_channel_max_is_accepted_while_under_the_count(raw_factory):
    c = raw_factory(open_channel=False, channel_max=2)
    c.open_channel(1000)
    c.rpc(1000, commands.Queue.Declare(queue="", exclusive=True), commands.Queue.DeclareOk)


# -- queue names that are not UTF-8 ----------------------------------------------------------------
def _declare_payload(name: bytes, exclusive=False) -> bytes:
    # queue.declare (50, 10): reserved-1, queue (shortstr), bits (passive, durable, exclusive,
    # auto-delete, nowait), arguments (empty table)
    bits = 4 if exclusive else 0
    return struct.pack(">HHH", 50, 10, 0) + bytes([len(name)]) + name + bytes([bits]) + \
        struct.pack(">I", 0)


@pytest.mark.parametrize("name", [b"q-\xff\xfe", b"q-\xc3", b"q-\xc3(", b"\x80"])
def test_queue_name_not_valid_utf8_is_a_frame_error__E2(raw_factory, name):
    c = raw_factory()
    c.send(rawamqp.frame(rawamqp.FRAME_METHOD, 1, _declare_payload(name)))
    close = c.expect_connection_close()
    assert (close.reply_code, close.reply_text) == (
        501, "FRAME_ERROR - Malformed UTF-8 in shortstr")


def test_queue_name_valid_utf8_is_accepted(raw_factory):
    c = raw_factory()
    name = ("q-é€😀-" + unique("n")).encode()
    c.send(rawamqp.frame(rawamqp.FRAME_METHOD, 1, _declare_payload(name, exclusive=True)))
    ok = c.expect(commands.Queue.DeclareOk, channel=1)
    assert ok.queue.encode() == name


# -- arguments Leveret does not implement: refused, never accepted and ignored ---------------------
# RabbitMQ 3.10.8 takes these; Leveret refuses them with 406 (docs/behaviour-tests.md).
@pytest.mark.parametrize("arguments,text", [
    ({"x-credit": {"credit": 2, "drain": False}},
     "x-credit is AMQP 1.0 link credit, not available over AMQP 0-9-1; use basic.qos prefetch"),
    ({"x-cancel-on-ha-failover": False},
     "x-cancel-on-ha-failover=false is not implemented: Leveret always cancels a mirrored "
     "queue's consumers when its master fails over"),
])
def test_consume_arguments_leveret_refuses(broker, conn, arguments, text):
    if broker.external:
        pytest.skip("Leveret's own refusal (RabbitMQ 3.10 ignores x-credit from a 0-9-1 "
                    "client unless credit is a 64-bit long, and crashes the queue on a "
                    "non-table)")
    ch = conn.channel()
    q = declare(ch, unique("q"))
    err = _closed(conn, lambda c: c.basic_consume(q, lambda *a: None, arguments=arguments))
    key = next(iter(arguments))
    assert (err.reply_code, err.reply_text) == (
        406, f"PRECONDITION_FAILED - invalid arg '{key}' for queue '{q}' in vhost '/': "
             f"\"{text}\"")


@pytest.mark.parametrize("arguments", [{"x-queue-version": 1},
                                       {"x-queue-master-locator": "random"}])
def test_queue_arguments_leveret_refuses(broker, conn, arguments):
    if broker.external:
        pytest.skip("Leveret's own refusal: RabbitMQ 3.10 implements these")
    q = unique("q")
    err = _closed(conn, lambda c: c.queue_declare(q, arguments=arguments))
    assert err.reply_code == 406
    assert err.reply_text.startswith(f"PRECONDITION_FAILED - invalid arg '{next(iter(arguments))}'"
                                     f" for queue '{q}' in vhost '/': ")
    assert "not implemented" in err.reply_text


@pytest.mark.parametrize("kw", [{"passive": True}, {"exchange_type": "direct"},
                                {"exchange_type": "direct", "durable": True}])
def test_declaring_the_default_exchange_is_403(conn, kw):
    """rabbit_channel:check_not_default_exchange/1, for a passive declare too (aiormq's suite,
    test_channel_closed_reuse, relies on it)."""
    err = _closed(conn, lambda c: c.exchange_declare("", **kw))
    assert (err.reply_code, err.reply_text) == (
        403, "ACCESS_REFUSED - operation not permitted on the default exchange")
