"""actors/core/queue_args.py and actors/core/errors.py.

Every expected text here was first read off a RabbitMQ 3.10.8 node answering the same
queue.declare / exchange.declare sent with pika (which encodes Python ints as signedint).
"""

import datetime
import decimal
import pickle

import pytest

from actors.core import queue_args as qa
from actors.core.erl_terms import Atom, erl_float, erl_p, erl_value_p, erl_w
from actors.core.errors import (AMQPError, ChannelError, ConnectionError_, amqp_error, amqp_text,
                                code_name, is_hard_error, not_found, resource_locked, rs)

PF = "PRECONDITION_FAILED - "


# ---------------------------------------------------------------------------------- errors


def test_code_names_and_text():
    assert code_name(404) == "NOT_FOUND"
    assert code_name(406) == "PRECONDITION_FAILED"
    assert code_name(541) == "INTERNAL_ERROR"
    assert code_name(999) == "INTERNAL_ERROR"
    assert amqp_text(406, "unknown delivery tag 3") == "PRECONDITION_FAILED - unknown delivery tag 3"
    assert amqp_text(320, "x") == "CONNECTION_FORCED - x"
    for code in (311, 312, 313, 403, 404, 405, 406):
        assert not is_hard_error(code)
    for code in (320, 402, 501, 502, 503, 504, 505, 506, 530, 540, 541):
        assert is_hard_error(code)


def test_text_truncated_to_255_bytes():
    t = amqp_text(404, "x" * 300)
    assert len(t) == 255 and t.endswith("...") and t.startswith("NOT_FOUND - xxx")
    t = amqp_text(404, "é" * 200)  # a split multi-byte character is dropped
    assert len(t.encode()) <= 255 and t.endswith("...")
    assert len(amqp_text(404, "x" * 243)) == 255 and not amqp_text(404, "x" * 243).endswith(".")


def test_error_classes():
    e = ChannelError(404, "no queue 'q' in vhost '/'", 50, 10)
    assert e.text == "NOT_FOUND - no queue 'q' in vhost '/'"
    assert str(e) == e.text
    assert (e.reply_code, e.class_id, e.method_id) == (404, 50, 10)
    assert e.explanation == "no queue 'q' in vhost '/'"
    # an already-prefixed text is kept as is
    assert ChannelError(404, amqp_text(404, "no queue 'q' in vhost '/'")) == \
        ChannelError(404, "no queue 'q' in vhost '/'")
    c = ConnectionError_(503, "unknown exchange type 'x'")
    assert c.text == "COMMAND_INVALID - unknown exchange type 'x'"
    assert c.class_id == 0 and c.method_id == 0
    assert isinstance(c, AMQPError) and isinstance(e, AMQPError)
    assert e.with_method(60, 40).method_id == 40 and e.with_method(60, 40).text == e.text
    assert pickle.loads(pickle.dumps(e)) == e
    assert isinstance(amqp_error(406, "x"), ChannelError)
    assert isinstance(amqp_error(504, "x"), ConnectionError_)
    assert amqp_error(504, "x").text == "CHANNEL_ERROR - x"


def test_helpers():
    assert rs("queue", "q", "/") == "queue 'q' in vhost '/'"
    assert rs("topic", "a.b", "/") == "'a.b' in vhost '/'"
    assert not_found("exchange", "e", "v").text == "NOT_FOUND - no exchange 'e' in vhost 'v'"
    assert resource_locked("queue", "q", "/").text == (
        "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue 'q' in vhost '/'. It "
        "could be originally declared on another connection or the exclusive property value "
        "does not match that of the original declaration.")


