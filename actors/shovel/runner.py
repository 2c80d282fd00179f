"""One dynamic shovel at work: rabbit_shovel_worker and rabbit_amqp091_shovel's roles.

A shovel is a client of both its ends, so it runs on a thread of its own in the node process
with pika's SelectConnection on its own IOLoop: the source and destination connections of one
attempt share that loop, the node actor's loop is never blocked by a slow broker, and a
shovel costs one idle thread (not a process: shovels are few, and one per node already
holds the definitions they come from). Each attempt (`_Attempt`): connect the destination
(ensure dest-queue, confirm.select for on-confirm), then the source (ensure src-queue or an
exclusive queue bound to src-exchange, basic.qos, the src-delete-after count), consume, and
forward; any error of either end ends the attempt with its reason (both connections closed:
the source requeues what was not acked). The thread then waits reconnect-delay and tries
again (actors/shovel/backoff.py), or stops (delay 0, or the shovel deleted itself).

The decisions are pure and tested alone: acks.py (which source tags to ack),
countdown.py (src-delete-after), forward.py (what to publish), backoff.py (restarts).
"""

from __future__ import annotations

import logging
import ssl
import threading
import time

import pika
from pika.adapters.select_connection import IOLoop
from pika.exceptions import ChannelClosedByBroker

from actors.shovel import backoff
from actors.shovel import forward as fwd
from actors.shovel import status as st
from actors.shovel.acks import NO_ACK, ON_CONFIRM, AckBook
from actors.shovel.countdown import Countdown

log = logging.getLogger(__name__)
# pika logs every connection step, and a refused connection as six ERROR lines: the node's
# log keeps the shovel's own line with the reason
logging.getLogger("pika").setLevel(logging.CRITICAL)

PROPERTY_NAMES = ("content_type", "content_encoding", "headers", "delivery_mode", "priority",
                  "correlation_id", "reply_to", "expiration", "message_id", "timestamp",
                  "type", "user_id", "app_id", "cluster_id")


def ssl_options(ep) -> pika.SSLOptions | None:
    """The TLS context of an amqps:// Endpoint (its query's cacertfile, certfile, keyfile,
    verify, server_name_indication), as Erlang's ssl client would use them."""
    if not ep.tls:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ep.cacertfile)
    sni = None if ep.server_name_indication == "disable" else \
        (ep.server_name_indication or ep.host)
    if ep.verify == "verify_peer":
        ctx.check_hostname = sni is not None
        ctx.verify_mode = ssl.CERT_REQUIRED
    else:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if ep.certfile:
        ctx.load_cert_chain(ep.certfile, ep.keyfile)
    return pika.SSLOptions(ctx, server_hostname=sni)


def connection_parameters(ep, name: str) -> pika.ConnectionParameters:
    kw = {}
    if ep.heartbeat is not None:
        kw["heartbeat"] = ep.heartbeat
    if ep.channel_max is not None:
        kw["channel_max"] = ep.channel_max
    if ep.frame_max is not None:
        kw["frame_max"] = ep.frame_max
    timeout = (ep.connection_timeout or 30000) / 1000.0
    return pika.ConnectionParameters(
        host=ep.host, port=ep.port, virtual_host=ep.vhost,
        credentials=pika.PlainCredentials(ep.user, ep.password),
        ssl_options=ssl_options(ep), connection_attempts=1, socket_timeout=timeout,
        stack_timeout=timeout, blocked_connection_timeout=None,
        client_properties={"connection_name": name, "product": "Leveret shovel"}, **kw)


class AttemptEnded(Exception):
    """An attempt is over: `reason` is backoff.AUTODELETE or what went wrong."""


