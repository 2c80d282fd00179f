"""actors/core/connection.py (ConnectionCore) without IO: bytes in through `receive`, and what
it asks of its Reader recorded by core_fakes.FakeShell (frames written, channels opened, command
batches handed to channels, close timers, termination)."""

from types import SimpleNamespace

import pytest

from actors.core.connection import ConnectionCore
from core_fakes import NODE, FakeShell, config, frame, make_replica
from protocol import methods as am
from protocol.constants import PROTOCOL_HEADER
from protocol.fields import encode_table
from protocol.frames import (Command, encode_command, encode_content, encode_frame,
                             encode_heartbeat, encode_method)
from protocol.properties import BasicProperties

LOCAL = ("127.0.0.1", 40000)
CAPS = {"authentication_failure_close": True, "consumer_cancel_notify": True}


def mk(peer=LOCAL, replica=None, **cfg):
    shell = FakeShell()
    core = ConnectionCore(config(**cfg), replica or make_replica(), peer, "w1/7", shell.port())
    return core, shell


def plain(user="guest", password="guest"):
    return b"\x00" + user.encode() + b"\x00" + password.encode()


def amqplain(user="guest", password="guest"):
    return encode_table({"LOGIN": user, "PASSWORD": password})[4:]


def start_ok(mechanism="PLAIN", response=None, caps=CAPS):
    return frame(0, am.ConnectionStartOk(client_properties={"capabilities": caps,
                                                            "product": "test"},
                                         mechanism=mechanism,
                                         response=plain() if response is None else response))


def tune_ok(channel_max=2047, frame_max=131072, heartbeat=0):
    return frame(0, am.ConnectionTuneOk(channel_max=channel_max, frame_max=frame_max,
                                        heartbeat=heartbeat))


def handshake(core, shell, **tune):
    core.receive(PROTOCOL_HEADER + start_ok() + tune_ok(**tune) +
                 frame(0, am.ConnectionOpen(virtual_host="/")))
    assert core.state == "running", shell.events
    shell.clear()


def running(**kw):
    core, shell = mk(**kw)
    handshake(core, shell)
    return core, shell


def opened(*numbers, **kw):
    core, shell = running(**kw)
    core.receive(b"".join(frame(n, am.ChannelOpen()) for n in numbers))
    shell.clear()
    return core, shell


def conn_close(shell):
    closes = [x for x in shell.methods() if isinstance(x, am.ConnectionClose)]
    assert len(closes) == 1, shell.events
    c = closes[0]
    return c.reply_code, c.reply_text, c.class_id, c.method_id


def commands(shell):
    return [(e[1], [type(c.method).__name__ for c in e[2]]) for e in shell.events
            if e[0] == "commands"]


# --- protocol header ------------------------------------------------------------------------
def test_protocol_header_gets_connection_start():
    core, shell = mk()
    core.receive(PROTOCOL_HEADER[:3])
    assert shell.events == []
    core.receive(PROTOCOL_HEADER[3:])
    [start] = shell.methods()
    assert isinstance(start, am.ConnectionStart)
    assert (start.version_major, start.version_minor) == (0, 9)
    assert start.mechanisms == "AMQPLAIN PLAIN" and start.locales == "en_US"
    caps = start.server_properties["capabilities"]
    assert caps["publisher_confirms"] is True and caps["basic.nack"] is True
    assert caps["authentication_failure_close"] is True
    assert start.server_properties["product"] == "Leveret"
    assert core.state == "start"


@pytest.mark.parametrize("data", [b"AMQP\x01\x01\x00\x0a", b"GET / HTTP/1.1\r\n\r\n",
                                  b"AMQP\x00\x00\x08\x00"])
def test_bad_protocol_header_gets_server_header_then_close__E1(data):
    core, shell = mk()
    core.receive(data)
    assert shell.events == [("write", PROTOCOL_HEADER), ("terminate", "bad protocol header")]
    assert core.state == "closed"
    shell.clear()
    core.receive(PROTOCOL_HEADER)  # closed: nothing more
    assert shell.events == []


def test_second_protocol_header_is_frame_error():
    core, shell = running()
    core.receive(PROTOCOL_HEADER)
    code, text, *_ = conn_close(shell)
    assert code == 501 and text.startswith("FRAME_ERROR - ")


# --- authentication -------------------------------------------------------------------------
def test_plain_login_then_tune():
    core, shell = mk(heartbeat=30, frame_max=65536, channel_max=100)
    core.receive(PROTOCOL_HEADER + start_ok())
    assert shell.methods()[1:] == [am.ConnectionTune(channel_max=100, frame_max=65536,
                                                     heartbeat=30)]
    assert core.user == "guest" and core.state == "tune" and core.mechanism == "PLAIN"
    assert core.capabilities == CAPS


def test_amqplain_login():
    core, shell = mk()
    core.receive(PROTOCOL_HEADER + start_ok("AMQPLAIN", amqplain()))
    assert isinstance(shell.methods()[-1], am.ConnectionTune)
    assert core.user == "guest" and core.mechanism == "AMQPLAIN"