def test_erlang_printing():
    assert erl_p((Atom("value_negative"), -1)) == "{value_negative,-1}"
    assert erl_p("unsupported queue mode 'foo'") == '"unsupported queue mode \'foo\'"'
    assert erl_p('a"b\\c') == '"a\\"b\\\\c"'
    assert erl_p("fooé") == '"fooé"'
    # a byte outside latin-1 printables (here in the UTF-8 of the euro sign): an int list
    assert erl_p("€") == "[226,130,172]"
    assert erl_p(b"foo") == '<<"foo">>'
    assert erl_p(b"\x00a") == "<<0,97>>"
    assert erl_w(b"foo") == "<<102,111,111>>"
    assert erl_p([Atom("a"), True, None, 1.5]) == "[a,true,undefined,1.5]"
    assert erl_p(Atom("x-foo")) == "'x-foo'"
    assert erl_p(Atom("after")) == "'after'"
    assert erl_value_p({"a": 1}) == '[{<<"a">>,signedint,1}]'
    assert erl_value_p(["a", 2 ** 40]) == '[{longstr,<<"a">>},{long,1099511627776}]'
    assert erl_value_p(decimal.Decimal("1.50")) == "{2,150}"
    assert erl_value_p(datetime.datetime(1970, 1, 2, tzinfo=datetime.timezone.utc)) == "86400"


@pytest.mark.parametrize("f,text", [
    (100.0, "100.0"), (1000.0, "1.0e3"), (0.001, "0.001"), (0.0001, "0.0001"),
    (1.5e5, "1.5e5"), (123.456, "123.456"), (0.00125, "0.00125"), (1e20, "1.0e20"),
    (5.0, "5.0"), (0.1, "0.1"), (1e-5, "1.0e-5"), (123456789.0, "123456789.0"),
    (1e16, "1.0e16"), (1234567890123456.0, "1234567890123456.0"),
    (9007199254740992.0, "9.007199254740992e15"), (0.000123, "1.23e-4"), (0.0, "0.0"),
    (-2.5, "-2.5"), (12345678901234567.0, "1.2345678901234568e16"),
])
def test_erl_float(f, text):  # io_lib:format("~p", [F]) on OTP 25
    assert erl_float(f) == text


# ------------------------------------------------------------------------------ type names


def test_amqp_type_name():
    assert qa.amqp_type_name(5) == "signedint"
    assert qa.amqp_type_name(-2 ** 31) == "signedint"
    assert qa.amqp_type_name(2 ** 31) == "long"
    assert qa.amqp_type_name(True) == "bool"
    assert qa.amqp_type_name("s") == "longstr"
    assert qa.amqp_type_name(b"s") == "binary"
    assert qa.amqp_type_name(1.5) == "double"
    assert qa.amqp_type_name(decimal.Decimal(1)) == "decimal"
    assert qa.amqp_type_name(datetime.datetime.now()) == "timestamp"
    assert qa.amqp_type_name({}) == "table"
    assert qa.amqp_type_name([]) == "array"
    assert qa.amqp_type_name(None) == "void"
    assert qa.type_class("byte") == qa.type_class("long") == qa.type_class("decimal") == "int"
    assert qa.type_class("float") == qa.type_class("double") == "float"
    assert qa.type_class("longstr") == "longstr"


# ------------------------------------------------------------------------------ validation


def _text(args, queue="q", vhost="/"):
    try:
        qa.validate(args, queue, vhost)
    except ChannelError as e:
        assert e.reply_code == 406
        return e.text
    return None


