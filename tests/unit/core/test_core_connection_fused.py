"""The fused publish path (FrameDecoder.fuse_publish, ConnectionCore._frame's Command branch):
a basic.publish whose header and single body frame are buffered with it is decoded as one
Command, skipping the per-frame assembler. It must be invisible: for any byte stream, cut into
any reads, a connection with it does exactly what one without it does (the same command
batches, the same frames written, the same closes and errors, E1/E2)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import methods as am
from protocol.frames import (Command, encode_content, encode_frame, encode_method,
                             encode_publish)
from protocol.properties import BasicProperties
from test_core_connection import opened

PROPS = BasicProperties(content_type="text/plain", delivery_mode=2).encode()


def publish(channel=1, body=b"hello", frame_max=4096):
    return encode_publish(channel, b"", b"q", False, PROPS, body, frame_max)


PIECES = [
    publish(),
    publish(body=b""),
    publish(body=b"x" * 5000),  # two body frames at frame_max 4096: never fused
    publish(channel=2),  # channel 2 is not open: 504 at its method frame
    publish(channel=3),  # channel 3 was opened, then closed by the client
    publish(channel=0),  # content on channel 0: a connection error
    encode_publish(1, b"", b"other", True, PROPS, b"mandatory", 4096),  # another method
    encode_method(1, am.BasicPublish(exchange="", routing_key="q")),  # a header is due next
    encode_content(1, 60, PROPS, b"loose", 4096),  # a header and body without a method
    encode_method(1, am.BasicAck(1, False)),
    encode_frame(8, 0, b""),  # heartbeat between frames
    encode_method(1, am.ChannelFlow(True)),
    encode_method(3, am.ChannelOpen()),
]


def drive(stream: bytes, reads: list[int], fuse: bool, **cfg):
    core, shell = opened(1, 3, **cfg)
    core.receive(encode_method(3, am.ChannelClose(200, "bye", 0, 0)))
    shell.clear()
    core.decoder.fuse_publish = fuse
    at = 0
    for n in reads:
        core.receive(stream[at:at + n])
        at += n
    core.receive(stream[at:])
    return [_comparable(e) for e in shell.events], core.state


def _comparable(event):
    """A RefusedPublish (max_message_size) has no equality of its own: its error's code and
    text stand for it."""
    if event[0] != "commands":
        return event
    return event[:2] + ([(c[0], ("refused", c[1].error.reply_code, c[1].error.text))
                         if hasattr(c[1], "error") else c for c in event[2]],)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(PIECES), min_size=1, max_size=10),
       st.lists(st.integers(1, 700), max_size=12), st.sampled_from([None, 100]))
def test_fused_and_frame_by_frame_connections_behave_alike__E2(pieces, reads, max_size):
    stream = b"".join(pieces)
    cfg = {} if max_size is None else {"max_message_size": max_size}
    assert drive(stream, reads, True, **cfg) == drive(stream, reads, False, **cfg)


def test_a_whole_publish_is_one_command_with_its_properties():
    core, shell = opened(1)
    core.receive(publish(body=b"abc") + publish(body=b""))
    (kind, number, cmds), = shell.events
    assert (kind, number) == ("commands", 1)
    assert [type(c) for c in cmds] == [Command, Command]
    assert [c.body for c in cmds] == [b"abc", b""]
    assert cmds[0].method == am.BasicPublish(exchange="", routing_key="q")
    assert cmds[0].properties.delivery_mode == 2


def test_a_publish_cut_between_reads_is_assembled_as_before():
    core, shell = opened(1)
    data = publish(body=b"abcdef")
    for i in range(len(data)):
        core.receive(data[i:i + 1])
    cmds = [c for e in shell.events for c in e[2]]
    assert [c.body for c in cmds] == [b"abcdef"]


def test_a_fused_publish_over_max_message_size_is_refused_as_before():
    core, shell = opened(1, max_message_size=4)
    core.receive(publish(body=b"12345") + publish(body=b"1234"))
    cmds = [c for e in shell.events for c in e[2]]
    assert type(cmds[0].method).__name__ == "RefusedPublish"
    assert cmds[1].body == b"1234"
