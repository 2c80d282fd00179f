"""A cluster and its secret (issue 11, docs/security.md): a node with another secret cannot join
and both sides say why, the members go on; Raft listens on the cluster address only; passwords
are hashed before they enter the definitions log; files are the broker user's only, whatever
the umask it was started with."""

from __future__ import annotations

import os
import re
import secrets
import socket
import stat
import subprocess
import uuid

import pika
import pytest

from tests.integration.cluster.nodes import Nodes

pytestmark = pytest.mark.timeout(240)

# either side of a refused Raft link: the accepting side cannot open the frames, the connecting
# side sees its peer hang up during the handshake (which side connects depends on the addresses)
RAFT_REFUSED = re.compile(r"refused the raft connection (from|to) \S+: its frames are not sealed "
                          r"with our cluster secret|raft member \S+ closed our connection during "
                          r"the handshake: it refused our cluster secret")


def roundtrip(pub, con, queue: str) -> None:
    """Declare on the first node's broker, publish with confirms there, get on the other."""
    with pub.connection() as c:
        ch = c.channel()
        ch.queue_declare(queue, durable=True)
        ch.confirm_delivery()
        ch.basic_publish("", queue, b"hello", mandatory=True)
    with con.connection() as c:
        method, _, body = c.channel().basic_get(queue, auto_ack=True)
        assert method is not None and body == b"hello"


def test_node_with_another_secret_cannot_join_and_both_sides_log_why(tmp_path):
    nodes = Nodes(tmp_path, 3, start=False)
    wrong = tmp_path / "other_secret"
    wrong.write_text(secrets.token_hex(32) + "\n")
    wrong.chmod(0o400)
    nodes.secret_files[2] = wrong
    try:
        nodes.start(0, 1)  # a majority of three with the secret
        roundtrip(nodes[0], nodes[1], "before")
        nodes.spawn(2)  # node3: another secret
        nodes.wait(lambda: RAFT_REFUSED.search(nodes[2].log_tail(400)), 30,
                   "node3's log to say the raft link was refused")
        nodes.wait(lambda: RAFT_REFUSED.search(nodes[0].log_tail(400)) and
                   RAFT_REFUSED.search(nodes[1].log_tail(400)), 30,
                   "node1's and node2's logs to say the raft link with node3 was refused")
        # node3 never joined: not up for the others, no AMQP listener, the others go on
        rows = [line.split("\t") for line in
                nodes[0].ctl("cluster_status").stdout.splitlines()[2:] if line.strip()]
        up = {r[0]: (r[3], r[4]) for r in rows}  # member -> (up, reachable)
        assert up[nodes.raft[0]] == ("true", "true") and up[nodes.raft[1]] == ("true", "true")
        assert up[nodes.raft[2]] == ("false", "false"), rows
        assert nodes[2].proc.poll() is None and not nodes[2].alive()
        roundtrip(nodes[1], nodes[0], "after")
    finally:
        nodes.stop()


def test_raft_listens_on_the_cluster_address_only(shared):
    """pysyncobj binds 0.0.0.0 unless told otherwise; a member binds cluster_address's host."""
    port = int(shared.raft[0].rpartition(":")[2])
    out = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True,
                         check=True).stdout
    addresses = {line.split()[3] for line in out.splitlines() if line.strip()}
    assert addresses == {f"127.0.0.1:{port}"}, out
    # another loopback address of this machine reaches nothing on that port
    with socket.socket() as s:
        s.settimeout(5)
        with pytest.raises(ConnectionRefusedError):
            s.connect(("127.0.0.2", port))


def _files(data_dir):
    for root, dirs, files in os.walk(data_dir):
        yield root, True
        for name in files:
            yield os.path.join(root, name), False


def test_passwords_never_reach_a_disk_in_plain_text_and_log_in_everywhere(shared):
    from actors import metadata_ops as ops
    from actors.ctl.commands import call
    user, password = f"u-{uuid.uuid4().hex[:6]}", f"pw-{uuid.uuid4().hex}"
    second = f"pw2-{uuid.uuid4().hex}"
    old_user, old_password = f"o-{uuid.uuid4().hex[:6]}", f"pw3-{uuid.uuid4().hex}"
    shared[1].ctl("add_user", user, password)
    shared[1].ctl("set_permissions", user, ".*", ".*", ".*")
    shared[2].ctl("change_password", user, second)
    # what an older leveretctl sends: the plaintext, hashed by the node that takes it
    call(str(shared[2].data_dir), ops.Auth("add_user", [old_user, old_password]))
    call(str(shared[0].data_dir), ops.Auth("set_permissions", [old_user, "/", ".*", ".*", ".*"]))
    for i in range(3):
        for who, pw in ((user, second), (old_user, old_password)):
            c = pika.BlockingConnection(pika.ConnectionParameters(
                "127.0.0.1", shared[i].port, credentials=pika.PlainCredentials(who, pw),
                connection_attempts=1, socket_timeout=5))
            c.close()
    found_user = False
    for i in range(3):
        for path, is_dir in _files(shared[i].data_dir):
            if is_dir or stat.S_ISSOCK(os.lstat(path).st_mode):
                continue
            with open(path, "rb") as f:
                data = f.read()
            for pw in (password, second, old_password):
                assert pw.encode() not in data, f"{pw} in {path}"
            found_user |= path.endswith("raft.journal") and user.encode() in data
        log = shared[i].log_path.read_text(errors="replace")
        assert password not in log and second not in log and old_password not in log
    assert found_user, "the user's name is in the raft journals (the search above can see them)"


def test_files_are_private_whatever_the_umask(tmp_path):
    old = os.umask(0)  # the nodes inherit it
    try:
        nodes = Nodes(tmp_path, 3)
    finally:
        os.umask(old)
    try:
        with nodes[0].connection() as c:
            ch = c.channel()
            ch.queue_declare("kept", durable=True)
            ch.confirm_delivery()
            ch.basic_publish("", "kept", b"x" * 10000, pika.BasicProperties(delivery_mode=2))
        nodes[1].ctl("add_user", "modes", "modes-password")
        nodes.wait(lambda: any(p.endswith("data.mdb") for p, _ in
                               _files(nodes[0].data_dir / "messages")), 10, "the message store")
        for i in range(3):
            seen = set()
            for path, is_dir in _files(nodes[i].data_dir):
                mode = stat.S_IMODE(os.lstat(path).st_mode)
                seen.add(os.path.basename(path))
                assert mode & 0o077 == 0, f"{path} is {mode:04o}"
                if is_dir:
                    assert mode == 0o700, f"{path} is {mode:04o}"
                elif not stat.S_ISSOCK(os.lstat(path).st_mode):
                    assert mode & 0o111 == 0, f"{path} is {mode:04o}"
            assert {"raft.journal", "data.mdb"} <= seen, seen
            assert stat.S_IMODE(os.stat(nodes[i].data_dir).st_mode) == 0o700
    finally:
        nodes.stop()
