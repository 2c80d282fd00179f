"""The management listener's defences (actors/management/server.py, docs/security.md) against a
real node: `loopback_users` log in from loopback only, as over AMQP, shown from a network
namespace of the test's own; and the refusals that keep another site's page from acting with
an operator's browser (no WWW-Authenticate, JSON bodies by their Content-Type only, no
state-changing request from another origin), each forged request shown without effect."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from conftest import REPO, Broker, free_port
from test_management import Api

LOOPBACK_ONLY = {"error": "not_authorised", "reason": "User can only log in via localhost"}


def _start(tmp_path_factory, settings: str = "") -> Broker:
    """A node whose management listener is on every interface (0.0.0.0)."""
    port = free_port()
    folder = Path(tempfile.mkdtemp(prefix="leveret-", dir=tmp_path_factory.getbasetemp()))
    (folder / "leveret.toml").write_text(f'management_host = "0.0.0.0"\n{settings}')
    broker = Broker.start_leveret(folder, "--management-port", str(port), "--config",
                                  str(folder / "leveret.toml"))
    broker.http_port = port
    return broker


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    broker = _start(tmp_path_factory)
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def http(node):
    return Api(node.http_port)


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    res = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and res.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {res.stderr.strip()}")
    return res


class Namespace:
    """A network namespace joined to this one by a veth pair: this side `host_ip`, the
    namespace's side `ns_ip` (a /30 of 10.0.0.0/8 that no interface here uses)."""

    def __init__(self):
        tag = f"{os.getpid() % 100000}{random.randrange(100)}"
        self.name, self.veth = f"leveret-sec-{tag}", f"lvsec{tag}"
        used = _ip("-o", "addr").stdout
        while True:
            prefix = f"10.{random.randrange(100, 250)}.{random.randrange(256)}"
            if f" {prefix}." not in used:
                break
        self.host_ip, self.ns_ip = f"{prefix}.1", f"{prefix}.2"

    def create(self) -> None:
        _ip("netns", "add", self.name)
        _ip("link", "add", self.veth, "type", "veth", "peer", "name", self.veth + "n")
        _ip("link", "set", self.veth + "n", "netns", self.name)
        _ip("addr", "add", self.host_ip + "/30", "dev", self.veth)
        _ip("link", "set", self.veth, "up")
        _ip("-n", self.name, "addr", "add", self.ns_ip + "/30", "dev", self.veth + "n")
        _ip("-n", self.name, "link", "set", self.veth + "n", "up")

    def remove(self) -> None:
        _ip("link", "del", self.veth, check=False)  # (its peer goes with it)
        _ip("netns", "del", self.name, check=False)

    def api(self, port: int, method: str, path: str, user="guest", password="guest"):
        """(status, JSON, response headers) of a request sent from inside the namespace to
        this side's address, with test_management's Api (in a process that joined it)."""
        script = ("import json, sys; from test_management import Api; "
                  "print(json.dumps(Api(*json.loads(sys.argv[1])).send(*json.loads("
                  "sys.argv[2]))))")
        res = subprocess.run(
            ["ip", "netns", "exec", self.name, sys.executable, "-c", script,
             json.dumps([port, self.host_ip]),
             json.dumps([method, path, None, None, user, password])],
            capture_output=True, text=True, timeout=60,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(
                [str(REPO / "tests"), str(REPO / "tests" / "integration")])})
        assert res.returncode == 0, res.stderr
        return tuple(json.loads(res.stdout))


@pytest.fixture
def netns():
    if os.geteuid() != 0:
        pytest.skip("needs root to create a network namespace (ip netns add)")
    if shutil.which("ip") is None:
        pytest.skip("needs iproute2's `ip` to create a network namespace")
    ns = Namespace()
    try:
        try:
            ns.create()
        except RuntimeError as e:
            pytest.skip(f"cannot create a network namespace here: {e}")
        yield ns
    finally:
        ns.remove()


def test_guest_only_from_loopback_on_the_management_api__E3(node, http, netns):
    """rabbit_mgmt_util:is_authorized: guest's right password from another host is a 401
    with RabbitMQ's body; from 127.0.0.1 it is accepted; another user from the namespace is
    accepted (the rule is the AMQP listener's, permissions.loopback_refused)."""
    port = node.http_port
    status, body, headers = netns.api(port, "GET", "/api/whoami")
    assert (status, body) == (401, LOOPBACK_ONLY)
    assert "www-authenticate" not in {k.lower() for k in headers}
    assert netns.api(port, "GET", "/api/overview")[:2] == (401, LOOPBACK_ONLY)
    # a wrong password is refused as such, wherever it comes from
    assert netns.api(port, "GET", "/api/whoami", password="wrong")[:2] == (
        401, {"error": "not_authorised", "reason": "Login failed"})
    assert http("GET", "/api/whoami") == (200, {"name": "guest", "tags": ["administrator"]})
    node.ctl("add_user", "remote-admin", "pw")
    node.ctl("set_user_tags", "remote-admin", "administrator")
    assert netns.api(port, "GET", "/api/whoami", "remote-admin", "pw")[:2] == (
        200, {"name": "remote-admin", "tags": ["administrator"]})
    assert (f"HTTP access denied: user 'guest' can only log in via localhost "
            f"(from {netns.ns_ip})") in node.log_tail(200)


def test_loopback_users_empty_lets_guest_in_from_anywhere__E3(tmp_path_factory, netns):
    """`loopback_users = []` is honoured by the management API as by AMQP."""
    broker = _start(tmp_path_factory, "loopback_users = []\n")
    try:
        assert netns.api(broker.http_port, "GET", "/api/whoami")[:2] == (
            200, {"name": "guest", "tags": ["administrator"]})
    finally:
        broker.stop()


