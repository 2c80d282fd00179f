"""Definitions imported on one cluster node are one Raft entry: every node has them
(docs/definitions.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pika
import pytest

pytestmark = pytest.mark.timeout(240)

FIXTURE = Path(__file__).resolve().parents[2] / "data" / "rabbitmq-3.10-definitions.json"


def _canon(doc: dict) -> dict:
    return {k: sorted(json.dumps(o, sort_keys=True) for o in v) for k, v in doc.items()
            if isinstance(v, list)}


def test_import_on_one_node_is_seen_on_every_node(nodes):
    nodes[1].ctl("import_definitions", str(FIXTURE))
    exported = json.loads(nodes[1].ctl("export_definitions", "-").stdout)
    assert {q["name"] for q in exported["queues"]} == {"orders.new", "orders.audit"}
    for i in range(3):
        assert _canon(json.loads(nodes[i].ctl("export_definitions", "-").stdout)) == \
            _canon(exported)

        def published(i=i):
            try:
                c = nodes[i].connection(user="orders-app", password="test12",
                                        virtual_host="shop")
            except pika.exceptions.AMQPConnectionError:
                return False  # the users have not reached this node's workers yet
            try:
                ch = c.channel()
                ch.confirm_delivery()
                ch.basic_publish("events", f"order.{i}", b"x")
                return ch.queue_declare("orders.new", passive=True).method.message_count
            finally:
                c.close()
        assert nodes.wait(published, what=f"orders-app publishing on node {i + 1}")
