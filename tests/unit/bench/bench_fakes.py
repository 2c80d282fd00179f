"""Fakes shared by the load-generator role tests (test_paper.py, test_perftest_scenarios.py)."""

from __future__ import annotations


class FakeConn:
    """What a role needs of a LeanConnection: an outgoing buffer, flush, incoming commands.
    strict: a command the role hands to handle_other fails the test."""

    def __init__(self, strict: bool = False):
        self.strict = strict
        self.frame_max = 131072
        self.out = bytearray()
        self.sent = bytearray()
        self.bytes_sent = 0
        self.blocked = False
        self.blocked_events = 0
        self.incoming = []

    def flush(self):
        n = len(self.out)
        self.sent += self.out
        self.bytes_sent += n
        del self.out[:]
        return n

    def recv_commands(self):
        cmds, self.incoming = self.incoming, []
        return cmds

    def handle_other(self, cmd):
        if self.strict:
            raise AssertionError(f"unexpected {cmd}")


def decode(codec, data):
    """Every command in what a role sent."""
    dec = codec.FrameDecoder(frame_max=131072, expect_header=False)
    asm = codec.CommandAssembler()
    dec.feed(bytes(data))
    return [c for c in (asm.process(f) for f in dec.frames()) if c is not None]