# --- cross-site request forgery -------------------------------------------------------------
def _depth(node, queue: str) -> int:
    with node.connection() as c:
        return c.channel().queue_declare(queue, passive=True).method.message_count


def _multipart(doc: dict) -> tuple[bytes, dict]:
    """The body and headers of an HTML form uploading `doc` as its `file` part."""
    boundary = uuid.uuid4().hex
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; "
            f"filename=\"defs.json\"\r\nContent-Type: application/json\r\n\r\n"
            f"{json.dumps(doc)}\r\n--{boundary}--\r\n").encode()
    return body, {"Content-Type": f"multipart/form-data; boundary={boundary}"}


def test_no_401_asks_the_browser_for_credentials(http):
    """Without WWW-Authenticate a browser never shows its own login dialog, so it never
    caches credentials that a forged request would carry; the UI's own login (credentials
    in sessionStorage, sent by its script) works as before."""
    for user, password in ((None, None), ("guest", "wrong")):
        status, _, headers = http.send("GET", "/api/whoami", user=user, password=password)
        assert status == 401 and "www-authenticate" not in {k.lower() for k in headers}
    assert http.send("GET", "/api/overview", user="guest")[0] == 200


def test_a_body_is_json_only_by_its_content_type(node, http):
    """A text/plain body (what a form with enctype=text/plain sends) and a form post are
    refused with 415 before anything is done, though the text is valid JSON."""
    forged = json.dumps({"durable": False}).encode()
    status, body, _ = http.send("PUT", "/api/queues/%2F/csrf-text", forged,
                                {"Content-Type": "text/plain"})
    assert status == 415 and body == {
        "error": "unsupported_media_type",
        "reason": "the body must be application/json, not text/plain"}
    assert http("GET", "/api/queues/%2F/csrf-text")[0] == 404
    assert http("PUT", "/api/queues/%2F/csrf-q", {"durable": False})[0] == 201
    publish = json.dumps({"properties": {}, "routing_key": "csrf-q", "payload": "forged",
                          "payload_encoding": "string"})
    for content_type, data in (("application/x-www-form-urlencoded",
                                b"properties=%7B%7D&routing_key=csrf-q&payload=forged"),
                               ("text/plain", publish.encode())):
        status, body, _ = http.send("POST", "/api/exchanges/%2F/amq.default/publish", data,
                                    {"Content-Type": content_type})
        assert status == 415 and content_type in body["reason"]
    status, body, _ = http.send("POST", "/api/definitions", json.dumps(
        {"vhosts": [{"name": "csrf-text-v"}]}).encode(), {"Content-Type": "text/plain"})
    assert status == 415, body
    assert http("GET", "/api/vhosts/csrf-text-v")[0] == 404
    assert _depth(node, "csrf-q") == 0
    # the UI's requests: JSON with its type
    assert http("POST", "/api/exchanges/%2F/amq.default/publish", json.loads(publish)) == (
        200, {"routed": True})
    assert _depth(node, "csrf-q") == 1
    assert http("DELETE", "/api/queues/%2F/csrf-q")[0] == 204


def test_a_state_changing_request_from_another_origin_is_refused(node, http):
    """Origin (else Referer) naming another host:port: 403 before anything is done, for the
    definitions upload (multipart, as RabbitMQ's UI sends it) and a publish; the same origin,
    or none (curl, rabbitmqadmin), goes through, and reading is never refused."""
    here = f"http://127.0.0.1:{node.http_port}"
    assert http("PUT", "/api/queues/%2F/csrf-o", {"durable": False})[0] == 201
    upload, form = _multipart({"vhosts": [{"name": "csrf-v"}]})
    for foreign in ({"Origin": "http://evil.example"}, {"Origin": "null"},
                    {"Origin": f"http://127.0.0.1:{node.http_port + 1}"},
                    {"Referer": "http://evil.example/page.html"}):
        status, body, _ = http.send("POST", "/api/definitions", upload, {**form, **foreign})
        assert (status, body["error"]) == (403, "forbidden"), (foreign, body)
        status, body, _ = http.send(
            "POST", "/api/exchanges/%2F/amq.default/publish", json.dumps(
                {"properties": {}, "routing_key": "csrf-o", "payload": "forged",
                 "payload_encoding": "string"}).encode(),
            {"Content-Type": "application/json", **foreign})
        assert status == 403 and "cross-origin request refused" in body["reason"]
    assert http("GET", "/api/vhosts/csrf-v")[0] == 404
    assert _depth(node, "csrf-o") == 0
    assert http.send("GET", "/api/overview", headers={"Origin": "http://evil.example"})[0] == 200
    # the same origin, as the UI's page sends it, and with a Referer of the UI's
    status, _, _ = http.send("POST", "/api/definitions", upload,
                             {**form, "Origin": here, "Referer": here + "/#/admin"})
    assert status == 204 and http("GET", "/api/vhosts/csrf-v")[0] == 200
    status, body, _ = http.send(
        "POST", "/api/exchanges/%2F/amq.default/publish", json.dumps(
            {"properties": {}, "routing_key": "csrf-o", "payload": "mine",
             "payload_encoding": "string"}).encode(),
        {"Content-Type": "application/json", "Origin": here})
    assert (status, body) == (200, {"routed": True}) and _depth(node, "csrf-o") == 1
    assert http("DELETE", "/api/vhosts/csrf-v")[0] == 204
    assert http("DELETE", "/api/queues/%2F/csrf-o")[0] == 204