def test_amqplain_wrong_password_refused__E3():
    core, shell = mk()
    core.receive(PROTOCOL_HEADER + start_ok("AMQPLAIN", amqplain("guest", "nope")))
    assert conn_close(shell) == (403, "ACCESS_REFUSED - Login was refused using authentication "
                                 "mechanism AMQPLAIN. For details see the broker logfile.",
                                 10, 11)


def test_wrong_password_with_failure_close_capability__E3():
    core, shell = mk()
    core.receive(PROTOCOL_HEADER + start_ok(response=plain("guest", "wrong")))
    assert conn_close(shell) == (403, "ACCESS_REFUSED - Login was refused using authentication "
                                 "mechanism PLAIN. For details see the broker logfile.", 10, 11)
    assert shell.kinds()[-1] == "close_after" and core.state == "closing"
    assert core.user is None


def test_wrong_password_without_capability_drops_connection__E3():
    core, shell = mk()
    core.receive(PROTOCOL_HEADER + start_ok(response=plain("guest", "wrong"), caps={}))
    assert [type(x).__name__ for x in shell.methods()] == ["ConnectionStart"]
    assert shell.events[-1] == ("terminate", "authentication failed")
    assert core.state == "closed"


def test_unknown_user_refused__E3():
    core, shell = mk()
    core.receive(PROTOCOL_HEADER + start_ok(response=plain("mallory", "guest")))
    assert conn_close(shell)[0] == 403


def test_unknown_mechanism():
    core, shell = mk()
    core.receive(PROTOCOL_HEADER + start_ok("SCRAM-SHA-1", b""))
    assert conn_close(shell) == (503, "COMMAND_INVALID - unknown authentication mechanism "
                                 "'SCRAM-SHA-1'", 10, 11)


def test_malformed_plain_response_is_syntax_error():
    core, shell = mk()
    core.receive(PROTOCOL_HEADER + start_ok(response=b"guest\x00guest"))
    code, text, *_ = conn_close(shell)
    assert code == 502 and text.startswith("SYNTAX_ERROR - response ")
    assert core.user is None


@pytest.mark.parametrize("peer", [("10.0.0.5", 1234), ("192.168.1.1", 5), ("not-an-ip", 1),
                                  ("::ffff:10.0.0.5", 1), ("fe80::1", 1)])
def test_guest_only_from_loopback__E3(peer):
    core, shell = mk(peer=peer)
    core.receive(PROTOCOL_HEADER + start_ok())
    assert conn_close(shell)[0] == 403
    assert core.user is None


@pytest.mark.parametrize("host", ["127.0.0.1", "127.5.6.7", "::1", "::ffff:127.0.0.1",
                                  "::ffff:127.9.8.7"])
def test_guest_from_any_loopback_address(host):
    core, shell = mk(peer=(host, 1))
    core.receive(PROTOCOL_HEADER + start_ok())
    assert core.state == "tune"


def test_other_user_from_remote_host():
    replica = make_replica()
    replica.auth.add_user("alice", "pw")
    replica.auth.set_permissions("alice", "/", ".*", ".*", ".*")
    core, shell = mk(peer=("10.0.0.5", 1), replica=replica)
    core.receive(PROTOCOL_HEADER + start_ok(response=plain("alice", "pw")) + tune_ok() +
                 frame(0, am.ConnectionOpen(virtual_host="/")))
    assert core.state == "running" and core.user == "alice"


# --- tune -----------------------------------------------------------------------------------
@pytest.mark.parametrize("tune, why", [
    (dict(frame_max=4095), "negotiated frame_max = 4095 is lower than the minimum allowed "
                           "value (4096)"),
    (dict(frame_max=131073), "negotiated frame_max = 131073 is higher than the maximum "
                             "allowed value (131072)"),
    (dict(frame_max=0), "negotiated frame_max = 0 is higher than the maximum allowed value "
                        "(131072)"),
    (dict(channel_max=2048), "negotiated channel_max = 2048 is higher than the maximum "
                             "allowed value (2047)"),
    (dict(channel_max=0), "negotiated channel_max = 0 (no limit) is higher than the maximum "
                          "allowed value (2047)"),
])
def test_tune_ok_out_of_limits_closes_the_socket_silently(tune, why, caplog):
    """rabbit_reader:validate_negotiated_integer_value/3 (texts seen in RabbitMQ 3.10.8's log):
    before connection.open it only closes the socket, 3 s later (docs #12); connection.open
    is not read."""
    core, shell = mk()
    core.receive(PROTOCOL_HEADER + start_ok())
    shell.clear()
    with caplog.at_level("WARNING"):
        core.receive(tune_ok(**tune) + frame(0, am.ConnectionOpen(virtual_host="/")))
    assert shell.events == [("close_after", 3)]
    assert core.state == "closed" and core.vhost is None
    assert f"failed to negotiate connection parameters: {why}" in caplog.text


