"""ZeroMQ transport between OS processes, pykka tell inside one.

Mirrors what Erlang distribution gives RabbitMQ for free: `Pid ! Msg` to any process on any node.
An address is the string `endpoint#actor_name`; the endpoint is the `ipc://` (inside a node) or `tcp://`
(between nodes) address of the OS process that hosts the actor. `send()` does not care which:
a message for an actor of this process is a pykka `tell`, any other goes over ZeroMQ.

Owns:
- one PULL socket per process, bound at the process's endpoint, read by one inbound thread (or,
  given an EventLoop, on that loop's thread: a connection worker's) that decodes each message
  and tells the named local actor;
- the check on receipt: a multipart that is not one of ours (bad framing, a batch whose counts
  do not match its frames, an actor name that is not UTF-8, a payload actors/messages.py
  refuses) is logged, rate-limited, with what can be told of its sender, and dropped; an
  exception escaping the receive loop itself ends the process with status EXIT_RECEIVE_FAILED
  (let it crash: the node restarts a worker, systemd the node) instead of leaving it deaf;
- one PUSH socket per (sending thread, destination endpoint): ZeroMQ sockets are not thread-safe,
  so each actor thread gets its own, created lazily in that thread;
- the set of dead endpoints (a crashed worker's, or a worker of a node the cluster marked down):
  sends to them are dropped, as a message to a dead Erlang pid is; an endpoint whose node comes
  back is revived;
- in tests only (LEVERET_FAULT_INJECTION, actors/faults.py): links to other cluster hosts a test
  cut, whose messages are dropped.

Security (docs/security.md): a tcp:// endpoint (a cluster's) is bound and connected with CURVE,
keys derived from the cluster secret (actors/secure.py: `curve`), and a ZAP handler admits
members only; a process without the keys refuses to use tcp:// at all. ipc:// endpoints live in
the node's run folder (0700): only the broker's OS user reaches them. In a cluster the node's
socket is also bound at `local_endpoint` (ipc://), which leveretctl uses without the secret.

Wire format: multipart `[actor_name, msgpack([tag, *fields]), bodies]`; message bodies travel
joined in one frame of their own, never inside msgpack (see actors/messages.py). Several
messages for one process in one turn travel as one batch `[b"", msgpack(counts), ...]`. While
lifecycle events are on, every send is a stamped batch `[b"\0", msgpack([hlc, counts]), ...]`
carrying the sender's hybrid clock (actors/hlc.py), which the receiver observes: the events of
two processes or hosts are then ordered by cause, whatever their clocks say.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from typing import Callable

import zmq

from actors import events, faults, hlc, local_link, messages
from actors.wire import packb, unpackb

log = logging.getLogger(__name__)

SEND_LINGER_MS = 5000  # how long a closed socket keeps trying to deliver what it was given
INBOUND_BATCH = 512  # on an event loop: messages read per turn before the loop's other work
_SNDMORE = int(zmq.SNDMORE)
_BATCH = b""  # first frame of a batch (no actor name is empty)
_STAMPED = b"\0"  # first frame of a batch carrying the sender's hybrid clock (no actor name)
EXIT_RECEIVE_FAILED = 70  # exit status of a process whose receive loop failed (EX_SOFTWARE)
MALFORMED_LOG_BURST = 20  # malformed messages logged per period; the others are counted
MALFORMED_LOG_PERIOD = 60.0  # seconds


def make_address(endpoint: str, name: str) -> str:
    """An address is one string `endpoint#name`: hashable, msgpack-able, cheap to split
    (endpoints never contain '#'; actor names may)."""
    return f"{endpoint}#{name}"


def split_address(address: str) -> tuple[str, str]:
    endpoint, _, name = address.partition("#")
    return endpoint, name


def frames_of(parts: list) -> list:
    """The frame slices `[name, payload, (bodies)]` of each message of one multipart, whatever
    its form (one message, a batch, a stamped batch: the stamp is observed). Raises
    messages.Malformed, saying why, on a framing that is not ours."""
    first = parts[0]
    if first != _BATCH and first != _STAMPED:
        if len(parts) not in (2, 3):
            raise messages.Malformed(f"{len(parts)} frames")
        return [parts]
    try:
        counts = unpackb(parts[1]) if len(parts) > 1 else None
    except Exception:  # noqa: BLE001 - arbitrary bytes: any of msgpack's refusals
        counts = None
    if first == _STAMPED:
        if type(counts) is not list or len(counts) != 2 or type(counts[0]) is not int:
            raise messages.Malformed("a stamped batch with an undecodable header")
        stamp, counts = counts
        hlc.clock().observe(stamp)
    if type(counts) is not list or not counts:
        raise messages.Malformed("a batch with an undecodable header")
    at = 2
    for n in counts:
        if type(n) is not int or not 2 <= n <= 3:
            raise messages.Malformed(f"a batch announcing a message of {n!r:.20} frames")
        at += n
    if at != len(parts):
        raise messages.Malformed(f"a batch announcing {at} frames in {len(parts)}")
    out, at = [], 2
    for n in counts:
        out.append(parts[at:at + n])
        at += n
    return out


def unframe(parts: list) -> list:
    """The messages of one multipart as `[(actor name, message)]` (`frames_of`), for a socket
    read outside a Transport (leveretctl's reply socket)."""
    return [(f[0].decode("utf-8", "surrogateescape"), messages.decode(f[1], f[2:]))
            for f in frames_of(parts)]


class LogThrottle:
    """At most `burst` log lines per `period` seconds; the others are counted and the count
    goes with the next line logged."""

    def __init__(self, burst: int = MALFORMED_LOG_BURST, period: float = MALFORMED_LOG_PERIOD):
        self.burst, self.period = burst, period
        self.window = -period  # when this period began (time.monotonic())
        self.logged = 0  # lines logged in this period
        self.unlogged = 0  # events not logged since the last line

    def allow(self) -> int | None:
        """None: do not log this one; else log it, with this many not logged before it."""
        now = time.monotonic()
        if now - self.window >= self.period:
            self.window, self.logged = now, 0
        if self.logged >= self.burst:
            self.unlogged += 1
            return None
        self.logged += 1
        unlogged, self.unlogged = self.unlogged, 0
        return unlogged


class Transport:
    """One per OS process; thread-safe `send`, one inbound thread."""

    def __init__(self, endpoint: str, curve=None, local_endpoint: str = ""):
        self.endpoint = endpoint  # this process's own ipc:// or tcp:// address
        self.curve = curve  # actors.secure.Curve: the cluster's keys (needed for tcp://)
        self.local_endpoint = local_endpoint  # ipc:// the PULL socket is also bound at ("": none)
        self.context = zmq.Context.instance()
        self._actors: dict[str, object] = {}  # actor name -> pykka ActorRef of a local actor
        self._local = threading.local()  # per-thread {endpoint: PUSH socket}
        self._dead: set[str] = set()  # endpoints of processes known to be gone
        self._fallback: Callable | None = None  # called with (name, msg) for unknown local names
        self._inbound: threading.Thread | None = None
        self._loop = None  # the EventLoop reading the PULL socket, when not a thread of its own
        self._outbox: dict[str, list] = {}  # loop thread: endpoint -> this turn's messages
        self._flush_armed = False  # a _flush is on the loop's ready queue
        self._pull = None  # that socket
        self._listener = None  # local_link.Listener: other loops' links into this one's
        self._links = None  # local_link.Links: this loop's links to other loops of the node
        self._closing = False
        self.malformed = 0  # messages received that were not ours, dropped
        self._malformed_log = LogThrottle()  # their log lines
        self._unreachable_log = LogThrottle()  # lines for sends to addresses that are not
        # test-only partitions between cluster hosts (actors/faults.py; None: not enabled)
        self._faults = faults.from_env(endpoint[6:].rpartition(":")[0]) \
            if endpoint.startswith("tcp://") else None

    # --- registry -------------------------------------------------------------------------------
    def register(self, name: str, actor_ref) -> str:
        self._actors[name] = actor_ref
        return make_address(self.endpoint, name)

    def unregister(self, name: str) -> None:
        self._actors.pop(name, None)

    def address(self, name: str) -> str:
        return make_address(self.endpoint, name)

    def set_fallback(self, fn: Callable) -> None:
        """`fn(name, msg)` receives messages for actor names not (or no longer) registered."""
        self._fallback = fn

    def mark_dead(self, endpoint: str) -> None:
        self._dead.add(endpoint)

    def revive(self, endpoint: str) -> None:
        """A process marked dead is alive after all (its node was marked down, as in a
        partition, and is back): messages go to it again."""
        self._dead.discard(endpoint)
        if self._links is not None:
            self._loop.call(self._links.forget, endpoint)

    def is_dead(self, endpoint: str) -> bool:
        return endpoint in self._dead

    # --- sending --------------------------------------------------------------------------------
    def send(self, address: str, msg) -> None:
        endpoint, _, name = address.partition("#")
        if endpoint == self.endpoint:
            self._deliver_local(name, msg)
            return
        if endpoint in self._dead:
            return
        if self._faults is not None and self._faults.cut_endpoint(endpoint):
            return  # a test cut the link to that node (actors/faults.py)
        loop = self._loop
        if loop is not None and loop.on_loop_thread():
            # on the event loop: into this turn's batch for that process, sent once the
            # actors of this turn have run (one multipart send per destination per turn)
            payload, frames = messages.encode(msg)
            box = self._outbox.get(endpoint)
            if box is None:
                box = self._outbox[endpoint] = []
                if not self._flush_armed:
                    self._flush_armed = True
                    loop.soon(self._flush)
            box.append((name.encode("utf-8", "surrogateescape"), payload, frames))
            return
        self._send_now(endpoint, name.encode("utf-8", "surrogateescape"),
                       *messages.encode(msg))

    def _socket(self, endpoint: str):
        """This thread's PUSH socket to that process."""
        sockets = getattr(self._local, "sockets", None)
        if sockets is None:
            sockets = self._local.sockets = {}
        sock = sockets.get(endpoint)
        if sock is None:
            sock = self.context.socket(zmq.PUSH)
            # Actor threads are short-lived (a channel, a reader, a deleted queue) and their
            # last words (ChannelDown, connection.closed, delete-ok) are sent just before the
            # thread ends and its socket is closed: LINGER 0 would drop them unsent.
            sock.setsockopt(zmq.LINGER, SEND_LINGER_MS)
            sock.setsockopt(zmq.SNDHWM, 0)  # bounded by credit flow, not by dropping
            if endpoint.startswith("tcp://"):
                self._secure(sock, endpoint, "connect")
            sock.connect(endpoint)
            sockets[endpoint] = sock
        return sock

    def _secure(self, sock, endpoint: str, role: str, watch: bool = True) -> None:
        """CURVE on a tcp:// socket, and (`watch`) a monitor that logs refused handshakes."""
        if self.curve is None:
            raise zmq.ZMQError(errno.EACCES, f"{endpoint}: tcp:// needs the cluster secret")
        if role == "bind":
            self.curve.server(sock)
        else:
            self.curve.client(sock)
        if watch:
            self._watch(sock, role, endpoint)

    def _watch(self, sock, role: str, endpoint: str) -> None:
        from actors import secure
        secure.watcher(self.context).watch(sock, role, endpoint)

    def _sender(self, endpoint: str):
        """The `send` of this thread's socket to that process; None, logged, when the endpoint
        cannot be connected to (not a ZeroMQ address: a reply address that came in a malformed
        message): the message is dropped, as one to a dead process is."""
        try:
            return self._socket(endpoint).send
        except (zmq.ZMQError, UnicodeEncodeError) as e:  # (a str with surrogate escapes)
            unlogged = self._unreachable_log.allow()
            if unlogged is not None:
                log.warning("message to %r dropped: %s%s", endpoint[:200],
                            getattr(e, "strerror", None) or e,
                            f" ({unlogged} more not logged)" if unlogged else "")
            return None

    def _send_now(self, endpoint: str, name: bytes, payload: bytes, frames) -> None:
        self._send_parts(endpoint, _multipart([(name, payload, frames)], events.enabled()))

    def _send_parts(self, endpoint: str, parts: list) -> None:
        """One multipart over this thread's ZeroMQ socket to that process."""
        # plain int flags: pyzmq's send_multipart builds an IntFlag per frame (measured: 6% of
        # a worker's time in enum.__call__/__or__); bodies are copied: zero-copy measured no
        # faster here, and needs pyzmq's garbage-collector thread
        send = self._sender(endpoint)
        if send is None:
            return
        for part in parts[:-1]:
            send(part, _SNDMORE)
        send(parts[-1], 0)

    def _flush(self) -> None:
        """Send this turn's batches: a lone message as itself, several as one multipart
        `[b"", msgpack([frames per message]), name, payload, (bodies), name, ...]`, over a
        local link to a loop of this node, else over ZeroMQ."""
        self._flush_armed = False
        outbox, self._outbox = self._outbox, {}
        stamped = events.enabled()
        links = self._links
        for endpoint, box in outbox.items():
            if endpoint in self._dead:
                continue
            parts = _multipart(box, stamped)
            if links is not None:
                link = links.link(endpoint)
                if link is not None and link.send(local_link.encode(parts)):
                    continue
            self._send_parts(endpoint, parts)

    def _deliver_local(self, name: str, msg) -> None:
        ref = self._actors.get(name)
        if ref is None:
            if self._fallback is not None:
                self._fallback(name, msg)
            return
        try:
            ref.tell(msg)
        except Exception:  # ActorDeadError: the actor stopped between lookup and tell
            if self._fallback is not None:
                self._fallback(name, msg)

    # --- receiving ------------------------------------------------------------------------------
    def start(self, loop=None) -> None:
        """Bind and read the process's endpoint: on a thread of its own, or on `loop` (an
        actors.runtime.EventLoop) between its other work. Raises zmq.ZMQError when the
        endpoint cannot be bound (a cluster's tcp:// port taken since the node picked it): the
        process then exits and its supervisor starts it again on a new endpoint."""
        ready = threading.Event()
        failed: list = []
        if loop is not None:
            self._loop = loop
            loop.call(self._bind_on_loop, ready, failed)
        else:
            self._inbound = threading.Thread(target=self._inbound_loop, args=(ready, failed),
                                             name="zmq-inbound", daemon=True)
            self._inbound.start()
        ready.wait()
        if failed:
            raise failed[0]

    def _bind(self, ready: threading.Event, failed: list):
        """The PULL socket, bound; None (and the error in `failed`) when it cannot be."""
        sock = self.context.socket(zmq.PULL)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVHWM, 0)
        try:
            if self.local_endpoint:  # plain (NULL) first: CURVE options apply to later binds
                sock.bind(self.local_endpoint)
            tcp = self.endpoint.startswith("tcp://")
            if tcp:  # (CURVE before the bind; the monitor names the bound endpoint)
                self._secure(sock, self.endpoint, "bind", watch=False)
            sock.bind(self.endpoint)
            if self.endpoint.endswith(":*"):  # the port the kernel gave, for every address
                self.endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT)
            if tcp:
                self._watch(sock, "bind", self.endpoint)
        except zmq.ZMQError as e:
            sock.close(0)
            failed.append(e)
            ready.set()
            return None
        return sock

    def _bind_on_loop(self, ready: threading.Event, failed: list) -> None:
        sock = self._pull = self._bind(ready, failed)
        if sock is None:
            return
        self._loop.add_reader(sock.getsockopt(zmq.FD), self._readable)
        path = local_link.link_path(self.endpoint)
        if path is not None:
            try:
                self._listener = local_link.Listener(self._loop, path, self._receive,
                                                     self._malformed_link)
                self._links = local_link.Links(self._loop)
            except OSError as e:  # ZeroMQ alone still carries everything
                log.warning("no local links at %s: %s", path, e)
        ready.set()
        self._readable()  # ZMQ_FD is edge-triggered: read what came before we watched it

    def _readable(self) -> None:
        """The PULL socket may have messages (ZMQ_FD signals changes, not levels): read until
        it has none, or INBOUND_BATCH of them and come back after the loop's other work."""
        sock = self._pull
        try:
            for _ in range(INBOUND_BATCH):
                if self._closing:
                    return
                try:
                    parts = sock.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    return
                except zmq.ContextTerminated:  # pragma: no cover - the process is ending
                    return
                self._receive(parts)
            self._loop.next_turn(self._readable)
        except Exception:
            # the socket's edge-triggered FD would never fire again for what is left unread:
            # the process would be deaf; let it crash instead (its supervisor restarts it)
            self._receive_failed()

    def _receive(self, parts: list) -> None:
        """One multipart off the PULL socket: a message `[name, payload, (bodies)]` or a batch
        `[b"", counts, name, payload, (bodies), name, ...]`. What is not one of ours is logged
        and dropped; each message of a well-framed batch is checked on its own."""
        try:
            found = frames_of(parts)
        except messages.Malformed as e:
            self._malformed(str(e), parts)
            return
        for frames in found:
            self._receive_one(frames)

    def _receive_one(self, parts: list) -> None:
        try:
            msg = messages.decode(parts[1], parts[2:])
            name = parts[0].decode()
        except messages.Malformed as e:
            self._malformed(str(e), parts)
            return
        except UnicodeDecodeError:
            self._malformed("an actor name that is not UTF-8", parts)
            return
        self._deliver_local(name, msg)

    def _malformed(self, why: str, parts: list) -> None:
        """Log a message that is not one of ours (rate-limited: a flood cannot fill the disk)
        and drop it. A PULL socket does not tell who sent it: the log says where it came in,
        the sender address the message claims, if any, and its first bytes."""
        self.malformed += 1
        unlogged = self._malformed_log.allow()
        if unlogged is None:
            return
        payload = parts[1] if len(parts) > 1 and parts[0] not in (_BATCH, _STAMPED) else b""
        sender = messages.claimed_sender(payload) if payload else ""
        first = b"|".join(bytes(p[:24]) for p in parts[:4])
        log.warning("malformed message dropped at %s: %s; claimed sender %s; %d frames, "
                    "first bytes %r%s", self.endpoint, why, sender or "none", len(parts),
                    first[:96], f" ({unlogged} more not logged)" if unlogged else "")

    def _malformed_link(self, why: str, first: bytes) -> None:
        """Bytes on a local link that are not a multipart of ours: logged as on ZeroMQ; the
        link is closed (its sender goes over ZeroMQ from then on)."""
        self._malformed(why, [b"", first])

    def _receive_failed(self) -> None:
        """An exception escaped the receive loop: log it and end the process (exit status
        EXIT_RECEIVE_FAILED) so that its supervisor (the node; the node's own: systemd)
        restarts it, as a crashed Erlang process is, instead of leaving it deaf."""
        log.critical("the receive loop of %s failed: exiting (status %d)", self.endpoint,
                     EXIT_RECEIVE_FAILED, exc_info=True)
        for handler in logging.getLogger().handlers:
            try:
                handler.flush()
            except Exception:  # noqa: BLE001 - exiting anyway
                pass
        os._exit(EXIT_RECEIVE_FAILED)

    def _inbound_loop(self, ready: threading.Event, failed: list) -> None:
        sock = self._bind(ready, failed)
        if sock is None:
            return
        ready.set()
        try:
            while not self._closing:
                try:
                    parts = sock.recv_multipart(copy=True)
                except zmq.ContextTerminated:
                    break
                self._receive(parts)
        except Exception:
            if not self._closing:
                self._receive_failed()
        sock.close(0)

    def close(self) -> None:
        """Send what this turn batched, stop accepting messages; the process exits right
        after, which closes the sockets (they linger to deliver what they were given)."""
        if self._loop is not None and self._loop.thread.is_alive():
            done = threading.Event()
            self._loop.call(lambda: (self._flush(), self._links is not None
                                     and self._links.flush(1.5), done.set()))
            done.wait(2)
        self._closing = True


def _multipart(box: list, stamped: bool) -> list:
    """The frames of one turn's messages for one process, as `_flush` and `_send_now` send
    them over ZeroMQ (a lone message as itself, several as a batch; stamped while lifecycle
    events are on)."""
    if len(box) == 1 and not stamped:
        name, payload, frames = box[0]
        return [name, payload, *frames]
    counts = [2 + len(frames) for _, _, frames in box]
    if stamped:
        parts = [_STAMPED, packb([hlc.clock().send(), counts])]
    else:
        parts = [_BATCH, packb(counts)]
    for name, payload, frames in box:
        parts.append(name)
        parts.append(payload)
        parts.extend(frames)
    return parts
