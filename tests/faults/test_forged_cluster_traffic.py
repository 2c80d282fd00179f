"""Forged cluster traffic (issue 11, docs/security.md): what an attacker on the network sends to
a cluster member's internal ports without the cluster secret runs nothing and gets nothing.

- ZeroMQ: a plain PUSH (no CURVE keys) to the node's and a connection worker's tcp:// endpoint
  with well-formed messages that would create a user with full rights: never delivered, the
  refused peer is logged;
- Raft: a pysyncobj frame as pysyncobj sends it without a password, carrying a pickle that would
  create a file, and a 'readonly' node handshake: the file never appears, nothing comes back,
  the refusal is logged; a peer that holds the secret but says it is a readonly node is refused
  too (Leveret has no readonly members: nobody is streamed the definitions log)."""

from __future__ import annotations

import os
import pickle
import re
import socket
import struct
import zlib

import pika
import pytest
import zmq

from actors import messages as m
from tests.integration.cluster.nodes import Nodes

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def nodes(tmp_path):
    n = Nodes(tmp_path)
    yield n
    n.stop()


def worker_args(broker, kind: str) -> dict:
    """The tcp:// endpoint a worker of this kind listens on (its command line says
    `tcp://host:*`: the port is its own bind's, found here as an attacker would, by its
    listening socket) and its --node address."""
    pid = next(iter(broker.worker_pids(kind).values()))
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        # (a worker forked by the launcher shows its command as one string: setproctitle)
        argv = f.read().decode().replace("\0", " ").split()
    endpoint = argv[argv.index("--endpoint") + 1]
    host, _, port = endpoint[len("tcp://"):].rpartition(":")
    if port == "*":
        [port] = listening_ports(pid)
    return {"endpoint": f"tcp://{host}:{port}", "node": argv[argv.index("--node") + 1]}


