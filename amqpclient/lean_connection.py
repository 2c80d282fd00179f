"""A lean AMQP 0-9-1 client on the codec (amqpclient/codec.py -> protocol/).

Only what the benchmark needs: the connection handshake (PLAIN, tune with heartbeat 0, open),
channel.open, queue.declare/delete/purge, basic.qos, confirm.select, basic.consume, all as
blocking calls during setup; then a non-blocking mode for the hot loops in bench/loadgen.py:
`queue_out(bytes)` + `flush()` (one `send` of everything pending) and `recv_commands()` (every
complete command in what the socket has).
"""
from __future__ import annotations

import socket
import time

from amqpclient.url import AMQPTarget

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
RECV_SIZE = 262144


class AMQPClosed(Exception):
    """The broker closed the connection or a channel (or the socket hit EOF)."""

    def __init__(self, text: str, reply_code: int = 0):
        super().__init__(text)
        self.reply_code = reply_code


class LeanConnection:
    def __init__(self, target: AMQPTarget, codec, frame_max: int = 131072,
                 timeout: float = 30.0, name: str = "leveret-bench"):
        self.target = target
        self.codec = codec
        self.M = codec.methods
        self.frame_max = frame_max
        self.timeout = timeout
        self.name = name
        self.sock: socket.socket | None = None
        self.decoder = None
        self.assembler = None
        self.backlog: list = []            # commands read during a blocking wait, not yet used
        self.out = bytearray()             # pending output in non-blocking mode
        self.bytes_sent = 0
        self.blocked = False
        self.blocked_events = 0
        self.server_properties: dict = {}

    # -- blocking setup -------------------------------------------------------------------
    def connect(self) -> "LeanConnection":
        t = self.target
        self.sock = socket.create_connection((t.host, t.port), timeout=self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.decoder = self.codec.FrameDecoder(frame_max=self.frame_max, expect_header=False)
        self.assembler = self.codec.CommandAssembler()
        M = self.M
        self.sock.sendall(PROTOCOL_HEADER)
        start = self.wait(0, M.ConnectionStart)
        self.server_properties = dict(getattr(start, "server_properties", {}) or {})
        mechs = start.mechanisms
        mechs = mechs.decode() if isinstance(mechs, (bytes, bytearray)) else str(mechs)
        if "PLAIN" not in mechs.split():
            raise AMQPClosed(f"server does not offer PLAIN (offers {mechs!r})")
        self.send_method(0, M.ConnectionStartOk(
            client_properties={
                "product": self.name,
                "platform": "Python",
                "capabilities": {"publisher_confirms": True, "basic.nack": True,
                                 "consumer_cancel_notify": True, "connection.blocked": True},
            },
            mechanism="PLAIN",
            response=f"\0{t.user}\0{t.password}",
            locale="en_US"))
        tune = self.wait(0, M.ConnectionTune)
        if tune.frame_max:
            self.frame_max = min(self.frame_max, tune.frame_max)
        if hasattr(self.decoder, "set_frame_max"):
            self.decoder.set_frame_max(self.frame_max)
        self.send_method(0, M.ConnectionTuneOk(channel_max=tune.channel_max or 2047,
                                               frame_max=self.frame_max, heartbeat=0))
        self.send_method(0, M.ConnectionOpen(virtual_host=t.vhost))
        self.wait(0, M.ConnectionOpenOk)
        return self

    def send_method(self, channel: int, method) -> None:
        self.sock.sendall(self.codec.encode_method(channel, method))

    def rpc(self, channel: int, method, reply_cls):
        self.send_method(channel, method)
        return self.wait(channel, reply_cls)

    def wait(self, channel: int, cls, timeout: float | None = None):
        """Block until a command of class `cls` arrives on `channel`; other commands are kept
        in `backlog`. A connection.close or channel.close raises AMQPClosed."""
        deadline = time.monotonic() + (timeout if timeout is not None else self.timeout)
        while True:
            for i, cmd in enumerate(self.backlog):
                if cmd.channel == channel and type(cmd.method) is cls:
                    del self.backlog[i]
                    return cmd.method
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no {cls.__name__} on channel {channel} within "
                                   f"{self.timeout}s")
            self.sock.settimeout(remaining)
            try:
                data = self.sock.recv(RECV_SIZE)
            except socket.timeout:
                continue
            if not data:
                raise AMQPClosed("connection closed by the broker (EOF)")
            for cmd in self._decode(data):
                self._check_close(cmd)
                self.backlog.append(cmd)

    def _decode(self, data: bytes) -> list:
        self.decoder.feed(data)
        out = []
        process = self.assembler.process
        for fr in self.decoder.frames():
            cmd = process(fr)
            if cmd is not None:
                out.append(cmd)
        return out

    def _check_close(self, cmd) -> None:
        M = self.M
        t = type(cmd.method)
        if t is M.ConnectionClose:
            m = cmd.method
            try:
                self.sock.sendall(self.codec.encode_method(0, M.ConnectionCloseOk()))
            except OSError:
                pass
            raise AMQPClosed(f"connection.close {m.reply_code} {m.reply_text} "
                             f"(class {m.class_id} method {m.method_id})", m.reply_code)
        if t is M.ChannelClose:
            m = cmd.method
            try:
                self.sock.sendall(self.codec.encode_method(cmd.channel, M.ChannelCloseOk()))
            except OSError:
                pass
            raise AMQPClosed(f"channel {cmd.channel} closed: {m.reply_code} {m.reply_text} "
                             f"(class {m.class_id} method {m.method_id})", m.reply_code)

    def channel_open(self, channel: int) -> None:
        self.rpc(channel, self.M.ChannelOpen(), self.M.ChannelOpenOk)

    def queue_declare(self, channel: int, queue: str, durable: bool = False,
                      auto_delete: bool = False, exclusive: bool = False,
                      arguments: dict | None = None, passive: bool = False):
        ok = self.rpc(channel, self.M.QueueDeclare(
            queue=queue, passive=passive, durable=durable, exclusive=exclusive,
            auto_delete=auto_delete, arguments=arguments or {}), self.M.QueueDeclareOk)
        return ok.message_count, ok.consumer_count

    def queue_delete(self, channel: int, queue: str) -> int:
        return self.rpc(channel, self.M.QueueDelete(queue=queue),
                        self.M.QueueDeleteOk).message_count

    def queue_purge(self, channel: int, queue: str) -> int:
        return self.rpc(channel, self.M.QueuePurge(queue=queue),
                        self.M.QueuePurgeOk).message_count

    def basic_qos(self, channel: int, prefetch_count: int) -> None:
        self.rpc(channel, self.M.BasicQos(prefetch_count=prefetch_count), self.M.BasicQosOk)

    def confirm_select(self, channel: int) -> None:
        self.rpc(channel, self.M.ConfirmSelect(), self.M.ConfirmSelectOk)

    def basic_consume(self, channel: int, queue: str, no_ack: bool, consumer_tag: str = "",
                      arguments: dict | None = None) -> str:
        ok = self.rpc(channel, self.M.BasicConsume(queue=queue, consumer_tag=consumer_tag,
                                                   no_ack=no_ack, arguments=arguments or {}),
                      self.M.BasicConsumeOk)
        tag = ok.consumer_tag
        return tag.decode() if isinstance(tag, (bytes, bytearray)) else tag

    # -- non-blocking hot path ------------------------------------------------------------
    def set_nonblocking(self) -> None:
        self.sock.setblocking(False)

    def flush(self) -> int:
        """Send as much of `out` as the socket takes now; returns the bytes sent."""
        out = self.out
        if not out:
            return 0
        try:
            n = self.sock.send(out)
        except (BlockingIOError, InterruptedError):
            return 0
        except OSError as e:
            raise AMQPClosed(f"send failed: {e}") from e
        del out[:n]
        self.bytes_sent += n
        return n

    def recv_commands(self, max_bytes: int = 4 * RECV_SIZE) -> list:
        """Every command completed by the bytes available now (non-blocking), after the
        commands a blocking call read past its reply (`backlog`).  Those are returned even when
        the socket has nothing new: basic.consume-ok and the first deliveries often arrive in
        one segment, so the deliveries sit in `backlog` with the socket drained, and a loop
        that only reads when select() reports the socket would never see them."""
        chunks = []
        got = 0
        recv = self.sock.recv
        while got < max_bytes:
            try:
                data = recv(RECV_SIZE)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as e:
                raise AMQPClosed(f"recv failed: {e}") from e
            if not data:
                if chunks:
                    break
                raise AMQPClosed("connection closed by the broker (EOF)")
            chunks.append(data)
            got += len(data)
            if len(data) < RECV_SIZE:
                break
        if not chunks:
            cmds, self.backlog = self.backlog, []
            return cmds
        cmds = self._decode(chunks[0] if len(chunks) == 1 else b"".join(chunks))
        if self.backlog:
            cmds = self.backlog + cmds
            self.backlog = []
        return cmds

    def handle_other(self, cmd) -> None:
        """Commands the hot loops do not expect: closes raise, blocked/unblocked are noted."""
        self._check_close(cmd)
        t = type(cmd.method)
        M = self.M
        if t is M.ConnectionBlocked:
            self.blocked = True
            self.blocked_events += 1
        elif t is M.ConnectionUnblocked:
            self.blocked = False
        elif t is M.BasicCancel:
            raise AMQPClosed(f"the broker cancelled consumer {cmd.method.consumer_tag!r}")

    # -- closing --------------------------------------------------------------------------
    def close(self, timeout: float = 3.0) -> None:
        """Flush pending output, connection.close, wait for close-ok; then close the socket.
        Falls back to just closing the socket when the broker does not keep up."""
        if self.sock is None:
            return
        try:
            deadline = time.monotonic() + timeout
            self.sock.setblocking(False)
            while self.out and time.monotonic() < deadline:
                if not self.flush():
                    # drain input so the broker is not stuck writing to us
                    try:
                        self.sock.recv(RECV_SIZE)
                    except (BlockingIOError, InterruptedError):
                        time.sleep(0.001)
            if not self.out:
                self.sock.settimeout(max(0.1, deadline - time.monotonic()))
                self.sock.sendall(self.codec.encode_method(0, self.M.ConnectionClose(
                    reply_code=200, reply_text="bench done", class_id=0, method_id=0)))
                while time.monotonic() < deadline:
                    data = self.sock.recv(RECV_SIZE)
                    if not data:
                        break
                    done = False
                    try:
                        for cmd in self._decode(data):
                            if type(cmd.method) is self.M.ConnectionCloseOk:
                                done = True
                    except Exception:
                        break
                    if done:
                        break
        except (OSError, AMQPClosed):
            pass
        finally:
            try:
                self.sock.close()
            except OSError:
                pass
            self.sock = None
