"""Inter-process message decoding speed: what each received ZeroMQ message costs its receiver.

Run with ``python -m bench.wire_speed [--seconds S]``. Measures, on one core, in messages (or
batches) per second: `actors.messages.decode` of the messages on the hot path (a channel's
publish batch, a queue's deliver batch, confirms, credit) and the transport's receive of a
batch multipart (`Transport._receive`: batch header, actor names, decode, local delivery into
a no-op mailbox). Compare two trees with `PYTHONPATH=<tree> python -m bench.wire_speed`.

Prints one table; nothing is asserted.
"""

from __future__ import annotations

import argparse

from actors import messages as m
from actors.transport import Transport
from actors.wire import packb
from bench.codec_speed import _rate

BODY = b"x" * 100
PROPS = b"\x80\x00\x02"  # content properties: delivery-mode 2


def _publish(n: int) -> m.Publish:
    return m.Publish("ipc:///run/conn-0-1.sock#ch/1/1/1",
                     [m.PublishItem(i + 1, "amq.direct", "bench.key", PROPS, True, 0, -1,
                                    b"0123456789abcdef") for i in range(n)], [BODY] * n)


def _deliver(n: int) -> m.Deliver:
    return m.Deliver("ipc:///run/queue-0-1.sock#q\x1f/\x1fbench", "bench",
                     [m.Delivery("ctag", i, False, "amq.direct", "bench.key", PROPS)
                      for i in range(n)],
                     [BODY] * n)


CASES = [
    ("Publish, 1 message", _publish(1), 1),
    ("Publish, batch of 85", _publish(85), 85),
    ("Deliver, batch of 50", _deliver(50), 50),
    ("Confirm, 50 seqs", m.Confirm("ipc:///run/queue-0-1.sock#q", list(range(50)), True), 1),
    ("Credit", m.Credit("ipc:///run/queue-0-1.sock#q", 200, 300000), 1),
    ("Sent", m.Sent("ipc:///run/conn-0-1.sock#ch/1/1/1", 1), 1),
]


class _Sink:
    def tell(self, msg) -> None:
        pass


def _batch_parts(msgs: list) -> list:
    """The multipart a transport sends for one turn's messages to one process."""
    parts, counts = [], []
    for name, msg in msgs:
        payload, frames = m.encode(msg)
        parts += [name.encode(), payload, *frames]
        counts.append(2 + len(frames))
    return [b"", packb(counts)] + parts


def run(seconds: float) -> list[tuple[str, float, int]]:
    rows = []
    for label, msg, per in CASES:
        payload, frames = m.encode(msg)
        frames = list(frames)
        rows.append((f"decode {label}", _rate(lambda: m.decode(payload, frames), 1, seconds),
                     per))
    t = Transport("ipc:///nonexistent/bench.sock")
    t.register("ch/1/1/1", _Sink())
    t.register("q", _Sink())
    turn = [("ch/1/1/1", _deliver(10)), ("ch/1/1/1", CASES[4][1]), ("q", CASES[5][1])] * 4
    parts = _batch_parts(turn)
    rows.append(("receive a batch of 12 messages", _rate(lambda: t._receive(parts), 1, seconds),
                 12))
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.wire_speed")
    p.add_argument("--seconds", type=float, default=3.0, help="time per measurement")
    args = p.parse_args(argv)
    print(f"{'case':42} {'calls/s':>12} {'us/call':>9} {'us/message':>11}")
    for label, rate, per in run(args.seconds):
        print(f"{label:42} {rate:12,.0f} {1e6 / rate:9.2f} {1e6 / rate / per:11.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