def test_tune_ok_values_and_heartbeat_are_the_clients():
    core, shell = mk()
    core.receive(PROTOCOL_HEADER + start_ok() + tune_ok(channel_max=10, frame_max=8192,
                                                        heartbeat=7))
    assert (core.frame_max, core.channel_max, core.heartbeat) == (8192, 10, 7)
    assert core.state == "open"
    core.receive(frame(0, am.ConnectionOpen(virtual_host="/")))
    assert shell.events[-2:] == [("write", encode_method(0, am.ConnectionOpenOk())),
                                 ("opened", 7)]


def test_negotiated_frame_max_applies_to_later_frames__E2():
    core, shell = mk()
    handshake(core, shell, frame_max=4096)
    assert core.frame_max == 4096
    core.receive(frame(1, am.ChannelOpen()))
    shell.clear()
    big = encode_command(1, am.BasicPublish(routing_key="q"), b"\x00\x00", b"x" * 5000,
                         frame_max=131072)
    core.receive(big)
    code, text, *_ = conn_close(shell)
    assert code == 501 and text.startswith("FRAME_ERROR - ")
    assert commands(shell) == []


def test_negotiated_channel_max():
    core, shell = mk()
    """rabbit_reader:create_channel/2 counts the open channels; a number above channel_max
    is taken (RabbitMQ 3.10.8)."""
    handshake(core, shell, channel_max=2)
    core.receive(frame(2, am.ChannelOpen()))
    core.receive(frame(900, am.ChannelOpen()))
    assert shell.kinds() == ["open_channel", "write"] * 2
    core.receive(frame(3, am.ChannelOpen()))
    assert conn_close(shell)[:2] == (530, "NOT_ALLOWED - number of channels opened (2) has "
                                     "reached the negotiated channel_max (2)")


# --- connection.open ------------------------------------------------------------------------
def test_open_unknown_vhost_not_allowed__E3():
    core, shell = mk()
    core.receive(PROTOCOL_HEADER + start_ok() + tune_ok())
    shell.clear()
    core.receive(frame(0, am.ConnectionOpen(virtual_host="nope")))
    assert conn_close(shell) == (530, "NOT_ALLOWED - vhost nope not found", 10, 40)
    assert core.vhost is None


def test_open_vhost_without_permission_not_allowed__E3():
    replica = make_replica()
    replica.auth.add_vhost("other")
    core, shell = mk(replica=replica)
    core.receive(PROTOCOL_HEADER + start_ok() + tune_ok())
    shell.clear()
    core.receive(frame(0, am.ConnectionOpen(virtual_host="other")))
    assert conn_close(shell) == (530, "NOT_ALLOWED - access to vhost 'other' refused for user "
                                 "'guest'", 10, 40)


def test_whole_handshake_in_one_read():
    core, shell = mk()
    core.receive(PROTOCOL_HEADER + start_ok() + tune_ok(heartbeat=10) +
                 frame(0, am.ConnectionOpen(virtual_host="/")) + frame(1, am.ChannelOpen()))
    assert [type(x).__name__ for x in shell.methods()] == [
        "ConnectionStart", "ConnectionTune", "ConnectionOpenOk", "ChannelOpenOk"]
    assert ("opened", 10) in shell.events
    assert core.vhost == "/" and core.state == "running"


def test_methods_out_of_order_in_handshake():
    """Before connection.open RabbitMQ may just close the socket (docs #12): only check that
    the connection does not go on."""
    core, shell = mk()
    core.receive(PROTOCOL_HEADER + frame(0, am.ConnectionOpen(virtual_host="/")) + start_ok())
    assert [type(x).__name__ for x in shell.methods()][:1] == ["ConnectionStart"]
    assert not [x for x in shell.methods() if isinstance(x, (am.ConnectionOpenOk,
                                                            am.ConnectionTune))]
    assert core.vhost is None and core.user is None and core.state in ("closing", "closed")


def test_frame_on_channel_before_open_is_channel_error__E2():
    core, shell = mk()
    core.receive(PROTOCOL_HEADER + start_ok() + frame(1, am.ChannelOpen()))
    assert conn_close(shell)[:2] == (504, "CHANNEL_ERROR - frame on channel 1 before "
                                     "connection.open")
    assert shell.channels == {}


# --- channels -------------------------------------------------------------------------------
def test_channel_open_starts_channel_with_connection_facts():
    core, shell = running()
    core.receive(frame(1, am.ChannelOpen()))
    assert shell.kinds() == ["open_channel", "write"]
    assert shell.methods() == [am.ChannelOpenOk()]
    assert shell.events[1] == ("write", encode_method(1, am.ChannelOpenOk()))
    info = shell.channels[1]
    assert (info.owner, info.user, info.vhost, info.frame_max, info.capabilities,
            info.node) == ("w1/7", "guest", "/", 131072, CAPS, NODE)