class _Attempt:
    """One connection pair on its own IOLoop; `run()` returns the reason it ended."""

    def __init__(self, spec, src_ep, dest_ep, cluster_name: str, on_running):
        self.spec = spec  # the ShovelSpec
        self.src_ep, self.dest_ep = src_ep, dest_ep  # the Endpoints of this attempt
        self.cluster_name = cluster_name  # for the x-shovelled header's shovelled-by
        self.on_running = on_running  # called once consuming
        self.ioloop = IOLoop()  # both connections' loop
        self.book = AckBook(spec.ack_mode)  # source tags waiting for destination confirms
        self.count: Countdown | None = None  # src-delete-after, once the source is known
        self.src = self.dest = None  # SelectConnections
        self.src_ch = self.dest_ch = None  # their channels
        self.queue = spec.src_queue  # what the source consumes (a server-named one for
        #                              src-exchange)
        self.reason: str | None = None  # why the attempt ends (first one wins)
        self.label = f"Shovel {spec.name}"

    # --- the loop -------------------------------------------------------------------------
    def run(self) -> str:
        try:
            self.dest = self._connect(self.dest_ep, self._dest_open)
            self.ioloop.start()
        finally:
            self.ioloop.close()
        return self.reason or "stopped"

    def stop(self, reason: str) -> None:
        """From any thread."""
        try:
            self.ioloop.add_callback_threadsafe(lambda: self._end(reason))
        except Exception:  # noqa: BLE001 - the loop has closed: the attempt is over anyway
            pass

    def _end(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
        open_ = [c for c in (self.src, self.dest) if c is not None and
                 not (c.is_closed or c.is_closing)]
        for c in open_:
            try:
                c.close()
            except Exception:  # noqa: BLE001 - it is closing already
                pass
        self._maybe_stop()

    def _maybe_stop(self) -> None:
        if self.reason is None:
            return
        if all(c is None or c.is_closed for c in (self.src, self.dest)):
            self.ioloop.stop()

    def _connect(self, ep, on_open):
        return pika.SelectConnection(
            connection_parameters(ep, self.label), on_open_callback=on_open,
            on_open_error_callback=lambda c, err: self._lost(c, err),
            on_close_callback=lambda c, err: self._lost(c, err),
            custom_ioloop=self.ioloop)

    def _lost(self, conn, err) -> None:
        side = "source" if conn is self.src else "destination"
        if self.reason is None:
            self._end(f"{side} connection failed: {err!r}")
        else:
            self._maybe_stop()

    def _channel_closed(self, side: str):
        def closed(ch, err):
            if self.reason is None:
                self._end(f"{side} channel closed: {err!r}")
        return closed

    # --- destination ----------------------------------------------------------------------
    def _dest_open(self, conn) -> None:
        conn.channel(on_open_callback=self._dest_channel)

    def _dest_channel(self, ch) -> None:
        self.dest_ch = ch
        ch.add_on_close_callback(self._channel_closed("destination"))
        if self.spec.dest_queue is not None:
            self._ensure_queue(self.dest, self.spec.dest_queue, self._dest_ready)
        else:
            self._dest_ready(None)

    def _dest_ready(self, _count) -> None:
        if self.spec.ack_mode == ON_CONFIRM:
            self.dest_ch.confirm_delivery(self._on_confirm,
                                          callback=lambda _f: self._connect_source())
        else:
            self._connect_source()

    def _on_confirm(self, frame) -> None:
        method = frame.method
        ok = isinstance(method, pika.spec.Basic.Ack)
        acks, settled = self.book.confirmed(method.delivery_tag, method.multiple, ok)
        self._send_acks(acks)
        if ok and self.count is not None and self.count.settled(settled):
            self._end(backoff.AUTODELETE)

    # --- source ---------------------------------------------------------------------------
    def _connect_source(self) -> None:
        self.src = self._connect(self.src_ep, lambda c: c.channel(
            on_open_callback=self._src_channel))

    def _src_channel(self, ch) -> None:
        self.src_ch = ch
        ch.add_on_close_callback(self._channel_closed("source"))
        if self.spec.src_queue is not None:
            self._ensure_queue(self.src, self.spec.src_queue, self._src_ready)
        else:
            ch.queue_declare("", exclusive=True, callback=self._src_bind)

    def _src_bind(self, frame) -> None:
        self.queue = frame.method.queue
        self.src_ch.queue_bind(self.queue, self.spec.src_exchange,
                               routing_key=self.spec.src_exchange_key,
                               callback=lambda _f: self._src_ready(0))

    def _src_ready(self, message_count) -> None:
        self.count = Countdown.of(self.spec.delete_after, message_count)
        if self.count.finished:
            self._end(backoff.AUTODELETE)
            return
        no_ack = self.spec.ack_mode == NO_ACK
        consume = lambda _f=None: self.src_ch.basic_consume(  # noqa: E731
            self.queue, self._on_delivery, auto_ack=no_ack,
            callback=lambda _f: self.on_running(self.src_ep, self.dest_ep))
        if no_ack:
            consume()
        else:
            self.src_ch.basic_qos(prefetch_count=int(self.spec.prefetch), callback=consume)

    def _ensure_queue(self, conn, queue: str, then) -> None:
        """rabbit_shovel_parameters:ensure_queue/3: a passive declare on a channel of its
        own; a 404 declares it durable on another. `then(message_count)`."""
        def opened(ch):
            ch.add_on_close_callback(on_closed)
            ch.queue_declare(queue, passive=True, callback=lambda f: (
                ch.close(), then(f.method.message_count)))

        def on_closed(ch, err):
            if isinstance(err, ChannelClosedByBroker) and err.reply_code == 404:
                conn.channel(on_open_callback=lambda ch2: ch2.queue_declare(
                    queue, durable=True, callback=lambda f: (
                        ch2.close(), then(f.method.message_count))))
            elif not isinstance(err, pika.exceptions.ChannelClosedByClient) and \
                    self.reason is None:
                self._end(f"declaring queue '{queue}' failed: {err!r}")
        conn.channel(on_open_callback=opened)

    # --- forwarding -----------------------------------------------------------------------
    def _on_delivery(self, ch, method, props, body) -> None:
        if self.reason is not None:
            return
        if not self.count.may_publish():
            return  # on-confirm past the count: left unacked, requeued when the source closes
        exchange, key = fwd.target(self.spec, method.exchange, method.routing_key)
        src = {n: getattr(props, n) for n in PROPERTY_NAMES if getattr(props, n) is not None}
        out = fwd.properties(self.spec, src, self.cluster_name, self.src_ep.redacted,
                             self.dest_ep.redacted, int(time.time()))
        self.dest_ch.basic_publish(exchange, key, body, pika.BasicProperties(**out))
        self.count.published()
        self._send_acks(self.book.published(method.delivery_tag))
        if self.spec.ack_mode != ON_CONFIRM and self.count.settled(1):
            self._end(backoff.AUTODELETE)

    def _send_acks(self, acks) -> None:
        if not acks or self.src_ch is None or not self.src_ch.is_open:
            return  # (a closed source has requeued them: an ack there would mean nothing)
        for a in acks:
            if a.ok:
                self.src_ch.basic_ack(a.tag, multiple=a.multiple)
            else:
                self.src_ch.basic_nack(a.tag, multiple=a.multiple, requeue=True)


class ShovelRunner(threading.Thread):
    """A shovel's thread: attempts, their statuses, the waits between them."""

    def __init__(self, spec, node: str, cluster_name: str, report, on_autodelete):
        super().__init__(name=f"shovel-{spec.vhost}-{spec.name}", daemon=True)
        self.spec = spec  # the ShovelSpec it runs
        self.node = node  # node_name, for the status
        self.cluster_name = cluster_name  # x-shovelled's shovelled-by
        self.report = report  # report(ShovelStatus), any thread
        self.on_autodelete = on_autodelete  # on_autodelete(spec): clear its parameter
        self.stopping = threading.Event()  # set by stop()
        self.attempt: _Attempt | None = None  # the attempt under way
        self.lock = threading.Lock()  # guards `attempt` between run() and stop()
        self.src_uris = backoff.UriCycle(spec.src_uris)  # the next source URI to try
        self.dest_uris = backoff.UriCycle(spec.dest_uris)  # the next destination URI

    def stop(self) -> None:
        self.stopping.set()
        with self.lock:
            if self.attempt is not None:
                self.attempt.stop("shutdown")

    def _status(self, state, **kw) -> None:
        self.report(st.ShovelStatus(self.spec.vhost, self.spec.name, state, self.node, **kw))

    def _running(self, src_ep, dest_ep) -> None:
        self._status(st.RUNNING, src_uri=src_ep.redacted, dest_uri=dest_ep.redacted,
                     endpoints=st.endpoints(self.spec))
        log.info("shovel '%s' in vhost '%s' running: %s -> %s", self.spec.name,
                 self.spec.vhost, src_ep.redacted, dest_ep.redacted)

    def run(self) -> None:
        while not self.stopping.is_set():
            self._status(st.STARTING)
            with self.lock:
                if self.stopping.is_set():
                    return
                self.attempt = _Attempt(self.spec, self.src_uris.take(), self.dest_uris.take(),
                                        self.cluster_name, self._running)
            try:
                reason = self.attempt.run()
            except Exception as e:  # noqa: BLE001 - a failed attempt is a reason to retry
                log.exception("shovel '%s' attempt failed", self.spec.name)
                reason = f"{type(e).__name__}: {e}"
            with self.lock:
                self.attempt = None
            if self.stopping.is_set():
                return
            restart = backoff.after_exit(reason, self.spec.reconnect_delay)
            if restart.delete:
                log.info("shutting down Shovel '%s', no messages left to transfer",
                         self.spec.name)
                self.on_autodelete(self.spec)
                return
            log.warning("shovel '%s' in vhost '%s' terminated: %s", self.spec.name,
                        self.spec.vhost, reason)
            self._status(st.TERMINATED, reason=reason)
            if restart.after is None or self.stopping.wait(restart.after):
                return
