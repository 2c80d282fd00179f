"""Codec speed: Leveret's protocol/ against pamqp, in frames per second.

Run with ``python -m bench.codec_speed [--seconds S] [--body N]``.  Measures, on one core:

* decode of a stream of basic.publish + content header + body frame triples, fed in
  64 KiB chunks (FrameDecoder.frames(), then CommandAssembler.process() for "+assemble");
* encode_deliver (one deliver triple per call);
* encode and decode of basic.ack;
* the same with pamqp (pamqp.frame.unmarshal / marshal) for comparison.

Prints one table; nothing is asserted.
"""

from __future__ import annotations

import argparse
import sys
import time

from protocol import (
    BasicAck,
    BasicProperties,
    CommandAssembler,
    FrameDecoder,
    encode_ack,
    encode_deliver,
    encode_method,
    encode_publish,
)

CHUNK = 65536


def _rate(fn, frames_per_call: int, seconds: float) -> float:
    """Frames per second of fn() (best of three runs of about seconds/3 each)."""
    fn()  # warm up
    calls = 1
    while True:  # calibrate
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        elapsed = time.perf_counter() - t0
        if elapsed > 0.05:
            break
        calls *= 2
    per_run = max(1, int(calls * (seconds / 3) / elapsed))
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(per_run):
            fn()
        best = min(best, time.perf_counter() - t0)
    return per_run * frames_per_call / best


def _publish_stream(n: int, body: bytes, props: bytes) -> bytes:
    return b"".join(encode_publish(1, b"amq.direct", b"bench.key", False, props, body) for _ in range(n))


def run(seconds: float, body_size: int) -> list[tuple[str, float, float | None]]:
    from pamqp import commands as pc
    from pamqp import frame as pframe
    from pamqp import header as pheader
    from pamqp import body as pbody

    body = b"x" * body_size
    props = BasicProperties(content_type="application/octet-stream", delivery_mode=2).encode()
    n_msgs = 1000
    stream = _publish_stream(n_msgs, body, props)
    chunks = [stream[i : i + CHUNK] for i in range(0, len(stream), CHUNK)]
    frames_total = 3 * n_msgs

    def leveret_decode():
        dec = FrameDecoder(expect_header=False)
        count = 0
        for chunk in chunks:
            dec.feed(chunk)
            count += len(dec.frames())
        assert count == frames_total, count

    def leveret_decode_assemble():
        dec = FrameDecoder(expect_header=False)
        asm = CommandAssembler()
        process = asm.process
        count = 0
        for chunk in chunks:
            dec.feed(chunk)
            for frame in dec.frames():
                if process(frame) is not None:
                    count += 1
        assert count == n_msgs, count

    def pamqp_decode():
        # pamqp has no stream decoder: unmarshal frame by frame from a buffer, as aiormq does.
        count = 0
        buf = b""
        unmarshal = pframe.unmarshal
        for chunk in chunks:
            buf += chunk
            while len(buf) >= 8:
                try:
                    consumed, _channel, _frame = unmarshal(buf)
                except Exception:  # noqa: BLE001 - pamqp's "not all data received"
                    break
                buf = buf[consumed:]
                count += 1
        assert count == frames_total, count

    def leveret_encode_deliver():
        encode_deliver(1, b"ctag-1", 42, False, b"amq.direct", b"bench.key", props, body, 131072)

    pprops = pc.Basic.Properties(content_type="application/octet-stream", delivery_mode=2)

    def pamqp_encode_deliver():
        pframe.marshal(
            pc.Basic.Deliver(
                consumer_tag="ctag-1",
                delivery_tag=42,
                redelivered=False,
                exchange="amq.direct",
                routing_key="bench.key",
            ),
            1,
        )
        pframe.marshal(pheader.ContentHeader(0, len(body), pprops), 1)
        pframe.marshal(pbody.ContentBody(body), 1)

    acks = b"".join(encode_ack(1, i, False) for i in range(1, 1001))
    ack_chunks = [acks]

    def leveret_encode_ack():
        encode_ack(1, 123456, False)

    def leveret_encode_ack_generic():
        encode_method(1, BasicAck(123456, False))

    def pamqp_encode_ack():
        pframe.marshal(pc.Basic.Ack(123456, False), 1)

    def leveret_decode_ack():
        dec = FrameDecoder(expect_header=False)
        for chunk in ack_chunks:
            dec.feed(chunk)
            dec.frames()

    def pamqp_decode_ack():
        buf = acks
        unmarshal = pframe.unmarshal
        while buf:
            consumed, _channel, _frame = unmarshal(buf)
            buf = buf[consumed:]

    rows = [
        ("decode publish triples", _rate(leveret_decode, frames_total, seconds),
         _rate(pamqp_decode, frames_total, seconds)),
        ("decode + assemble publishes", _rate(leveret_decode_assemble, frames_total, seconds),
         None),
        ("encode_deliver (3 frames)", _rate(leveret_encode_deliver, 3, seconds),
         _rate(pamqp_encode_deliver, 3, seconds)),
        ("encode basic.ack (encode_ack)", _rate(leveret_encode_ack, 1, seconds),
         _rate(pamqp_encode_ack, 1, seconds)),
        ("encode basic.ack (encode_method)", _rate(leveret_encode_ack_generic, 1, seconds),
         None),
        ("decode basic.ack", _rate(leveret_decode_ack, 1000, seconds),
         _rate(pamqp_decode_ack, 1000, seconds)),
    ]
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.5, help="time per measurement")
    parser.add_argument("--body", type=int, default=256, help="message body size in bytes")
    args = parser.parse_args(argv)
    rows = run(args.seconds, args.body)
    print(f"codec speed, body {args.body} B, Python {sys.version.split()[0]}")
    print(f"{'operation':34} {'leveret frames/s':>17} {'pamqp frames/s':>15} {'ratio':>7}")
    for name, ours, theirs in rows:
        if theirs:
            print(f"{name:34} {ours:17,.0f} {theirs:15,.0f} {ours / theirs:6.1f}x")
        else:
            print(f"{name:34} {ours:17,.0f} {'-':>15} {'':>7}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