def test_commands_batched_per_channel_per_read():
    core, shell = opened(1, 2)
    props = BasicProperties(delivery_mode=2).encode()
    core.receive(frame(1, am.QueueDeclare(queue="a")) + frame(2, am.BasicQos(prefetch_count=1)) +
                 encode_command(1, am.BasicPublish(routing_key="a"), props, b"hello",
                                frame_max=4096 + 8) + frame(1, am.BasicAck(delivery_tag=1)))
    assert commands(shell) == [(1, ["QueueDeclare", "BasicPublish", "BasicAck"]),
                               (2, ["BasicQos"])]
    publish = shell.events[0][2][1]
    assert publish == Command(1, am.BasicPublish(routing_key="a"), props, b"hello")
    assert publish.properties.delivery_mode == 2


def test_content_split_over_reads_is_assembled():
    core, shell = opened(1)
    data = encode_command(1, am.BasicPublish(routing_key="a"), b"\x00\x00", b"y" * 10000,
                          frame_max=4096)
    for i in range(0, len(data), 1000):
        core.receive(data[i:i + 1000])
    [(number, [publish])] = [(e[1], e[2]) for e in shell.events if e[0] == "commands"]
    assert number == 1 and publish.body == b"y" * 10000


def test_channel_open_flushes_earlier_commands_first():
    core, shell = opened(1)
    core.receive(frame(1, am.BasicQos(prefetch_count=1)) + frame(2, am.ChannelOpen()) +
                 frame(2, am.BasicQos(prefetch_count=2)))
    assert shell.kinds() == ["commands", "open_channel", "write", "commands"]


def test_second_channel_open_is_channel_error__E2():
    core, shell = opened(1)
    core.receive(frame(1, am.ChannelOpen()))
    assert conn_close(shell) == (504, "CHANNEL_ERROR - second 'channel.open' seen", 20, 10)


def test_channel_method_on_channel_zero_is_channel_error__E2():
    """RabbitMQ's text is "unexpected method in connection state running" (docs #11)."""
    core, shell = running()
    core.receive(frame(0, am.QueueDeclare(queue="q")))
    code, text, class_id, method_id = conn_close(shell)
    assert (code, class_id, method_id) == (504, 50, 10)
    assert text.startswith("CHANNEL_ERROR - ")


@pytest.mark.parametrize("method", [am.ConnectionOpen(virtual_host="/"),
                                    am.ConnectionTuneOk(frame_max=131072),
                                    am.ConnectionStartOk(response=b"\x00guest\x00guest")])
def test_connection_method_out_of_place_while_running_is_channel_error__E2(method):
    core, shell = running()
    core.receive(frame(0, method))
    code, text, *_ = conn_close(shell)
    assert (code, text) == (504, "CHANNEL_ERROR - unexpected method in connection state "
                                 "running")


def test_connection_method_on_channel_is_left_to_the_channel__E2():
    """The channel core answers it with 503 (test_core_channel)."""
    core, shell = opened(1)
    core.receive(frame(1, am.ConnectionOpen(virtual_host="/")))
    assert commands(shell) == [(1, ["ConnectionOpen"])]
    assert not [x for x in shell.methods() if isinstance(x, am.ConnectionClose)]


def test_method_on_unopened_channel_is_channel_error__E2():
    core, shell = opened(1)
    core.receive(frame(5, am.BasicAck(delivery_tag=1)))
    assert conn_close(shell) == (504, "CHANNEL_ERROR - expected 'channel.open'", 60, 80)


def test_close_on_unopened_channel_is_answered():
    core, shell = running()
    core.receive(frame(3, am.ChannelClose()) + frame(4, am.ChannelCloseOk()))
    assert shell.events == [("write", encode_method(3, am.ChannelCloseOk()))]


def test_channel_close_is_passed_on_and_number_freed():
    core, shell = opened(1)
    core.receive(frame(1, am.BasicQos(prefetch_count=1)) + frame(1, am.ChannelClose()))
    assert shell.kinds() == ["commands", "forget_channel"]
    assert commands(shell) == [(1, ["BasicQos", "ChannelClose"])]
    core.receive(frame(1, am.ChannelOpen()))  # the number may be reused
    assert shell.kinds()[-2:] == ["open_channel", "write"]


def test_heartbeats_are_ignored():
    core, shell = mk()
    core.receive(PROTOCOL_HEADER + encode_heartbeat() + start_ok() + encode_heartbeat())
    assert core.state == "tune"
    core, shell = opened(1)
    core.receive(encode_heartbeat() + frame(1, am.BasicQos()) + encode_heartbeat())
    assert commands(shell) == [(1, ["BasicQos"])]
    assert [e for e in shell.events if e[0] == "write"] == []


@pytest.mark.parametrize("data, text", [
    (encode_content(0, 60, b"\x00\x00", b"abc"), "content header frame on channel 0"),
    (encode_frame(3, 0, b"body"), "content body frame on channel 0"),
    (encode_frame(8, 1, b""), "type 8, all octets = <<>>"),
    (encode_content(5, 60, b"\x00\x00", b"abc"),
     "expected method frame, got non method frame instead (content header)"),
])
def test_content_or_heartbeat_frame_out_of_place_is_unexpected_frame__E2(data, text):
    """docs/behaviour-tests.md #11: any channel, including 0 and unopened ones."""
    core, shell = running()
    core.receive(data)
    assert conn_close(shell)[:2] == (505, "UNEXPECTED_FRAME - " + text)


