"""Writer actor: the sending side of one client connection (rabbit_writer.erl).

It coalesces frames and flushes when its mailbox is empty or the buffer is large (one send for
many frames), sends heartbeats, and gives delivery credit back to queues (`Sent`) once their
deliveries are on the wire: when the socket took the bytes, else when netio says the socket
has drained (`Drained`), so a client that does not read stops its queues' deliveries.

Credit for bytes the socket took goes back in bumps, as RabbitMQ's credit_flow bumps a
sender's credit every 200 messages: at once past CREDIT_BATCH deliveries or CREDIT_BYTES
written, else CREDIT_DELAY later. At ordinary load a `Sent` per delivery was a wake-up of
the queue's worker per message; a bump is far inside the queues' windows (2,000 deliveries,
4 MiB), so no queue waits for it while the socket drains.
"""

from __future__ import annotations

import time

from actors import messages as m
from actors.runtime import LightActor

FLUSH_THRESHOLD = 65536  # flush at once past this many buffered bytes
CREDIT_BATCH = 100  # deliveries on the wire whose credit goes back at once
CREDIT_BYTES = 256 * 1024  # or bytes written since the last credit went back
CREDIT_DELAY = 0.002  # seconds credit below both waits at most
HEARTBEAT_FRAME = b"\x08\x00\x00\x00\x00\x00\x00\xce"


class Writer(LightActor):
    scheduler_name = "conn"

    def __init__(self, conn, transport):
        super().__init__()
        self.conn = conn  # netio.Conn: the socket
        self.transport = transport  # for Sent credit to queues
        self.buf: list = []  # frames waiting for the next flush
        self.size = 0  # bytes in buf
        self.credits: dict = {}  # (queue, channel address) -> deliveries buffered
        self.held: dict = {}  # the same, written but not yet taken by the socket
        self.owed: dict = {}  # the same, on the wire, credit not yet given back
        self.owed_n = 0  # deliveries in owed
        self.owed_bytes = 0  # bytes written since owed was last given back
        self.credit_timer = False  # a CreditDue is on its way
        self.last_send = time.monotonic()  # for heartbeats
        self.heartbeat = 0  # seconds, 0 = off
        self.dead = False  # the socket failed

    def on_receive(self, msg):
        if isinstance(msg, m.Write):
            if msg.data:
                self.buf.append(msg.data)
                self.size += len(msg.data)
            if msg.sent:
                credits = self.credits
                for key, n in msg.sent:
                    credits[key] = credits.get(key, 0) + n
        elif isinstance(msg, m.Drained):
            held, self.held = self.held, {}
            self._give_back(held)
        elif isinstance(msg, m.CreditDue):
            self.credit_timer = False
            self._pay()
        elif isinstance(msg, m.HeartbeatTick):
            if self.heartbeat and time.monotonic() - self.last_send >= self.heartbeat / 2:
                self.buf.append(HEARTBEAT_FRAME)
                self.size += len(HEARTBEAT_FRAME)
        elif isinstance(msg, m.SetHeartbeat):
            self.heartbeat = msg.seconds
        elif isinstance(msg, m.CloseSocket):
            self.flush()
            self._pay()
            self.conn.close(msg.linger)
            self.stop()
            return
        # rabbit_writer: flush when the mailbox is empty or the buffer is big
        if (self.buf or self.credits) and (self.size >= FLUSH_THRESHOLD or
                                           self.actor_inbox.empty()):
            self.flush()

    def flush(self) -> None:
        waiting = bool(self.held)  # earlier bytes are still in netio
        written = 0
        if self.buf and not self.dead:
            data = b"".join(self.buf) if len(self.buf) > 1 else self.buf[0]
            written = len(data)
            try:
                waiting = not self.conn.write(data)
                self.last_send = time.monotonic()
            except OSError as e:
                self.dead = True
                reader = self.conn.reader
                if reader is not None:
                    try:
                        reader.tell(m.SocketClosed(f"send failed: {e}"))
                    except Exception:  # noqa: BLE001 - the reader is already gone
                        pass
        self.buf = []
        self.size = 0
        if self.credits:
            credits, self.credits = self.credits, {}
            if waiting and not self.dead:
                held = self.held
                for key, n in credits.items():
                    held[key] = held.get(key, 0) + n
            else:
                self._owe(credits, written)

    def _owe(self, credits: dict, written: int) -> None:
        """Credit for deliveries on the wire: given back in a bump (see the module's text)."""
        owed = self.owed
        for key, n in credits.items():
            owed[key] = owed.get(key, 0) + n
            self.owed_n += n
        self.owed_bytes += written
        if self.owed_n >= CREDIT_BATCH or self.owed_bytes >= CREDIT_BYTES or self.dead:
            self._pay()
        elif not self.credit_timer:
            self.credit_timer = True
            self.conn.io.call(self._arm_credit_timer)

    def _arm_credit_timer(self) -> None:
        """(the event loop's thread) CreditDue to this writer in CREDIT_DELAY."""
        self.conn.io.loop.call_later(CREDIT_DELAY, self._credit_due)

    def _credit_due(self) -> None:
        try:
            self.actor_ref.tell(m.CreditDue())
        except Exception:  # noqa: BLE001 - ActorDeadError: the connection is gone
            pass

    def _pay(self) -> None:
        if self.owed:
            owed, self.owed = self.owed, {}
            self._give_back(owed)
        self.owed_n = self.owed_bytes = 0

    def _give_back(self, credits: dict) -> None:
        send = self.transport.send
        for (queue, channel), n in credits.items():
            send(queue, m.Sent(channel, n))
