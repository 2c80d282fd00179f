"""The cluster secret, and the keys and checks derived from it (docs/security.md).

Mirrors Erlang's distribution cookie (`~/.erlang.cookie`), which RabbitMQ nodes must share to
talk to each other: a node of a cluster reads one secret, from `cluster_secret` (a config value)
or from a file (`cluster_secret_file`, default `<data_dir>/cluster_secret`, created 0400 with
random bytes on the first start when absent, refused when anyone but its owner may read it, as
Erlang refuses a cookie file others can read). Every member must hold the same one.

Owns, per process:
- `load_secret(config)`: the node's secret (reads, creates, checks the file);
- `raft_password(secret)`: the password pysyncobj encrypts and authenticates Raft frames with
  (actors/node/cluster.py);
- `Curve`: the ZeroMQ CURVE key pairs derived from the secret (HKDF-SHA256), one for the
  servers (every tcp:// PULL), one for the clients (every PUSH to a tcp:// endpoint); a peer
  without the secret knows neither, so it cannot even start a handshake;
- the ZAP handler (one thread per process that binds a tcp:// endpoint): admits a CURVE client
  only when its public key is the cluster's, logs the address of every peer it refuses;
- the socket watcher (one thread per process of a cluster): a monitor on each tcp:// socket,
  so a refused handshake is logged on both sides: the binding side names the peer's address,
  the connecting side says its peer refused its credentials.

Workers never see the secret on their command line (`ps` shows it to every user): the node
hands it over through a pipe (`pass_secret`, `read_secret`).
"""

from __future__ import annotations

import logging
import os
import queue
import secrets
import socket
import stat
import threading
import time

import zmq
from zmq.utils import z85

log = logging.getLogger("leveret.secure")

SECRET_FILE = "cluster_secret"  # default file name in the data dir
MIN_SECRET_BYTES = 16  # a shorter secret is refused
ZAP_DOMAIN = b"leveret"
ZAP_ENDPOINT = "inproc://zeromq.zap.01"  # RFC 27: where libzmq asks
LOG_EVERY_S = 30.0  # refusals of one peer are logged at most this often


def secret_path(config) -> str:
    return config.cluster_secret_file or os.path.join(config.data_dir, SECRET_FILE)


def load_secret(config) -> bytes:
    """The cluster secret of this node: the config value, else the file (created when absent).
    SystemExit with a clear message when it cannot be used."""
    if config.cluster_secret:
        secret = config.cluster_secret.encode()
        where = "the cluster_secret setting"
    else:
        path = secret_path(config)
        where = path
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32) + "\n")
                f.flush()
                os.fsync(f.fileno())
            os.chmod(path, 0o400)  # whatever the umask
            log.info("created the cluster secret %s: copy this file to every member of the "
                     "cluster (docs/security.md)", path)
        try:
            st = os.stat(path)
            if st.st_uid != os.getuid():
                raise SystemExit(f"leveret-server: the cluster secret file {path} is not owned "
                                 f"by this user (uid {os.getuid()})")
            if st.st_mode & 0o077:
                raise SystemExit(
                    f"leveret-server: the cluster secret file {path} may be read by others "
                    f"(mode {stat.S_IMODE(st.st_mode):04o}): chmod 400 {path}")
            with open(path, "rb") as f:
                secret = f.read()
        except OSError as e:
            raise SystemExit(f"leveret-server: cannot read the cluster secret file {path}: "
                             f"{e.strerror}")
    secret = secret.strip()
    if len(secret) < MIN_SECRET_BYTES:
        raise SystemExit(f"leveret-server: the cluster secret in {where} is shorter than "
                         f"{MIN_SECRET_BYTES} bytes")
    return secret


def _derive(secret: bytes, purpose: str) -> bytes:
    # (imported here: only a cluster's processes derive keys, and importing cryptography
    # costs every process of a lone node about 85 ms of CPU at its start)
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=b"leveret cluster secret",
                info=purpose.encode()).derive(secret)


def raft_password(secret: bytes) -> str:
    """pysyncobj's `password` (it derives its Fernet key from it with PBKDF2)."""
    return _derive(secret, "raft").hex()


def pass_secret(secret: bytes) -> int:
    """A pipe holding the secret: its read end's descriptor, for a child (pass_fds); the
    caller closes it once the child started."""
    r, w = os.pipe()
    try:
        os.write(w, secret)  # far below the pipe's buffer
    finally:
        os.close(w)
    return r


