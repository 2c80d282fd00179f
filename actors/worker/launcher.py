"""The worker launcher: one process that imports the workers' code once, then forks each worker
the node asks for, so that a worker starts without importing Leveret again.

Importing the worker's modules costs about 0.3 s of CPU per process, and a node starts four
workers at boot and one more at each restart: forked from this process a worker starts in a few
milliseconds of CPU, and shares the imported code's memory pages with its siblings. The node
stays each worker's supervisor: it is a child subreaper (PR_SET_CHILD_SUBREAPER), and each
worker is forked by a short-lived intermediate process that exits at once, so the worker becomes
the node's child, which the node waits for, signals and restarts as it did a process it started
itself (`ForkedWorker` has the part of subprocess.Popen the node uses). When the launcher is
unavailable (it died, or the platform has no subreaper) the node starts workers with `python -m
actors.worker.process` as before (`Launcher.spawn` returns None).

The node side (`Launcher`) and the launcher process (`main`, `python -m actors.worker.launcher`) talk
over a Unix socket pair: a request is the worker's argument list as JSON, with the descriptors
it must inherit (the cluster secret's pipe, a connection worker's hand-off socket) passed as
SCM_RIGHTS; the answer is the worker's pid.
"""

from __future__ import annotations

import array
import ctypes
import json
import logging
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

log = logging.getLogger("leveret.node")

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
READY_TIMEOUT_S = 60.0  # the launcher's imports, on a machine busy with other work
ANSWER_TIMEOUT_S = 30.0  # a fork, on such a machine
MAX_REQUEST = 1 << 20  # an argument list (the configuration's JSON is in it)
MAX_FDS = 8
PRELOAD = ("actors.worker.process", "actors.connection.connection_host", "actors.queue.queue_host")


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        return False
    return libc.prctl(option, value, 0, 0, 0) == 0


# --- framing: a 4-byte length, then JSON; descriptors ride along with the first byte ------------
def _send(sock: socket.socket, obj, fds=()) -> None:
    data = json.dumps(obj).encode()
    frame = struct.pack(">I", len(data)) + data
    if fds:
        sock.sendmsg([frame[:1]], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                    array.array("i", fds))])
        frame = frame[1:]
    sock.sendall(frame)


def _recv_exact(sock: socket.socket, n: int, fds: list) -> bytes | None:
    buf = b""
    while len(buf) < n:
        data, anc, _, _ = sock.recvmsg(n - len(buf), socket.CMSG_SPACE(MAX_FDS * 4))
        for level, kind, payload in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                got = array.array("i")
                got.frombytes(payload[:len(payload) - len(payload) % 4])
                fds.extend(got)
        if not data:
            return None
        buf += data
    return buf


def _recv(sock: socket.socket):
    """(object, descriptors) of the next frame, or (None, []) at the end of the stream."""
    fds: list = []
    head = _recv_exact(sock, 4, fds)
    if head is None:
        return None, fds
    (size,) = struct.unpack(">I", head)
    if size > MAX_REQUEST:
        raise ValueError(f"a frame of {size} bytes")
    body = _recv_exact(sock, size, fds)
    if body is None:
        return None, fds
    return json.loads(body), fds


