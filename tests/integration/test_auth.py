"""Authentication mechanisms, virtual hosts and permissions (E3). Users and vhosts are created with
the broker's ctl tool (leveretctl, or rabbitmqctl in external mode)."""
from __future__ import annotations

import amqp
import pika
import pytest
from pamqp import commands, encode
from pika.exceptions import ChannelClosedByBroker

import rawamqp
from amqp_helpers import declare, get_all, safe_close, unique


@pytest.fixture(scope="module")
def tenant(broker):
    """A vhost with two users: `limited` may configure and read anything but write only to
    resources named allowed-*; `outsider` has no permissions on the vhost."""
    vhost, limited, outsider, pw = unique("vh"), unique("limited"), unique("outsider"), "s3cret"
    broker.ctl("add_vhost", vhost)
    broker.ctl("add_user", limited, pw)
    broker.ctl("add_user", outsider, pw)
    broker.ctl("set_permissions", "-p", vhost, limited, ".*", "^allowed-.*", ".*")
    broker.ctl("set_permissions", "-p", vhost, broker.user, ".*", ".*", ".*")
    yield {"vhost": vhost, "limited": limited, "outsider": outsider, "password": pw}
    broker.ctl("delete_user", limited, check=False)
    broker.ctl("delete_user", outsider, check=False)
    broker.ctl("delete_vhost", vhost, check=False)


def _amqplain_response(user: str, password: str) -> str:
    # AMQPLAIN: a field table without its 4-byte length prefix
    return encode.field_table({"LOGIN": user, "PASSWORD": password})[4:].decode("latin-1")


def test_plain_auth_with_pika(broker):
    c = broker.connection()
    assert c.is_open
    safe_close(c)


def test_plain_auth_raw(broker):
    c = rawamqp.RawClient(broker.host, broker.port)
    try:
        c.handshake(user=broker.user, password=broker.password, vhost=broker.vhost,
                    mechanism="PLAIN")
        c.open_channel(1)
    finally:
        c.close()


def test_amqplain_auth_raw(broker):
    c = rawamqp.RawClient(broker.host, broker.port)
    try:
        c.handshake(vhost=broker.vhost, mechanism="AMQPLAIN",
                    response=_amqplain_response(broker.user, broker.password))
        c.open_channel(1)
    finally:
        c.close()


def test_amqplain_wrong_password_raw__E3(broker):
    c = rawamqp.RawClient(broker.host, broker.port)
    try:
        c.send(rawamqp.PROTOCOL_HEADER)
        c.expect(commands.Connection.Start)
        c.send_method(0, commands.Connection.StartOk(
            client_properties={"capabilities": {"authentication_failure_close": True}},
            mechanism="AMQPLAIN", response=_amqplain_response(broker.user, "wrong")))
        close = c.expect_connection_close()
        assert close.reply_code == 403
    finally:
        c.close()


def test_amqplain_auth_with_py_amqp(broker):
    conn = amqp.Connection(host=f"{broker.host}:{broker.port}", userid=broker.user,
                           password=broker.password, virtual_host=broker.vhost,
                           login_method="AMQPLAIN", connect_timeout=5)
    conn.connect()
    try:
        ch = conn.channel()
        q, _, _ = ch.queue_declare(unique("q"), auto_delete=True)
        ch.basic_publish(amqp.Message(b"via-amqplain"), exchange="", routing_key=q)
        msg = ch.basic_get(q, no_ack=True)
        assert msg.body == b"via-amqplain"
    finally:
        conn.close()


def test_amqplain_wrong_password_with_py_amqp__E3(broker):
    conn = amqp.Connection(host=f"{broker.host}:{broker.port}", userid=broker.user,
                           password="wrong", virtual_host=broker.vhost,
                           login_method="AMQPLAIN", connect_timeout=5)
    with pytest.raises(amqp.exceptions.AccessRefused) as ei:
        conn.connect()
    assert ei.value.reply_code == 403