def test_frames_before_a_bad_frame_are_handled_before_the_close__E2():
    core, shell = opened(1)
    good = frame(1, am.BasicQos(prefetch_count=3)) + frame(1, am.BasicAck(delivery_tag=1))
    bad = frame(1, am.BasicQos())[:-1] + b"\x00"  # bad frame end
    core.receive(good + bad + frame(1, am.BasicQos()))
    assert shell.kinds() == ["commands", "write", "close_after"]
    assert commands(shell) == [(1, ["BasicQos", "BasicAck"])]
    code, text, *_ = conn_close(shell)
    assert code == 501 and text.startswith("FRAME_ERROR - ")


def test_channel_open_before_a_bad_frame_is_handled__E2():
    core, shell = running()
    core.receive(frame(1, am.ChannelOpen()) + frame(1, am.BasicQos()) + b"\x09garbage!")
    assert shell.kinds()[:4] == ["open_channel", "write", "commands", "write"]
    assert conn_close(shell)[0] == 501


def test_unexpected_content_frame_is_unexpected_frame__E2():
    core, shell = opened(1)
    core.receive(frame(1, am.BasicQos()) + encode_frame(3, 1, b"body"))
    assert commands(shell) == [(1, ["BasicQos"])]
    assert conn_close(shell)[0] == 505


def test_client_connection_blocked_not_implemented():
    core, shell = running()
    core.receive(frame(0, am.ConnectionBlocked(reason="x")))
    assert conn_close(shell) == (540, "NOT_IMPLEMENTED - connection.blocked from a client",
                                 10, 60)


def test_update_secret_is_answered():
    core, shell = running()
    core.receive(frame(0, am.ConnectionUpdateSecret(new_secret=b"s", reason="r")))
    assert shell.methods() == [am.ConnectionUpdateSecretOk()]


# --- closing --------------------------------------------------------------------------------
def test_client_close_is_answered_and_terminates():
    core, shell = opened(1)
    core.receive(frame(1, am.BasicQos()) + frame(0, am.ConnectionClose()) +
                 frame(1, am.BasicQos()))
    assert shell.kinds() == ["write", "terminate", "commands"]
    assert shell.events[0] == ("write", encode_method(0, am.ConnectionCloseOk()))
    assert commands(shell) == [(1, ["BasicQos"])]  # the frame after the close is dropped
    assert core.state == "closed"
    shell.clear()
    core.receive(frame(1, am.BasicQos()))
    assert shell.events == []


def test_server_close_then_client_close_ok():
    core, shell = opened(1)
    core.close(320, "CONNECTION_FORCED - shutdown")
    assert conn_close(shell)[:2] == (320, "CONNECTION_FORCED - shutdown")
    assert shell.events[-1] == ("close_after", 1.0)
    shell.clear()
    core.receive(frame(1, am.BasicQos()) + frame(0, am.ConnectionUpdateSecret()) +
                 frame(0, am.ConnectionCloseOk()))
    assert shell.events == [("terminate", "closed by the broker: 320 CONNECTION_FORCED - shutdown")]
    assert core.state == "closed"


def test_server_close_crossing_client_close():
    core, shell = running()
    core.close(320, "CONNECTION_FORCED - shutdown")
    shell.clear()
    core.receive(frame(0, am.ConnectionClose()))
    assert shell.events == [("write", encode_method(0, am.ConnectionCloseOk())),
                            ("terminate", "closed by the broker: 320 CONNECTION_FORCED - shutdown",
                             30)]


def test_client_close_leaves_the_socket_to_the_client():
    """rabbit_reader:close_connection: after close-ok the broker waits for the client to close
    the socket, at most the heartbeat timeout or ?CLOSING_TIMEOUT (30 s)."""
    for heartbeat, linger in ((0, 30), (10, 10), (60, 30)):
        core, shell = mk()
        handshake(core, shell, heartbeat=heartbeat)
        core.receive(frame(0, am.ConnectionClose()))
        assert shell.events[-1] == ("terminate", "closed by client", linger)


def test_close_is_sent_once():
    core, shell = running()
    core.close(320, "CONNECTION_FORCED - a")
    core.close(541, "INTERNAL_ERROR - b")
    assert conn_close(shell)[0] == 320


def test_close_before_header_just_terminates():
    core, shell = mk()
    core.close(320, "CONNECTION_FORCED - shutdown")
    assert shell.events == [("terminate", "CONNECTION_FORCED - shutdown")]