def read_secret(fd: int) -> bytes:
    with os.fdopen(fd, "rb") as f:
        return f.read()


class Curve:
    """The cluster's CURVE keys (z85): what a member uses to bind and to connect over tcp://."""

    def __init__(self, secret: bytes):
        self.server_secret = z85.encode(_derive(secret, "zmq curve server"))
        self.server_public = zmq.curve_public(self.server_secret)
        self.client_secret = z85.encode(_derive(secret, "zmq curve client"))
        self.client_public = zmq.curve_public(self.client_secret)

    def server(self, sock) -> None:
        """Before bind: only CURVE clients with the cluster's keys get through."""
        start_zap(sock.context, self)
        sock.setsockopt(zmq.ZAP_DOMAIN, ZAP_DOMAIN)
        sock.setsockopt(zmq.CURVE_SERVER, 1)
        sock.setsockopt(zmq.CURVE_SECRETKEY, self.server_secret)

    def client(self, sock) -> None:
        """Before connect."""
        sock.setsockopt(zmq.CURVE_SERVERKEY, self.server_public)
        sock.setsockopt(zmq.CURVE_PUBLICKEY, self.client_public)
        sock.setsockopt(zmq.CURVE_SECRETKEY, self.client_secret)


class _Throttle:
    """At most one line per key per LOG_EVERY_S; says how many were left out."""

    def __init__(self):
        self.last: dict = {}  # key -> (monotonic time logged, left out since)
        self.lock = threading.Lock()

    def __call__(self, key, fmt, *args) -> None:
        now = time.monotonic()
        with self.lock:
            at, skipped = self.last.get(key, (None, 0))
            if at is not None and now - at < LOG_EVERY_S:
                self.last[key] = (at, skipped + 1)
                return
            self.last[key] = (now, 0)
            if len(self.last) > 4096:
                self.last.clear()
        if skipped:
            fmt += " (%d more since the last such line)"
            args = (*args, skipped)
        log.warning(fmt, *args)


throttled = _Throttle()

_zap_lock = threading.Lock()
_zap_started: set = set()  # contexts with a ZAP handler


def start_zap(context, curve: Curve) -> None:
    """Bind this context's ZAP handler (once): libzmq asks it about every CURVE client that
    got past the handshake's crypto (so a client that knew the server key)."""
    with _zap_lock:
        if id(context) in _zap_started:
            return
        sock = context.socket(zmq.REP)
        sock.setsockopt(zmq.LINGER, 0)
        sock.bind(ZAP_ENDPOINT)  # before any server socket binds: none goes unchecked
        _zap_started.add(id(context))
    threading.Thread(target=_zap_loop, args=(sock, curve.client_public), name="zmq-zap",
                     daemon=True).start()


def _zap_loop(sock, allowed_key: bytes) -> None:
    allowed = z85.decode(allowed_key)
    while True:
        try:
            frames = sock.recv_multipart()
        except zmq.ZMQError:  # the context is terminated: the process is exiting
            sock.close(0)
            return
        try:
            version, request_id, domain, address, _identity, mechanism = frames[:6]
            credentials = frames[6:]
            ok = (version == b"1.0" and domain == ZAP_DOMAIN and mechanism == b"CURVE"
                  and credentials == [allowed])
            if not ok:
                who = address.decode(errors="replace")
                throttled(("zap", who), "refused a ZeroMQ connection from %s: %s mechanism "
                          "with a client key that is not the cluster's (no cluster secret)",
                          who, mechanism.decode(errors="replace"))
            sock.send_multipart([b"1.0", request_id, b"200" if ok else b"400",
                                 b"OK" if ok else b"not a cluster member",
                                 b"member" if ok else b"", b""])
        except Exception:  # noqa: BLE001 - a malformed request: answer no, go on
            log.exception("ZAP request not understood")
            try:
                sock.send_multipart([b"1.0", frames[1] if len(frames) > 1 else b"", b"500",
                                     b"bad request", b"", b""])
            except zmq.ZMQError:
                return


# --- the socket watcher: handshake failures, logged -----------------------------------------
_EVENTS = (zmq.EVENT_ACCEPTED | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL |
           zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_AUTH |
           zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_MONITOR_STOPPED)
