"""protocol.methods: every method class, its attributes, round trips and decode errors."""

from __future__ import annotations

import os
import struct
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import commands as pc

import protocol
from protocol import methods as M
from protocol.codec_errors import FrameError, SyntaxError_

sys.path.insert(0, os.path.dirname(__file__))
import protocol_strategies as S  # noqa: E402

ALL = sorted(M.METHODS.values(), key=lambda c: c.INDEX)
PAMQP = {cls.index: cls for cls in pc.INDEX_MAPPING.values()}

EXPECTED_NAMES = """
ConnectionStart ConnectionStartOk ConnectionSecure ConnectionSecureOk ConnectionTune
ConnectionTuneOk ConnectionOpen ConnectionOpenOk ConnectionClose ConnectionCloseOk
ConnectionBlocked ConnectionUnblocked ConnectionUpdateSecret ConnectionUpdateSecretOk
ChannelOpen ChannelOpenOk ChannelFlow ChannelFlowOk ChannelClose ChannelCloseOk
AccessRequest AccessRequestOk
ExchangeDeclare ExchangeDeclareOk ExchangeDelete ExchangeDeleteOk ExchangeBind ExchangeBindOk
ExchangeUnbind ExchangeUnbindOk
QueueDeclare QueueDeclareOk QueueBind QueueBindOk QueuePurge QueuePurgeOk QueueDelete
QueueDeleteOk QueueUnbind QueueUnbindOk
BasicQos BasicQosOk BasicConsume BasicConsumeOk BasicCancel BasicCancelOk BasicPublish
BasicReturn BasicDeliver BasicGet BasicGetOk BasicGetEmpty BasicAck BasicReject
BasicRecoverAsync BasicRecover BasicRecoverOk BasicNack
ConfirmSelect ConfirmSelectOk TxSelect TxSelectOk TxCommit TxCommitOk TxRollback TxRollbackOk
""".split()


def test_every_method_exists_and_is_exported():
    assert len(EXPECTED_NAMES) == len(M.METHODS) == 66
    for name in EXPECTED_NAMES:
        cls = getattr(M, name)
        assert getattr(protocol, name) is cls
        assert M.METHODS[cls.INDEX] is cls
        assert cls.INDEX == cls.CLASS_ID << 16 | cls.METHOD_ID


def test_same_methods_ids_names_and_flags_as_pamqp():
    # pamqp has everything but access.request/-ok (dropped from 0-9-1, kept by RabbitMQ).
    ours = {idx for idx in M.METHODS if idx >> 16 != 30}
    assert ours == set(PAMQP)
    for idx, theirs in PAMQP.items():
        cls = M.METHODS[idx]
        assert list(cls.FIELDS) == list(theirs.__slots__), cls.NAME
        assert [theirs.amqp_type(f) for f in theirs.__slots__] == list(cls.FIELD_TYPES)
        assert cls.SYNCHRONOUS == theirs.synchronous, cls.NAME
        assert cls.__name__ == theirs.name.replace(".", "")
        assert sorted(r.__name__ for r in cls.REPLIES) == sorted(
            n.replace(".", "") for n in theirs.valid_responses
        )


@pytest.mark.parametrize(
    "cls,slots",
    [(cls, cls.__slots__) for cls in ALL],
    ids=[cls.NAME for cls in ALL],
)
def test_slotted_with_class_attributes(cls, slots):
    obj = cls()
    assert not hasattr(obj, "__dict__")
    assert tuple(slots) == cls.FIELDS
    assert cls.NAME == f"{cls.NAME.split('.')[0]}.{cls.NAME.split('.')[1]}"
    assert cls.HAS_CONTENT == (
        cls.NAME in ("basic.publish", "basic.return", "basic.deliver", "basic.get-ok")
    )
    with pytest.raises(AttributeError):
        obj.no_such_field = 1


def test_defaults():
    assert M.BasicConsume().as_dict() == dict(
        ticket=0, queue="", consumer_tag="", no_local=False, no_ack=False, exclusive=False,
        nowait=False, arguments={},
    )
    assert M.BasicConsume().arguments is not M.BasicConsume().arguments
    assert M.ExchangeDeclare().exchange_type == "direct"
    assert M.BasicNack().requeue is True and M.BasicReject().requeue is True
    assert M.ConnectionStart().version_minor == 9
    assert M.ConnectionOpen().virtual_host == "/"
    assert M.ChannelOpen().out_of_band == ""
    assert M.ConnectionClose().reply_code == 200
    assert M.BasicQos().global_ is False


def test_synchronous_and_replies():
    assert M.BasicGet.REPLIES == (M.BasicGetOk, M.BasicGetEmpty)
    assert M.QueueDeclare.REPLIES == (M.QueueDeclareOk,)
    assert M.ConfirmSelect.SYNCHRONOUS and M.ConfirmSelect.REPLIES == (M.ConfirmSelectOk,)
    assert not M.BasicPublish.SYNCHRONOUS and M.BasicPublish.REPLIES == ()