def test_method_after_clients_channel_close_is_ignored__E2():
    core, shell = opened(1, 2)
    core.receive(frame(1, am.ChannelClose()) + frame(1, am.BasicQos(prefetch_count=1)) +
                 frame(2, am.BasicQos(prefetch_count=2)))
    assert not [x for x in shell.methods() if isinstance(x, am.ConnectionClose)]
    assert commands(shell) == [(1, ["ChannelClose"]), (2, ["BasicQos"])]


# --- resource alarms (rabbit_reader's throttle) -----------------------------------------------
def _publish(rk="q"):
    return encode_command(1, am.BasicPublish(routing_key=rk), b"\x00\x00", b"x", 131072)


def _alarm_caps_core(caps):
    core, shell = mk()
    core.receive(PROTOCOL_HEADER + start_ok(caps=caps) + tune_ok() +
                 frame(0, am.ConnectionOpen(virtual_host="/")) + frame(1, am.ChannelOpen()))
    shell.clear()
    return core, shell


def test_an_alarm_blocks_a_connection_only_once_it_publishes__R2():
    core, shell = _alarm_caps_core(dict(CAPS, **{"connection.blocked": True}))
    core.set_alarms(["memory"])
    core.receive(frame(1, am.BasicQos(prefetch_count=1)))  # not a publish: still read
    assert ("throttle", True) not in shell.events
    core.receive(_publish())
    assert shell.events[-1] == ("throttle", True)
    assert am.ConnectionBlocked(reason="low on memory") in shell.methods()
    assert commands(shell)[-1] == (1, ["BasicPublish"])  # the publish itself is taken
    core.set_alarms(["memory", "disk"])  # still on: nothing new to say
    assert shell.methods().count(am.ConnectionBlocked(reason="low on memory")) == 1
    core.set_alarms([])
    assert shell.events[-1] == ("throttle", False)
    assert am.ConnectionUnblocked() in shell.methods()


def test_blocked_reason_names_both_alarms_and_clients_without_the_capability_hear_nothing():
    core, shell = _alarm_caps_core(dict(CAPS, **{"connection.blocked": True}))
    core.set_alarms(["disk", "memory"])
    core.receive(_publish())
    assert am.ConnectionBlocked(reason="low on memory & disk") in shell.methods()
    core, shell = _alarm_caps_core(CAPS)
    core.set_alarms(["disk"])
    core.receive(_publish())
    assert ("throttle", True) in shell.events
    assert not [x for x in shell.methods() if isinstance(x, am.ConnectionBlocked)]


# --- limits before login and per channel (issue 11) -----------------------------------------
def test_frame_max_is_4096_until_tune_ok_then_silent_close__E2():
    """rabbit_reader starts with frame_max = ?FRAME_MIN_SIZE (initial_frame_max); a larger frame
    before tune-ok is a frame error in the starting state: no connection.close, nothing more is
    read, the socket closes after ?SILENT_CLOSE_DELAY (3 s)."""
    core, shell = mk()
    big = frame(0, am.ConnectionStartOk(client_properties={"pad": "x" * 5000},
                                        mechanism="PLAIN", response=plain()))
    assert len(big) - 8 > 4096
    core.receive(PROTOCOL_HEADER + big[:7])  # the frame header alone is enough
    assert [type(x).__name__ for x in shell.methods()] == ["ConnectionStart"]
    assert shell.events[-1] == ("close_after", 3)
    assert core.state == "closed" and core.user is None
    shell.clear()
    core.receive(big[7:] + start_ok())
    assert shell.events == []


def test_frame_of_4096_bytes_is_accepted_before_tune_ok():
    core, shell = mk()
    props = {"capabilities": CAPS, "pad": ""}
    size = len(frame(0, am.ConnectionStartOk(client_properties=props, mechanism="PLAIN",
                                             response=plain()))) - 8
    props["pad"] = "x" * (4096 - size)
    ok = frame(0, am.ConnectionStartOk(client_properties=props, mechanism="PLAIN",
                                       response=plain()))
    assert len(ok) - 8 == 4096
    core.receive(PROTOCOL_HEADER + ok)
    assert core.state == "tune"


def test_large_frame_between_tune_and_tune_ok_is_silent_close__E2():
    core, shell = mk()
    core.receive(PROTOCOL_HEADER + start_ok())
    shell.clear()
    core.receive(encode_frame(1, 0, b"\x00" * 5000))
    assert shell.events == [("close_after", 3)] and core.state == "closed"


def test_negotiated_frame_max_applies_from_tune_ok__E2():
    core, shell = mk()
    core.receive(PROTOCOL_HEADER + start_ok() + tune_ok(frame_max=131072))
    assert core.decoder.frame_max == 131072
    core.receive(frame(0, am.ConnectionOpen(virtual_host="/")) +
                 frame(1, am.ChannelOpen()))
    shell.clear()
    core.receive(encode_command(1, am.BasicPublish(routing_key="q"), b"\x00\x00",
                                b"x" * 60000, frame_max=131072))
    assert commands(shell) == [(1, ["BasicPublish"])]