@pytest.mark.parametrize("args,text", [
    ({"x-max-length": -1}, "invalid arg 'x-max-length' for queue 'q' in vhost '/': "
                           "{value_negative,-1}"),
    ({"x-max-length": "a"}, "invalid arg 'x-max-length' for queue 'q' in vhost '/': "
                            '"expected integer, got longstr"'),
    ({"x-max-length": True}, "invalid arg 'x-max-length' for queue 'q' in vhost '/': "
                             '"expected integer, got bool"'),
    ({"x-max-length": 1.5}, "invalid arg 'x-max-length' for queue 'q' in vhost '/': "
                            '"expected integer, got double"'),
    ({"x-max-length-bytes": decimal.Decimal("1.5")},
     "invalid arg 'x-max-length-bytes' for queue 'q' in vhost '/': "
     '"expected integer, got decimal"'),
    ({"x-message-ttl": -5}, "invalid arg 'x-message-ttl' for queue 'q' in vhost '/': "
                            "{value_negative,-5}"),
    ({"x-message-ttl": 315360000001}, "invalid arg 'x-message-ttl' for queue 'q' in vhost "
                                      "'/': {value_too_large,315360000001}"),
    ({"x-message-ttl": 2 ** 40}, "invalid arg 'x-message-ttl' for queue 'q' in vhost '/': "
                                 "{value_too_large,1099511627776}"),
    ({"x-expires": 0}, "invalid arg 'x-expires' for queue 'q' in vhost '/': {value_zero,0}"),
    ({"x-expires": -1}, "invalid arg 'x-expires' for queue 'q' in vhost '/': "
                        "{value_negative,-1}"),
    ({"x-expires": "x"}, "invalid arg 'x-expires' for queue 'q' in vhost '/': "
                         '"expected integer, got longstr"'),
    ({"x-overflow": "foo"}, "invalid arg 'x-overflow' for queue 'q' in vhost '/': "
                            "invalid_overflow"),
    ({"x-overflow": 5}, "invalid arg 'x-overflow' for queue 'q' in vhost '/': "
                        "{unacceptable_type,signedint}"),
    ({"x-dead-letter-routing-key": "k"}, "invalid arg 'x-dead-letter-routing-key' for queue "
                                         "'q' in vhost '/': routing_key_but_no_dlx_defined"),
    ({"x-dead-letter-routing-key": 5}, "invalid arg 'x-dead-letter-routing-key' for queue 'q' "
                                       "in vhost '/': {unacceptable_type,signedint}"),
    ({"x-dead-letter-exchange": 5}, "invalid type 'signedint' for arg 'x-dead-letter-exchange' "
                                    "in queue 'q' in vhost '/'"),
    ({"x-dead-letter-exchange": b"ab"}, "invalid type 'binary' for arg "
                                        "'x-dead-letter-exchange' in queue 'q' in vhost '/'"),
    ({"x-max-priority": 256}, "invalid arg 'x-max-priority' for queue 'q' in vhost '/': "
                              "{max_value_exceeded,256}"),
    ({"x-max-priority": -1}, "invalid arg 'x-max-priority' for queue 'q' in vhost '/': "
                             "{value_negative,-1}"),
    ({"x-queue-mode": "foo"}, "invalid arg 'x-queue-mode' for queue 'q' in vhost '/': "
                              "\"unsupported queue mode 'foo'\""),
    ({"x-queue-mode": "fooé"}, "invalid arg 'x-queue-mode' for queue 'q' in vhost '/': "
                               "\"unsupported queue mode 'fooé'\""),
    ({"x-queue-mode": "foo€"}, "invalid arg 'x-queue-mode' for queue 'q' in vhost '/': "
                               "[117,110,115,117,112,112,111,114,116,101,100,32,113,117,101,"
                               "117,101,32,109,111,100,101,32,39,102,111,111,226,130,172,39]"),
    ({"x-queue-mode": 'a"b\\c'}, "invalid arg 'x-queue-mode' for queue 'q' in vhost '/': "
                                 "\"unsupported queue mode 'a\\\"b\\\\c'\""),
    ({"x-queue-mode": 7}, "invalid arg 'x-queue-mode' for queue 'q' in vhost '/': "
                          "{unacceptable_type,signedint}"),
    ({"x-queue-version": 3}, "invalid arg 'x-queue-version' for queue 'q' in vhost '/': "
                             "\"unsupported queue version '3'\""),
    ({"x-queue-version": "x"}, "invalid arg 'x-queue-version' for queue 'q' in vhost '/': "
                               '"expected integer, got longstr"'),
    ({"x-queue-type": "foo"}, "invalid arg 'x-queue-type' for queue 'q' in vhost '/': "
                              "\"unsupported queue type 'foo'\""),
    ({"x-queue-type": 5}, "invalid arg 'x-queue-type' for queue 'q' in vhost '/': "
                          "{unacceptable_type,signedint}"),
    ({"x-single-active-consumer": 1}, "invalid arg 'x-single-active-consumer' for queue 'q' in "
                                      "vhost '/': {unacceptable_type,signedint}"),
    ({"x-single-active-consumer": "true"}, "invalid arg 'x-single-active-consumer' for queue "
                                           "'q' in vhost '/': {unacceptable_type,longstr}"),
    ({"x-max-age": "1D"}, "invalid arg 'x-max-age' for queue 'q' in vhost '/' of queue type "
                          "rabbit_classic_queue"),
    # S5/S6: Leveret's classic queues take x-delivery-limit and x-consumer-timeout
    ({"x-delivery-limit": -1}, "invalid arg 'x-delivery-limit' for queue 'q' in vhost '/': "
                               "{value_negative,-1}"),
    ({"x-consumer-timeout": "5"}, "invalid arg 'x-consumer-timeout' for queue 'q' in vhost "
                                  "'/': \"expected integer, got longstr\""),
    ({"x-quorum-initial-group-size": 3}, "invalid arg 'x-quorum-initial-group-size' for queue "
                                         "'q' in vhost '/' of queue type rabbit_classic_queue"),
    ({"x-queue-type": "classic", "x-max-age": "1D"},
     "invalid arg 'x-max-age' for queue 'q' in vhost '/' of queue type rabbit_classic_queue"),
    # RabbitMQ's order: its validator list, not the order of the table
    ({"x-max-length": -1, "x-message-ttl": -1},
     "invalid arg 'x-message-ttl' for queue 'q' in vhost '/': {value_negative,-1}"),
    ({"x-overflow": "bad", "x-expires": 0},
     "invalid arg 'x-expires' for queue 'q' in vhost '/': {value_zero,0}"),
    ({"x-max-age": "1D", "x-max-length": -1},
     "invalid arg 'x-max-length' for queue 'q' in vhost '/': {value_negative,-1}"),
    ({"x-queue-type": "foo", "x-expires": 0},
     "invalid arg 'x-queue-type' for queue 'q' in vhost '/': \"unsupported queue type 'foo'\""),
    ({"x-dead-letter-exchange": 1, "x-queue-type": "foo"},
     "invalid type 'signedint' for arg 'x-dead-letter-exchange' in queue 'q' in vhost '/'"),
    # a stream refuses the arguments of other queue types (actors/core/stream.py)
    ({"x-queue-type": "stream", "x-message-ttl": 5},
     "invalid arg 'x-message-ttl' for queue 'q' in vhost '/' of queue type rabbit_stream_queue"),
    # Leveret's x-confirm-on
    ({"x-confirm-on": "sometimes"}, "invalid arg 'x-confirm-on' for queue 'q' in vhost '/': "
                                    "\"unsupported x-confirm-on value 'sometimes'\""),
    ({"x-confirm-on": 1}, "invalid arg 'x-confirm-on' for queue 'q' in vhost '/': "
                          "{unacceptable_type,signedint}"),
])
def test_validate_errors(args, text):
    assert _text(args) == PF + text