# --- the node's side ------------------------------------------------------------------------------
class ForkedWorker:
    """A worker the launcher forked, now the node's child: what the node uses of Popen."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                # (not ours to wait for: cannot happen once the launcher answered; counted as
                # an exit so that the node restarts the slot rather than wait forever)
                self.returncode = -signal.SIGKILL
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
            time.sleep(0.01)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Launcher:
    """The node's handle on the launcher process (started by `start`, after the node has set
    the environment its workers inherit)."""

    def __init__(self):
        self.proc: subprocess.Popen | None = None
        self.sock: socket.socket | None = None
        self.ready = False  # the launcher said it imported everything
        self.failed = False  # it cannot be used: workers start as their own programs
        self.lock = threading.Lock()

    def start(self) -> None:
        if not _prctl(PR_SET_CHILD_SUBREAPER, 1):
            log.info("no child subreaper on this platform: workers start as programs of their "
                     "own")
            self.failed = True
            return
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "actors.worker.launcher", "--fd", str(theirs.fileno())],
                stdin=subprocess.DEVNULL, pass_fds=[theirs.fileno()])
        except OSError:
            log.exception("the worker launcher did not start: workers start as programs of "
                          "their own")
            ours.close()
            self.failed = True
            return
        finally:
            theirs.close()
        self.sock = ours

    def pids(self) -> list[int]:
        """The launcher's pid while it runs (its memory is the node's too)."""
        if self.proc is not None and self.proc.poll() is None:
            return [self.proc.pid]
        return []

    def spawn(self, argv: list[str], fd_args: dict[str, int]) -> ForkedWorker | None:
        """Fork a worker with `python -m actors.worker.process` `argv`, whose options `fd_args` name
        descriptors of this process (each option's value in argv is replaced by the number
        the descriptor has in the worker); None when the launcher cannot (the caller starts
        the worker as a program)."""
        with self.lock:
            if self.failed or self.sock is None:
                return None
            try:
                if not self.ready:
                    self.sock.settimeout(READY_TIMEOUT_S)
                    answer, _ = _recv(self.sock)
                    if not (isinstance(answer, dict) and answer.get("ready")):
                        raise OSError(f"the launcher did not get ready: {answer!r}")
                    self.ready = True
                self.sock.settimeout(ANSWER_TIMEOUT_S)
                options = list(fd_args)
                _send(self.sock, {"argv": argv, "fd_args": options},
                      [fd_args[o] for o in options])
                answer, _ = _recv(self.sock)
                if not (isinstance(answer, dict) and type(answer.get("pid")) is int):
                    raise OSError(f"the launcher answered {answer!r}")
                return ForkedWorker(answer["pid"])
            except (OSError, ValueError) as e:
                log.error("the worker launcher failed (%s): workers start as programs of "
                          "their own from now on", e)
                self._give_up()
                return None

    def _give_up(self) -> None:
        self.failed = True
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        """The launcher ends when its socket closes."""
        with self.lock:
            if self.sock is not None:
                self.sock.close()
                self.sock = None
            if self.proc is not None:
                try:
                    self.proc.wait(5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()


# --- the launcher process ---------------------------------------------------------------------------
def _fork_worker(sock: socket.socket, node: int, argv: list[str], fd_args: list[str],
                 fds: list[int]) -> int:
    """Fork an intermediate process that forks the worker and exits (so the worker becomes
    the node's child); return the worker's pid."""
    for option, fd in zip(fd_args, fds):
        i = argv.index(option)
        argv[i + 1] = str(fd)
    r, w = os.pipe()
    middle = os.fork()
    if middle == 0:
        try:
            pid = os.fork()
            if pid == 0:
                os.close(r)
                os.close(w)
                _run_worker(sock, node, argv)  # never returns
            os.write(w, struct.pack(">i", pid))
        finally:
            os._exit(0)
    os.close(w)
    try:
        data = b""
        while len(data) < 4:
            chunk = os.read(r, 4 - len(data))
            if not chunk:
                raise OSError("the intermediate process died before the worker started")
            data += chunk
    finally:
        os.close(r)
        os.waitpid(middle, 0)  # its exit made the worker the node's child (the subreaper's)
    return struct.unpack(">i", data)[0]


def _run_worker(sock: socket.socket, node: int, argv: list[str]) -> None:
    code = 1
    try:
        sock.close()
        signal.signal(signal.SIGINT, signal.default_int_handler)  # (Python's, as in a program)
        deadline = time.monotonic() + ANSWER_TIMEOUT_S
        while os.getppid() != node:  # the intermediate process is exiting
            if time.monotonic() > deadline:
                os._exit(1)
            time.sleep(0.001)
        from actors.worker import process
        try:
            _title(argv)
            code = process.main(argv)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: BLE001 - as the worker's own program would: printed, exit 1
        import traceback
        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _title(argv: list[str]) -> None:
    """`ps` shows the worker as the program it stands for (operators and bench/ look for
    `--kind queue`); the configuration's JSON is left out."""
    import setproctitle
    shown, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == "--config-json":
            skip = True
            continue
        shown.append(a)
    setproctitle.setproctitle(" ".join([sys.executable, "-m", "actors.worker.process", *shown]))


def main(argv=None) -> int:
    import argparse
    p = argparse.ArgumentParser(prog="leveret-worker-launcher")
    p.add_argument("--fd", type=int, required=True, help="the socket to the node")
    args = p.parse_args(argv)
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # dies with the node, however it dies
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # (Ctrl-C: the node stops the workers)
    node = os.getppid()
    sock = socket.socket(fileno=args.fd)
    import importlib
    for name in PRELOAD:
        importlib.import_module(name)
    if threading.active_count() != 1:  # forking a process with threads copies their locks
        _send(sock, {"ready": False, "why": f"{threading.active_count()} threads after import"})
        return 1
    _send(sock, {"ready": True})
    while True:
        try:
            request, fds = _recv(sock)
        except (OSError, ValueError):
            return 1
        if request is None:
            return 0  # the node stopped, or gave up on us
        try:
            pid = _fork_worker(sock, node, list(request["argv"]), list(request["fd_args"]),
                               fds)
            answer = {"pid": pid}
        except (OSError, KeyError, ValueError, TypeError) as e:
            answer = {"error": str(e)}
        finally:
            for fd in fds:
                os.close(fd)
        _send(sock, answer)


if __name__ == "__main__":
    sys.exit(main())