def test_publish_on_unopened_channel_refused_at_its_method_frame__E2():
    """The issue's 200 MB of body frames on a channel never opened: 504 at the publish's method
    frame, before its header, so nothing of the content is buffered."""
    core, shell = opened(1)
    core.receive(frame(1, am.BasicQos(prefetch_count=1)) +
                 frame(7, am.BasicPublish(routing_key="q")))
    assert commands(shell) == [(1, ["BasicQos"])]
    assert conn_close(shell) == (504, "CHANNEL_ERROR - expected 'channel.open'", 60, 40)
    assert not core.assembler.in_progress(7)
    shell.clear()
    core.receive(encode_content(7, 60, b"\x00\x00", b"x" * 100000, 131072)[:50000])
    assert shell.events == [] and not core.assembler.in_progress(7)
    assert core.decoder.buffered < 131072  # at most one partial frame (the Reader stops
    #                                        feeding the core once it closes, close_after)


def test_content_header_on_unopened_channel_is_unexpected_frame__E2():
    """A header or body frame with no method before it: rabbit_command_assembler's 505."""
    core, shell = opened(1)
    core.receive(encode_content(9, 60, b"\x00\x00", b"abc"))
    assert conn_close(shell)[:2] == (505, "UNEXPECTED_FRAME - expected method frame, got non "
                                          "method frame instead (content header)")


def test_content_after_clients_channel_close_is_dropped_unassembled():
    core, shell = opened(1)
    core.receive(frame(1, am.ChannelClose()))
    shell.clear()
    core.receive(encode_command(1, am.BasicPublish(routing_key="q"), b"\x00\x00",
                                b"x" * 10000, frame_max=4096))
    assert shell.events == [] and not core.assembler.in_progress(1)
    core.receive(frame(1, am.ChannelOpen()))
    assert shell.kinds() == ["open_channel", "write"]


def _big_header(channel, size):
    return encode_frame(2, channel, b"\x00\x3c\x00\x00" + size.to_bytes(8, "big") + b"\x00\x00")


def test_header_above_max_message_size_closes_the_channel_in_order__R3():
    """rabbit_channel:check_msg_size's 406, decided at the content header: the channel gets a
    RefusedPublish after the commands before it; the body is dropped as it comes."""
    core, shell = opened(1, 2, max_message_size=1000)
    core.receive(frame(1, am.BasicQos(prefetch_count=1)) +
                 frame(1, am.BasicPublish(routing_key="q")) + _big_header(1, 5000) +
                 encode_frame(3, 1, b"x" * 4000) + frame(2, am.BasicQos()))
    [(n1, batch1), (n2, batch2)] = [(e[1], e[2]) for e in shell.events if e[0] == "commands"]
    assert n1 == 1 and type(batch1[0].method) is am.BasicQos
    refused = batch1[1].method
    assert type(refused).__name__ == "RefusedPublish"
    assert (refused.error.reply_code, refused.error.text) == (
        406, "PRECONDITION_FAILED - message size 5000 is larger than configured max size 1000")
    assert (refused.error.class_id, refused.error.method_id) == (60, 40)
    assert n2 == 2
    assert not [x for x in shell.methods() if isinstance(x, am.ConnectionClose)]
    assert core.assembler.in_progress(1)
    shell.clear()
    core.receive(encode_frame(3, 1, b"x" * 1000) + frame(1, am.BasicQos()))
    assert commands(shell) == [(1, ["BasicQos"])]  # the closing channel drops it
    assert not core.assembler.in_progress(1)


def test_max_message_size_default_is_rabbitmqs_128_mib__R3():
    core, shell = opened(1)
    assert core.assembler.max_body_size == 134217728
    core.receive(frame(1, am.BasicPublish(routing_key="q")) + _big_header(1, 134217729))
    refused = shell.events[-1][2][0].method
    assert refused.error.text == ("PRECONDITION_FAILED - message size 134217729 is larger "
                                  "than configured max size 134217728")


def test_frames_pipelined_after_tune_ok_are_measured_against_its_frame_max__E2():
    """rabbit_reader reads frame by frame: a client that sends tune-ok, open, channel.open and
    a publish with a 10 kB body frame in one write is served (the decoder pauses after each
    connection method until tune-ok)."""
    core, shell = mk()
    core.receive(PROTOCOL_HEADER + start_ok())
    shell.clear()
    core.receive(tune_ok(frame_max=131072) + frame(0, am.ConnectionOpen(virtual_host="/")) +
                 frame(1, am.ChannelOpen()) +
                 encode_command(1, am.BasicPublish(routing_key="q"), b"\x00\x00",
                                b"x" * 10000, frame_max=131072))
    assert core.state == "running"
    assert commands(shell) == [(1, ["BasicPublish"])]
    assert not core.decoder.pause_on_channel0


def test_pipelined_start_ok_and_large_frame_before_tune_ok_still_refused__E2():
    core, shell = mk()
    core.receive(PROTOCOL_HEADER + start_ok() + encode_frame(1, 0, b"\x00" * 5000))
    assert shell.events[-1] == ("close_after", 3) and core.state == "closed"