def test_unsupported_mechanism_refused__E3(broker):
    c = rawamqp.RawClient(broker.host, broker.port)
    try:
        c.send(rawamqp.PROTOCOL_HEADER)
        c.expect(commands.Connection.Start)
        c.send_method(0, commands.Connection.StartOk(
            client_properties={"capabilities": {"authentication_failure_close": True}},
            mechanism="NO-SUCH-MECHANISM", response=""))
        frames = [f for _, f in c.read_until_closed(timeout=5)]
        assert not any(isinstance(f, commands.Connection.Tune) for f in frames), frames
    finally:
        c.close()


def test_new_user_and_vhost_work__E3(broker, tenant):
    c = broker.connection(user=tenant["limited"], password=tenant["password"],
                          virtual_host=tenant["vhost"])
    try:
        ch = c.channel()
        q = declare(ch, "allowed-" + unique("q"))
        x = "allowed-" + unique("x")
        ch.exchange_declare(x, "fanout", auto_delete=True)
        ch.queue_bind(q, x)
        ch.basic_publish(x, "", b"ok")
        assert [d.body for d in get_all(ch, q)] == [b"ok"]
    finally:
        safe_close(c)


def test_vhosts_are_isolated__E3(broker, tenant):
    c = broker.connection(virtual_host=tenant["vhost"])
    try:
        q = declare(c.channel(), unique("q"))
        default = broker.connection()
        try:
            with pytest.raises(ChannelClosedByBroker) as ei:
                default.channel().queue_declare(q, passive=True)
            assert ei.value.reply_code == 404
        finally:
            safe_close(default)
    finally:
        safe_close(c)


def test_wrong_password_for_new_user__E3(broker, tenant):
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        broker.connection(user=tenant["limited"], password="wrong", virtual_host=tenant["vhost"])


def test_user_without_vhost_permission_not_allowed__E3(broker, tenant):
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as ei:
        broker.connection(user=tenant["outsider"], password=tenant["password"],
                          virtual_host=tenant["vhost"])
    assert "530" in str(ei.value) and "NOT_ALLOWED" in str(ei.value)


def test_user_without_vhost_permission_raw__E3(broker, tenant):
    c = rawamqp.RawClient(broker.host, broker.port)
    try:
        c.handshake(user=tenant["outsider"], password=tenant["password"], open_vhost=False)
        c.send_method(0, commands.Connection.Open(virtual_host=tenant["vhost"]))
        close = c.expect_connection_close()
        assert close.reply_code == 530
    finally:
        c.close()


def test_write_permission_denied_on_exchange__E3(broker, tenant):
    c = broker.connection(user=tenant["limited"], password=tenant["password"],
                          virtual_host=tenant["vhost"])
    try:
        ch = c.channel()
        denied = "denied-" + unique("x")
        ch.exchange_declare(denied, "fanout", auto_delete=True)   # configure is allowed
        ch.basic_publish(denied, "", b"nope")
        with pytest.raises(ChannelClosedByBroker) as ei:
            ch.exchange_declare(denied, passive=True)
        assert ei.value.reply_code == 403
        assert ei.value.reply_text.startswith("ACCESS_REFUSED")
        assert denied in ei.value.reply_text
        assert c.is_open
        # the default exchange is amq.default, which the pattern does not allow either
        ch = c.channel()
        q = declare(ch, "allowed-" + unique("q"))
        ch.basic_publish("", q, b"nope")
        with pytest.raises(ChannelClosedByBroker) as ei:
            ch.queue_declare(q, passive=True)
        assert ei.value.reply_code == 403
    finally:
        safe_close(c)


def test_bind_needs_write_on_queue__E3(broker, tenant):
    c = broker.connection(user=tenant["limited"], password=tenant["password"],
                          virtual_host=tenant["vhost"])
    try:
        ch = c.channel()
        q = declare(ch, "denied-" + unique("q"))
        with pytest.raises(ChannelClosedByBroker) as ei:
            ch.queue_bind(q, "amq.fanout")
        assert ei.value.reply_code == 403
    finally:
        safe_close(c)