def listening_ports(pid: int) -> list[int]:
    """The TCP ports process `pid` listens on (/proc: its socket inodes in LISTEN state)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = []
    with open(f"/proc/{pid}/net/tcp") as f:
        for line in f.readlines()[1:]:
            cols = line.split()
            if cols[3] == "0A" and cols[9] in inodes:  # 0A: TCP_LISTEN
                ports.append(int(cols[1].rpartition(":")[2], 16))
    return ports


def login(broker, user, password) -> bool:
    try:
        pika.BlockingConnection(pika.ConnectionParameters(
            "127.0.0.1", broker.port, credentials=pika.PlainCredentials(user, password),
            connection_attempts=1, socket_timeout=5)).close()
        return True
    except pika.exceptions.ProbableAuthenticationError:
        return False


def test_forged_zeromq_messages_without_the_keys_are_not_delivered(nodes):
    conn = worker_args(nodes[0], "conn")
    node_endpoint, node_name = conn["node"].split("#", 1)
    assert node_endpoint.startswith("tcp://") and conn["endpoint"].startswith("tcp://")
    ctx = zmq.Context()
    try:
        to_node = ctx.socket(zmq.PUSH)
        to_node.connect(node_endpoint)
        # leveretctl's request, as a forged Rpc to the metadata actor
        for rpc in (m.Rpc("", 0, "auth", {"method": "add_user", "args": ["evil", "evil"]}),
                    m.Rpc("", 0, "auth", {"method": "set_permissions",
                                          "args": ["evil", "/", ".*", ".*", ".*"]})):
            to_node.send_multipart([node_name.encode(), m.encode(rpc)[0]])
        # a definitions change, straight into a connection worker's replica
        to_worker = ctx.socket(zmq.PUSH)
        to_worker.connect(conn["endpoint"])
        change = m.MetaChange([["auth", "add_user", ["evil2", "evil2"]],
                               ["auth", "set_permissions", ["evil2", "/", ".*", ".*", ".*"]]],
                              10 ** 6)
        to_worker.send_multipart([b"control", m.encode(change)[0]])
        for endpoint in (node_endpoint, conn["endpoint"]):
            # the peer is named from the ACCEPTED event's descriptor, which may already be
            # closed when the monitor thread reads it (the forger's handshake fails at once):
            # then the line says "an unknown address", which is as much a refusal
            pattern = re.compile(r"refused a ZeroMQ connection from (127\.0\.0\.1:\d+|an "
                                 r"unknown address) to " + re.escape(endpoint))
            nodes.wait(lambda: pattern.search(nodes[0].log_tail(2000)), 20,
                       f"the refusal of the forged peer of {endpoint} in node1's log")
    finally:
        # linger 0 on every socket, also when the wait above failed: term() would otherwise
        # block for good on a message the refused peer can never deliver
        ctx.destroy(linger=0)
    nodes[0].ctl("add_user", "witness", "witness")  # the metadata actor is serving
    users = nodes[0].ctl("list_users").stdout
    assert "witness" in users and "evil" not in users
    for _ in range(4):  # connections are dealt to the connection workers in turn
        assert not login(nodes[0], "evil2", "evil2")
        assert not login(nodes[0], "evil", "evil")


def frame(message, fernet=None) -> bytes:
    data = zlib.compress(pickle.dumps(message, 2), 3)
    if fernet is not None:
        data = fernet.encrypt(data)
    return struct.pack("i", len(data)) + data


def read_frame(s, fernet):
    head = b""
    while len(head) < 4:
        chunk = s.recv(4 - len(head))
        if not chunk:
            return None
        head += chunk
    (n,) = struct.unpack("i", head)
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return pickle.loads(zlib.decompress(fernet.decrypt(data)))


def closed_without_a_word(s) -> bool:
    """The member hung up without sending a byte."""
    s.settimeout(10)
    try:
        return s.recv(65536) == b""
    except ConnectionResetError:
        return True


class CreateFile:
    """Unpickling it creates a file (what a forged frame did to a member without a password)."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_forged_raft_frames_run_nothing_and_get_nothing(nodes, tmp_path):
    host, port = nodes.raft[0].rsplit(":", 1)
    witness = tmp_path / "forged-pickle-ran"
    for message in (CreateFile(str(witness)), "readonly", ["status"]):
        with socket.create_connection((host, int(port)), timeout=5) as s:
            s.sendall(frame(message))  # as pysyncobj sends without a password
            assert closed_without_a_word(s), message
    assert not witness.exists()
    nodes.wait(lambda: re.search(r"refused the raft connection from 127\.0\.0\.1:\d+: its "
                                 r"frames are not sealed with our cluster secret",
                                 nodes[0].log_tail(2000)), 10, "the refusal in node1's log")
    # a huge announced frame is not buffered whole before its check
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(struct.pack("i", 2 ** 31 - 1))
        try:
            for _ in range(64):
                s.sendall(b"\0" * 65536)
        except (BrokenPipeError, ConnectionResetError):
            pass
        assert closed_without_a_word(s)
    nodes[0].ctl("add_user", "after", "after")  # the cluster still commits
    assert "after" in nodes[2].ctl("list_users").stdout


def test_a_readonly_node_is_refused_even_with_the_secret(nodes):
    """pysyncobj streams its log to any peer that says 'readonly'; a Leveret member has none."""
    from pysyncobj.encryptor import getEncryptor
    from actors.secure import raft_password
    fernet = getEncryptor(raft_password(nodes.secret_file.read_bytes().strip()))
    host, port = nodes.raft[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        ours = os.urandom(32)
        s.sendall(frame(ours, fernet))  # the key exchange, as a pysyncobj peer starts it
        reply = read_frame(s, fernet)
        assert reply is not None and reply[0] == ours  # it holds the secret: the link is up
        s.sendall(frame((reply[1], "readonly"), fernet))
        assert closed_without_a_word(s)
    nodes.wait(lambda: "it says it is a readonly node" in nodes[0].log_tail(2000), 10,
               "the refusal of the readonly node in node1's log")