# --- vhost / user limits (issue 13 item 5) --------------------------------------------------

def test_connection_open_is_counted_and_waits_only_when_a_limit_applies__R3():
    core, shell = mk()
    handshake(core, shell)
    assert shell.tracked == [("connection", ("/", "guest"), False)]
    replica = make_replica()
    replica.limits[("vhost", "/")] = {"max-connections": 1}
    core, shell = mk(replica=replica)
    core.receive(PROTOCOL_HEADER + start_ok() + tune_ok() +
                 frame(0, am.ConnectionOpen(virtual_host="/")))
    assert core.state == "open" and shell.tracked == [("connection", ("/", "guest"), True)]
    assert not any(isinstance(m, am.ConnectionOpenOk) for m in shell.methods())
    core.admitted(False, 530, "NOT_ALLOWED - access to vhost '/' refused for user 'guest': "
                              "connection limit (1) is reached")
    assert conn_close(shell) == (530, "NOT_ALLOWED - access to vhost '/' refused for user "
                                      "'guest': connection limit (1) is reached", 10, 40)
    core, shell = mk(replica=replica)
    core.receive(PROTOCOL_HEADER + start_ok() + tune_ok() +
                 frame(0, am.ConnectionOpen(virtual_host="/")))
    core.admitted(True)
    assert core.state == "running"
    assert any(isinstance(m, am.ConnectionOpenOk) for m in shell.methods())


def test_channel_open_ok_waits_for_the_count_with_max_channels__R3():
    replica = make_replica()
    replica.limits[("user", "guest")] = {"max-channels": 1}
    core, shell = mk(replica=replica)
    core.receive(PROTOCOL_HEADER + start_ok() + tune_ok() +
                 frame(0, am.ConnectionOpen(virtual_host="/")))
    core.admitted(True)
    shell.clear()
    core.receive(frame(1, am.ChannelOpen()))
    assert shell.tracked[-1] == ("channel", 1, True)
    assert not any(isinstance(m, am.ChannelOpenOk) for m in shell.methods())
    core.channel_admitted(1, True)
    assert any(isinstance(m, am.ChannelOpenOk) for m in shell.methods())
    core.receive(frame(2, am.ChannelOpen()))
    core.channel_admitted(2, False, 530, "NOT_ALLOWED - number of channels opened for user "
                                         "'guest' has reached the maximum allowed user limit "
                                         "of (1)")
    assert conn_close(shell)[0] == 530


# --- the one entry: ConnectionCore.handle and its table ------------------------------------------
def test_handle_routes_each_message_the_core_decides_alone():
    from actors import messages as msgs
    from actors.core.connection import HANDLES, HandshakeTimeout
    assert HANDLES == {msgs.Admitted, msgs.ResourceAlarm, msgs.CloseConnection, msgs.Shutdown,
                       HandshakeTimeout}
    replica = make_replica()
    replica.limits[("user", "guest")] = {"max-channels": 1}
    core, shell = mk(replica=replica)
    core.receive(PROTOCOL_HEADER + start_ok() + tune_ok() +
                 frame(0, am.ConnectionOpen(virtual_host="/")))
    core.handle(msgs.Admitted(0, True))  # channel 0: the connection's own count
    assert core.state == "running"
    core.receive(frame(1, am.ChannelOpen()))
    core.handle(msgs.Admitted(1, True))  # a channel's count
    assert any(isinstance(x, am.ChannelOpenOk) for x in shell.methods())
    core.handle(msgs.ResourceAlarm(["disk"]))
    assert core.alarms == ("disk",)
    core.handle(msgs.Shutdown())
    assert conn_close(shell)[:2] == (320, "CONNECTION_FORCED - broker forced connection "
                                          "closure with reason 'shutdown'")


def test_handle_close_connection_and_handshake_timeout():
    from actors import messages as msgs
    from actors.core.connection import HandshakeTimeout
    core, shell = running()
    core.handle(msgs.CloseConnection(541, "INTERNAL_ERROR - boom", 60, 40))
    assert conn_close(shell) == (541, "INTERNAL_ERROR - boom", 60, 40)
    core, shell = mk()
    core.receive(PROTOCOL_HEADER)
    core.handle(HandshakeTimeout())
    assert ("terminate", "handshake_timeout") in shell.events


def test_the_reader_and_its_core_split_the_messages_without_overlap():
    from actors.connection import reader
    from actors.core.connection import HANDLES
    assert not set(reader._SHELL) & HANDLES


def test_the_port_is_built_from_the_readers_callables_by_name():
    from actors.core.connection import ConnectionPort
    shell = FakeShell()
    port = ConnectionPort.of(shell, "tcp://node#metadata")
    assert port.node == "tcp://node#metadata" and port.write == shell.write
    incomplete = SimpleNamespace(write=shell.write)  # a shell without the others is refused
    with pytest.raises(AttributeError):
        ConnectionPort.of(incomplete, "n")