def test_bits_share_an_octet():
    m = M.ExchangeDeclare(exchange="x", passive=True, auto_delete=True, nowait=True)
    raw = m.encode()
    # ticket, "x", "direct", one bits octet (passive=1, durable=2, auto_delete=4, internal=8,
    # nowait=16), empty table
    assert raw == b"\x00\x00\x01x\x06direct" + bytes([1 | 4 | 16]) + b"\x00\x00\x00\x00"
    assert M.BasicNack(5, multiple=False, requeue=True).encode() == struct.pack(">QB", 5, 2)
    assert M.AccessRequest().encode() == b"\x05/data" + bytes([2 | 4 | 8 | 16])
    assert M.QueueDeclare(durable=True, exclusive=True).encode()[3] == 2 | 4


def test_encode_matches_pamqp_for_defaults_and_examples():
    cases = [
        (M.BasicPublish(exchange="e", routing_key="r", mandatory=True),
         pc.Basic.Publish(exchange="e", routing_key="r", mandatory=True)),
        (M.QueueDeclare(queue="q", durable=True, arguments={"x-max-length": 10}),
         pc.Queue.Declare(queue="q", durable=True, arguments={"x-max-length": 10})),
        (M.ConnectionTune(2047, 131072, 60), pc.Connection.Tune(2047, 131072, 60)),
        (M.BasicAck(7, True), pc.Basic.Ack(7, True)),
        (M.TxSelect(), pc.Tx.Select()),
    ]
    for ours, theirs in cases:
        assert ours.encode() == theirs.marshal()


def test_repr_eq_iter_pickle():
    import pickle

    m = M.BasicDeliver("ctag", 5, True, "ex", "rk")
    assert repr(m) == (
        "BasicDeliver(consumer_tag='ctag', delivery_tag=5, redelivered=True, "
        "exchange='ex', routing_key='rk')"
    )
    assert m == M.BasicDeliver("ctag", 5, True, "ex", "rk")
    assert m != M.BasicDeliver("ctag", 6, True, "ex", "rk")
    assert m != M.BasicGetOk()
    assert dict(m)["delivery_tag"] == 5
    assert pickle.loads(pickle.dumps(m)) == m


def test_long_strings_accept_bytes_and_decode_like_pamqp():
    m = M.ConnectionStartOk(response=b"\x00guest\x00guest")
    assert M.ConnectionStartOk.decode(m.encode()).response == "\x00guest\x00guest"
    m = M.ConnectionSecure(challenge=b"\xff\x00")
    assert M.ConnectionSecure.decode(m.encode()).challenge == b"\xff\x00"


def test_encode_errors_are_value_errors():
    with pytest.raises(ValueError):
        M.BasicAck(delivery_tag=-1).encode()
    with pytest.raises(ValueError):
        M.BasicQos(prefetch_count=70000).encode()
    with pytest.raises(ValueError):
        M.QueueDeclare(queue="q" * 256).encode()


@pytest.mark.parametrize("cls", ALL, ids=[cls.NAME for cls in ALL])
def test_round_trip_defaults(cls):
    obj = cls()
    raw = obj.encode()
    assert cls.decode(raw) == obj
    # at an offset, bounded by end, as the frame decoder calls it
    assert cls.decode(b"junk" + raw + b"more", 4, 4 + len(raw)) == obj


@pytest.mark.parametrize("cls", ALL, ids=[cls.NAME for cls in ALL])
@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_round_trip_random(cls, data):
    kwargs = data.draw(S.method_kwargs(cls))
    obj = cls(**kwargs)
    back = cls.decode(obj.encode())
    for name, value in kwargs.items():
        assert getattr(back, name) == S.normalize(value), name


@pytest.mark.parametrize(
    "cls", [c for c in ALL if c.FIELDS], ids=[c.NAME for c in ALL if c.FIELDS]
)
def test_truncated_and_trailing_arguments_are_502(cls):
    raw = cls().encode()
    for cut in range(len(raw)):
        with pytest.raises(SyntaxError_) as info:
            cls.decode(raw[:cut])
        err = info.value
        assert (err.reply_code, err.class_id, err.method_id) == (502, cls.CLASS_ID, cls.METHOD_ID)
        assert cls.NAME in err.text
    with pytest.raises(SyntaxError_, match="trailing"):
        cls.decode(raw + b"\x00")


def test_empty_methods_reject_trailing_bytes():
    with pytest.raises(SyntaxError_, match="trailing"):
        M.TxSelect.decode(b"\x00")


def test_invalid_utf8_names_are_501_as_in_rabbitmq():
    raw = M.QueueDeclare(queue="ab").encode().replace(b"\x02ab", b"\x02\xff\xfe")
    with pytest.raises(SyntaxError_) as info:
        M.QueueDeclare.decode(raw)
    assert info.value.reply_code == 501
    assert (info.value.class_id, info.value.method_id) == (50, 10)
    assert info.value.text == "Malformed UTF-8 in shortstr"
    raw = M.BasicPublish(exchange="ab").encode().replace(b"\x02ab", b"\x02\xc3\x28")
    with pytest.raises(SyntaxError_, match="Malformed UTF-8 in shortstr"):
        M.BasicPublish.decode(raw)


def test_bad_table_in_arguments_is_502_with_ids():
    raw = M.QueueDeclare(queue="q").encode()[:-4] + b"\x00\x00\x00\x03\x01kZ"
    with pytest.raises(SyntaxError_) as info:
        M.QueueDeclare.decode(raw)
    assert (info.value.class_id, info.value.method_id) == (50, 10)
    assert "arguments" in info.value.text
    assert isinstance(info.value, FrameError)