_FAILED = (zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL |
           zmq.EVENT_HANDSHAKE_FAILED_AUTH)


class Watcher:
    """One thread per process: reads the monitor sockets of its tcp:// sockets."""

    def __init__(self, context):
        self.context = context
        self.new: queue.SimpleQueue = queue.SimpleQueue()  # (monitor PAIR, role, endpoint)
        self.thread = threading.Thread(target=self._run, name="zmq-watch", daemon=True)
        self.thread.start()

    def watch(self, sock, role: str, endpoint: str) -> None:
        """Called by the thread that owns `sock` (the monitor is set up on it there)."""
        pair = sock.get_monitor_socket(_EVENTS)
        self.new.put((pair, role, endpoint))

    def _run(self) -> None:
        from zmq.utils.monitor import recv_monitor_message
        poller = zmq.Poller()
        watched: dict = {}  # monitor PAIR -> [role, endpoint, peer of the last ACCEPTED]
        while True:
            while True:
                try:
                    # nothing watched: wait for a socket (zmq_poll of no socket returns at once:
                    # polling then spun this thread at 100% CPU)
                    pair, role, endpoint = (self.new.get_nowait() if watched else
                                            self.new.get(timeout=1.0))
                except queue.Empty:
                    break
                watched[pair] = [role, endpoint, ""]
                poller.register(pair, zmq.POLLIN)
            if not watched:
                continue
            try:
                ready = poller.poll(200)
            except zmq.ZMQError:  # the context is terminated: let it finish
                for pair in watched:
                    pair.close(0)
                return
            for pair, _ in ready:
                try:
                    event = recv_monitor_message(pair, zmq.NOBLOCK)
                except zmq.ZMQError:
                    # ready but nothing to read, or failing: its socket is gone (polling it
                    # again would return at once, for good: this thread spun at 100% CPU)
                    event = {"event": zmq.EVENT_MONITOR_STOPPED}
                entry = watched[pair]
                if event["event"] == zmq.EVENT_MONITOR_STOPPED:
                    poller.unregister(pair)
                    pair.close(0)
                    del watched[pair]
                    continue
                try:
                    self._event(entry, event)
                except Exception:  # noqa: BLE001 - a log line lost, never the watcher
                    log.exception("socket monitor event %r not understood", event)

    @staticmethod
    def _event(entry: list, event: dict) -> None:
        role, endpoint, peer = entry
        kind, value = event["event"], event["value"]
        if kind == zmq.EVENT_ACCEPTED:
            entry[2] = _peer_of(value, endpoint)
        elif kind & _FAILED and role == "bind":
            who = peer or "an unknown address"
            throttled(("bind", endpoint, peer.rpartition(":")[0]),
                      "refused a ZeroMQ connection from %s to %s: its handshake is not CURVE "
                      "with the cluster's keys (a peer without the cluster secret) [%s]",
                      who, endpoint, _describe(kind, value))
        elif kind & _FAILED:
            throttled(("connect", endpoint), "%s refused our credentials: the CURVE handshake "
                      "failed [%s]; does it hold the same cluster secret as this node?",
                      endpoint, _describe(kind, value))


def _describe(kind: int, value: int) -> str:
    if kind == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
        return f"ZAP status {value}"
    if kind == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
        return f"protocol error 0x{value:x}"
    return f"connection closed during the handshake, errno {value}"


def _peer_of(fd: int, endpoint: str) -> str:
    """The remote address of the connection libzmq just accepted on `fd` (a dup of it, so
    libzmq's own descriptor is never closed here); "" when it is gone already, or the number
    now names another socket than a connection to `endpoint`."""
    port = endpoint.rpartition(":")[2]
    try:
        with socket.socket(fileno=os.dup(fd)) as s:  # (the family is read from the fd)
            if s.family not in (socket.AF_INET, socket.AF_INET6) or \
                    str(s.getsockname()[1]) != port:
                return ""
            host, peer_port = s.getpeername()[:2]
            return f"{host}:{peer_port}"
    except (OSError, ValueError, IndexError):
        return ""


_watchers: dict = {}
_watch_lock = threading.Lock()


def watcher(context) -> Watcher:
    with _watch_lock:
        w = _watchers.get(id(context))
        if w is None:
            w = _watchers[id(context)] = Watcher(context)
        return w
