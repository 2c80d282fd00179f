"""Definitions in RabbitMQ's JSON format through leveretctl (export_definitions,
import_definitions) and the load_definitions setting (docs/definitions.md).

tests/data/rabbitmq-3.10-definitions.json is a RabbitMQ 3.10-shaped export (see
tests/unit/node/test_definitions_json.py): its user orders-app has RabbitMQ's SHA-256 hash of
"test12", and must log in over AMQP with that password once imported.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

from amqp_helpers import safe_close, wait_until
from conftest import REPO, Broker

pytestmark = pytest.mark.skipif(bool(os.environ.get("LEVERET_TEST_URL")),
                                reason="starts Leveret nodes of its own")

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "rabbitmq-3.10-definitions.json"


def _start(tmp_path: Path, name: str, *extra: str) -> Broker:
    d = tmp_path / name
    d.mkdir(exist_ok=True)
    return Broker.start_leveret(d, *extra)


def _export(broker: Broker) -> dict:
    return json.loads(broker.ctl("export_definitions", "-").stdout)


def _canon(doc: dict) -> dict:
    """Every section as a sorted list of JSON texts (order is not part of the format)."""
    return {k: sorted(json.dumps(o, sort_keys=True) for o in v) for k, v in doc.items()
            if isinstance(v, list)}


def _shop_connection(broker: Broker) -> pika.BlockingConnection:
    return pika.BlockingConnection(broker.params(
        virtual_host="shop", user="orders-app", password="test12"))


def test_rabbitmq_export_imported_user_logs_in_with_pika(tmp_path):
    broker = _start(tmp_path, "a")
    try:
        res = broker.ctl("import_definitions", str(FIXTURE))
        assert "cluster_name" in res.stderr  # the one warning, not fatal
        conn = _shop_connection(broker)  # RabbitMQ's SHA-256 hash of "test12"
        try:
            ch = conn.channel()
            ch.confirm_delivery()
            # events (topic) -> orders (fanout, e2e binding order.#) -> both queues
            ch.basic_publish("events", "order.created", b"o1")
            for q in ("orders.new", "orders.audit"):
                _, _, body = ch.basic_get(q, auto_ack=True)
                assert body == b"o1"
            # the imported topic permission: write only ^order\.
            with pytest.raises(ChannelClosedByBroker) as e:
                ch.basic_publish("events", "invoice.paid", b"x")
                ch.basic_get("orders.new")
            assert e.value.reply_code == 403
        finally:
            safe_close(conn)
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            pika.BlockingConnection(broker.params(
                virtual_host="shop", user="orders-app", password="nope"))
    finally:
        broker.stop()


def test_export_then_import_into_a_fresh_broker(tmp_path):
    a = _start(tmp_path, "a")
    b = None
    try:
        a.ctl("add_vhost", "v1")
        a.ctl("add_user", "alice", "s3cret")
        a.ctl("set_user_tags", "alice", "monitoring")
        a.ctl("set_permissions", "-p", "v1", "alice", "^a\\.", ".*", ".*")
        a.ctl("set_topic_permissions", "-p", "v1", "alice", "amq.topic", "^k", ".*")
        a.ctl("set_policy", "-p", "v1", "--apply-to", "queues", "c", "^a\\.",
              '{"confirm-on": "enqueue"}')
        conn = a.connection(virtual_host="v1",
                            user="alice", password="s3cret")
        try:
            ch = conn.channel()
            ch.exchange_declare("a.x", "direct", durable=True)
            ch.exchange_declare("a.h", "headers", durable=True, arguments={"alternate-exchange": "a.x"})
            ch.queue_declare("a.q", durable=True, arguments={"x-max-length": 7})
            ch.queue_declare("a.transient", durable=False)
            ch.queue_bind("a.q", "a.x", "rk")
            ch.exchange_bind("a.x", "a.h", "", arguments={"x-match": "any", "k": "v"})
        finally:
            safe_close(conn)
        out = tmp_path / "defs.json"
        a.ctl("export_definitions", str(out))
        exported = json.loads(out.read_text())
        assert out.stat().st_mode & 0o777 == 0o600  # it holds password hashes
        # every queue but exclusive ones, as rabbit_definitions
        assert sorted(q["name"] for q in exported["queues"]) == ["a.q", "a.transient"]
        b = _start(tmp_path, "b")
        b.ctl("import_definitions", str(out))
        assert _canon(_export(b)) == _canon(exported)
        # alice logs in to b with her password, and a.q is there with its binding
        conn = b.connection(virtual_host="v1",
                            user="alice", password="s3cret")
        try:
            ch = conn.channel()
            ch.confirm_delivery()
            ch.basic_publish("a.x", "rk", b"m")
            _, _, body = ch.basic_get("a.q", auto_ack=True)
            assert body == b"m"
            with pytest.raises(ChannelClosedByBroker) as e:  # x-max-length 7 was imported
                ch.queue_declare("a.q", durable=True, arguments={"x-max-length": 8})
            assert e.value.reply_code == 406
        finally:
            safe_close(conn)
        # the durable definitions survive b's restart (the transient queue does not)
        b = b.restart(tmp_path / "b", "stop")
        durable = dict(exported, queues=[q for q in exported["queues"] if q["durable"]])
        assert _canon(_export(b)) == _canon(durable)
    finally:
        a.stop()
        if b is not None:
            b.stop()


def test_invalid_definitions_are_refused_as_a_whole(tmp_path):
    broker = _start(tmp_path, "a")
    try:
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps({
            "vhosts": [{"name": "fine"}],
            "queues": [{"name": "q", "vhost": "fine", "durable": True, "auto_delete": False,
                        "arguments": {"x-max-length": "ten"}}]}))
        res = broker.ctl("import_definitions", str(bad), check=False)
        assert res.returncode != 0
        assert "queue 'q' in vhost 'fine'" in res.stderr and "x-max-length" in res.stderr
        assert "fine" not in broker.ctl("list_vhosts").stdout.splitlines()[2:]
        # a transient queue of that name runs: it is kept as it is (RabbitMQ's import)
        conn = broker.connection()
        try:
            conn.channel().queue_declare("tq", durable=False)
            clash = tmp_path / "clash.json"
            clash.write_text(json.dumps({"queues": [{"name": "tq", "vhost": "/",
                                                     "durable": True, "auto_delete": False,
                                                     "arguments": {}}]}))
            res = broker.ctl("import_definitions", str(clash))
            assert "queue 'tq' in vhost '/': exists with other properties, kept" in res.stderr
            assert conn.channel().queue_declare("tq", durable=False, passive=True)
        finally:
            safe_close(conn)
        res = broker.ctl("import_definitions", str(FIXTURE) + ".missing", check=False)
        assert res.returncode != 0 and "cannot read" in res.stderr
        # "-": the definitions come on standard input, as with rabbitmqctl
        import subprocess
        res = subprocess.run(
            [str(REPO / ".venv" / "bin" / "leveretctl"), "--data-dir", str(broker.data_dir),
             "import_definitions", "-"], input=json.dumps({
                 "vhosts": [{"name": "piped"}],
                 # a plaintext password, as RabbitMQ accepts: hashed by leveretctl
                 "users": [{"name": "pat", "password": "s3cret", "tags": []}],
                 "permissions": [{"user": "pat", "vhost": "piped", "configure": ".*",
                                  "write": ".*", "read": ".*"}]}),
            capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        assert "piped" in broker.ctl("list_vhosts").stdout.splitlines()[2:]
        safe_close(broker.connection(virtual_host="piped", user="pat", password="s3cret"))
        assert "s3cret" not in broker.ctl("export_definitions", "-").stdout
    finally:
        broker.stop()


def test_load_definitions_at_boot_skipped_when_unchanged(tmp_path):
    defs = tmp_path / "definitions.json"
    defs.write_bytes(FIXTURE.read_bytes())
    d = tmp_path / "node"
    d.mkdir()
    extra = ("--load-definitions", str(defs), "--definitions-skip-if-unchanged")
    broker = Broker.start_leveret(d, *extra)
    try:
        safe_close(_shop_connection(broker))  # imported before the listener opened
        conn = _shop_connection(broker)
        try:
            conn.channel().queue_delete("orders.audit")
        finally:
            safe_close(conn)
        broker = broker.restart(d, "stop", *extra)
        assert "unchanged since its last import, skipped" in broker.log_tail(200)
        names = {q["name"] for q in _export(broker)["queues"]}
        assert names == {"orders.new"}  # not imported again: the deleted queue stays gone
        doc = json.loads(defs.read_text())
        doc["queues"].append({"name": "orders.late", "vhost": "shop", "durable": True,
                              "auto_delete": False, "arguments": {}})
        defs.write_text(json.dumps(doc))
        broker = broker.restart(d, "stop", *extra)
        wait_until(lambda: {q["name"] for q in _export(broker)["queues"]} ==
                   {"orders.new", "orders.audit", "orders.late"}, 10, interval=0.2)
        conn = _shop_connection(broker)
        try:
            assert conn.channel().queue_declare("orders.late", passive=True)
        finally:
            safe_close(conn)
    finally:
        broker.stop()


def test_load_definitions_that_do_not_validate_stop_the_node(tmp_path):
    """RabbitMQ's boot fails on definitions it cannot import; so does Leveret's."""
    import subprocess
    from conftest import free_port
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"queues": [{"name": "q", "vhost": "nowhere", "durable": True,
                                           "auto_delete": False, "arguments": {}}]}))
    data = tmp_path / "data"
    proc = subprocess.run(
        [str(REPO / ".venv" / "bin" / "leveret-server"), "--host", "127.0.0.1", "--port",
         str(free_port()), "--data-dir", str(data), "--management-port", "0",
         "--prometheus-port", "0", "--load-definitions", str(bad)],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 1
    assert "queue 'q' in vhost 'nowhere': no vhost 'nowhere'" in proc.stdout + proc.stderr