@pytest.mark.parametrize("args", [
    None, {}, {"x-message-ttl": 0}, {"x-message-ttl": 315360000000}, {"x-expires": 1},
    {"x-max-length": 0}, {"x-max-length-bytes": 2 ** 40}, {"x-max-priority": 255},
    {"x-max-priority": 0}, {"x-overflow": "drop-head"}, {"x-overflow": "reject-publish"},
    {"x-overflow": "reject-publish-dlx"}, {"x-dead-letter-exchange": ""},
    {"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "k"},
    {"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": ""},
    {"x-queue-mode": "lazy"}, {"x-queue-mode": "default"},
    {"x-queue-version": 2}, {"x-queue-type": "classic"}, {"x-single-active-consumer": True},
    {"x-single-active-consumer": False}, {"x-queue-master-locator": "client-local"},
    {"foo": "bar"},
    {"x-unknown": 1}, {"x-confirm-on": "enqueue"}, {"x-confirm-on": "ack"},
    {"x-confirm-on": "ack-lite"},
])
def test_validate_ok(args):
    assert _text(args) is None


def test_queue_name_and_vhost_in_text():
    assert _text({"x-expires": 0}, "my q", "v/1") == \
        PF + "invalid arg 'x-expires' for queue 'my q' in vhost 'v/1': {value_zero,0}"


@pytest.mark.parametrize("args,text", [
    ({"x-queue-version": 1}, "invalid arg 'x-queue-version' for queue 'q' in vhost '/': "
     "\"queue version 1 is not implemented: Leveret's classic queues are version 2\""),
    ({"x-queue-master-locator": "min-masters"}, "invalid arg 'x-queue-master-locator' for "
     "queue 'q' in vhost '/': \"queue master locator 'min-masters' is not implemented: "
     "Leveret places every queue client-local\""),
    ({"x-queue-master-locator": 5}, "invalid arg 'x-queue-master-locator' for queue 'q' in "
     "vhost '/': {unacceptable_type,signedint}"),
])
def test_arguments_not_implemented_are_refused_not_ignored(args, text):
    assert _text(args) == PF + text


@pytest.mark.parametrize("args,text", [
    ({"x-credit": {"credit": 10, "drain": False}},
     "\"x-credit is AMQP 1.0 link credit, not available over AMQP 0-9-1; use basic.qos "
     "prefetch\""),
    ({"x-credit": 5}, "\"x-credit is AMQP 1.0 link credit, not available over AMQP 0-9-1; "
                      "use basic.qos prefetch\""),
    ({"x-cancel-on-ha-failover": False},
     "\"x-cancel-on-ha-failover=false is not implemented: Leveret always cancels a mirrored "
     "queue's consumers when its master fails over\""),
    ({"x-cancel-on-ha-failover": 1}, "{unacceptable_type,signedint}"),
])
def test_consume_arguments_not_implemented_are_refused(args, text):
    with pytest.raises(ChannelError) as ei:
        qa.check_consume_arguments(args, "q", "/")
    assert ei.value.reply_code == 406
    assert ei.value.text == PF + "invalid arg '" + next(iter(args)) + \
        "' for queue 'q' in vhost '/': " + text


def test_consume_arguments():
    qa.check_consume_arguments(None, "q", "/")
    qa.check_consume_arguments({"x-priority": -5, "x-cancel-on-ha-failover": True,
                                "other": 1}, "q", "/")
    with pytest.raises(ChannelError) as ei:
        qa.check_consume_arguments({"x-priority": "high"}, "q", "/")
    assert ei.value.text == PF + ("invalid arg 'x-priority' for queue 'q' in vhost '/': "
                                  '"expected integer, got longstr"')
    with pytest.raises(ChannelError) as ei:
        qa.check_consume_arguments({"x-stream-offset": "first"}, "q", "/")
    assert ei.value.text == PF + ("invalid arg 'x-stream-offset' for queue 'q' in vhost '/' of "
                                  "queue type rabbit_classic_queue")


# ----------------------------------------------------------------------------- equivalence


def _eq(old, new):
    try:
        qa.assert_equivalent(old, new, "q", "/")
    except ChannelError as e:
        assert e.reply_code == 406
        return e.text
    return None


IQ = "inequivalent arg '{}' for queue 'q' in vhost '/': "


@pytest.mark.parametrize("old,new,text", [
    ({}, {"x-max-length": 5}, IQ.format("x-max-length") +
     "received the value '5' of type 'signedint' but current is none"),
    ({"x-max-length": 10}, {"x-max-length": 5}, IQ.format("x-max-length") +
     "received '5' but current is '10'"),
    ({"x-max-length": 10}, {}, IQ.format("x-max-length") +
     "received none but current is the value '10' of type 'signedint'"),
    ({"x-max-length": 10}, {"x-max-length": 2 ** 40}, IQ.format("x-max-length") +
     "received '1099511627776' but current is '10'"),
    ({"x-max-length": 10}, {"x-max-length": "10"}, IQ.format("x-max-length") +
     "received '10' but current is '10'"),
    ({}, {"x-dead-letter-exchange": "dlx"}, IQ.format("x-dead-letter-exchange") +
     "received the value 'dlx' of type 'longstr' but current is none"),
    ({"x-dead-letter-exchange": "a"}, {"x-dead-letter-exchange": "b"},
     IQ.format("x-dead-letter-exchange") + "received 'b' but current is 'a'"),
    ({"x-single-active-consumer": True}, {}, IQ.format("x-single-active-consumer") +
     "received none but current is the value 'true' of type 'bool'"),
    ({"x-single-active-consumer": True}, {"x-single-active-consumer": False},
     IQ.format("x-single-active-consumer") + "received 'false' but current is 'true'"),
    ({}, {"x-queue-master-locator": "min-masters"}, IQ.format("x-queue-master-locator") +
     "received the value 'min-masters' of type 'longstr' but current is none"),
    ({"x-message-ttl": 1000}, {"x-message-ttl": 1000, "x-expires": 5000},
     IQ.format("x-expires") + "received the value '5000' of type 'signedint' but current is "
                              "none"),
    ({"x-message-ttl": 1000}, {"x-message-ttl": 1000.0}, IQ.format("x-message-ttl") +
     "received '1.0e3' but current is '1000'"),  # Erlang ~p of 1000.0
    ({"x-confirm-on": "ack"}, {}, IQ.format("x-confirm-on") +
     "received none but current is the value 'ack' of type 'longstr'"),
    # the first differing argument in RabbitMQ's list order wins
    ({"x-overflow": "drop-head", "x-expires": 1}, {"x-overflow": "reject-publish",
                                                   "x-expires": 2},
     IQ.format("x-expires") + "received '2' but current is '1'"),
])
def test_assert_equivalent_errors(old, new, text):
    assert _eq(old, new) == PF + text


@pytest.mark.parametrize("old,new", [
    ({}, {}), (None, None), ({"x-max-length": 10}, {"x-max-length": 10}),
    ({}, {"x-queue-type": "classic"}), ({"x-queue-type": "classic"}, {}),
    ({}, {"foo": 1}), ({"foo": 2}, {"foo": 1}),  # arguments outside the list never matter
    ({"x-dead-letter-exchange": "a"}, {"x-dead-letter-exchange": b"a"}),  # same bare value
    ({"x-max-length": 10, "other": "x"}, {"x-max-length": 10}),
])
def test_assert_equivalent_ok(old, new):
    assert _eq(old, new) is None


def _flags(old, new):
    try:
        qa.assert_flags_equivalent(old, new, "q", "/")
    except ChannelError as e:
        return e.reply_code, e.text
    return None


def test_flags_equivalence():
    f = dict(durable=True, exclusive=False, auto_delete=False)
    assert _flags(f, f) is None
    assert _flags(f, dict(f, durable=False)) == (406, PF + "inequivalent arg 'durable' for "
                                                 "queue 'q' in vhost '/': received 'false' but "
                                                 "current is 'true'")
    assert _flags(dict(f, durable=False), f) == (406, PF + "inequivalent arg 'durable' for "
                                                 "queue 'q' in vhost '/': received 'true' but "
                                                 "current is 'false'")
    assert _flags(f, dict(f, auto_delete=True)) == (406, PF + "inequivalent arg 'auto_delete' "
                                                    "for queue 'q' in vhost '/': received "
                                                    "'true' but current is 'false'")
    locked = resource_locked("queue", "q", "/")
    assert _flags(f, dict(f, exclusive=True)) == (405, locked.text)
    ex = dict(durable=False, exclusive=True, auto_delete=False, owner="c1")
    assert _flags(ex, dict(ex)) is None
    assert _flags(ex, dict(ex, owner="c2")) == (405, locked.text)
    assert _flags(ex, dict(ex, exclusive=False)) == (405, locked.text)
    # an exclusive declare counts as non-durable (Durable andalso not Exclusive)
    assert _flags(ex, dict(ex, durable=True)) is None
    # the exclusive check comes before durable
    assert _flags(ex, dict(ex, owner="c2", durable=True, auto_delete=True)) == (405, locked.text)


# ------------------------------------------------------------------------------- exchanges


def _x(old, new):
    keys = ("type", "durable", "auto_delete", "internal", "arguments")
    try:
        qa.assert_exchange_equivalent(dict(zip(keys, old)), dict(zip(keys, new)), "e", "/")
    except ChannelError as e:
        return e.text
    return None


IX = PF + "inequivalent arg '{}' for exchange 'e' in vhost '/': "


def test_exchange_equivalence():
    d = ("direct", True, False, False, {})
    assert _x(d, d) is None
    assert _x(d, ("fanout", True, False, False, {})) == \
        IX.format("type") + "received 'fanout' but current is 'direct'"
    assert _x(d, ("direct", False, False, False, {})) == \
        IX.format("durable") + "received 'false' but current is 'true'"
    assert _x(d, ("direct", True, True, False, {})) == \
        IX.format("auto_delete") + "received 'true' but current is 'false'"
    assert _x(d, ("direct", True, False, True, {})) == \
        IX.format("internal") + "received 'true' but current is 'false'"
    assert _x(d, ("direct", True, False, False, {"alternate-exchange": "ae"})) == \
        IX.format("alternate-exchange") + "received the value 'ae' of type 'longstr' but " \
                                          "current is none"
    assert _x(("direct", True, False, False, {"alternate-exchange": "ae"}),
              ("direct", True, False, False, {"alternate-exchange": "af"})) == \
        IX.format("alternate-exchange") + "received 'af' but current is 'ae'"
    assert _x(d, ("direct", True, False, False, {"alternate-exchange": 5})) == \
        IX.format("alternate-exchange") + "received the value '5' of type 'signedint' but " \
                                          "current is none"
    assert _x(("direct", True, False, False, {"foo": 1}),
              ("direct", True, False, False, {"foo": 2})) is None


def test_exchange_equivalence_accepts_exchange_def():
    from actors.core.routing import Router
    r = Router()
    r.add_vhost("/")
    r.declare_exchange("/", "e", "topic", True, False, False, {"alternate-exchange": "ae"})
    x = r.exchange("/", "e")
    qa.assert_exchange_equivalent(x, x, "e", "/")
    with pytest.raises(ChannelError):
        qa.assert_exchange_equivalent(x, dict(type="topic", durable=True, auto_delete=False,
                                              internal=False, arguments={}), "e", "/")


def test_alternate_exchange_arg_type():
    qa.check_alternate_exchange_arg({"alternate-exchange": "ae"}, "e", "/")
    qa.check_alternate_exchange_arg(None, "e", "/")
    with pytest.raises(ChannelError) as ei:
        qa.check_alternate_exchange_arg({"alternate-exchange": 5}, "e", "/")
    assert ei.value.text == PF + ("invalid type 'signedint' for arg 'alternate-exchange' in "
                                  "exchange 'e' in vhost '/'")


def test_values_equal():
    ve = qa.values_equal
    assert ve(1, 1.0) and not ve(1, 1.0, exact=True)
    assert not ve(True, 1) and not ve(1, True) and ve(False, False)
    assert ve("a", b"a") and not ve("a", "b")
    assert ve(None, None) and not ve(None, 0)
    assert ve([1, {"a": "b"}], [1, {"a": b"b"}])
    assert not ve({"a": 1, "b": 2}, {"b": 2, "a": 1})  # tables compare in order
    assert not ve(decimal.Decimal("1.5"), decimal.Decimal("1.50"))
    assert not ve(decimal.Decimal("1"), 1)
