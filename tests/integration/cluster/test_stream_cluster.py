"""Streams in a 2-node cluster: a stream lives on one node (Leveret does not replicate
streams), so a declare asking for more members (x-initial-cluster-size, by default every
node as RabbitMQ) is refused rather than accepted unreplicated; with size 1 it is used from
the other node like any queue (docs/streams.md)."""

from __future__ import annotations

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

from tests.integration.cluster.nodes import Nodes

pytestmark = pytest.mark.timeout(300)

S = {"x-queue-type": "stream"}


def test_a_stream_is_not_replicated_and_serves_the_other_node(tmp_path):
    nodes = Nodes(tmp_path, 2)
    try:
        with nodes[0].connection() as c:
            for args in ({}, {"x-initial-cluster-size": 2}):
                ch = c.channel()
                with pytest.raises(ChannelClosedByBroker) as e:
                    ch.queue_declare("s-two", durable=True, arguments=dict(S, **args))
                assert e.value.reply_code == 406
                assert "Leveret's streams are not replicated" in e.value.reply_text
            ch = c.channel()
            ch.queue_declare("s-one", durable=True,
                             arguments=dict(S, **{"x-initial-cluster-size": 1}))
            ch.confirm_delivery()
            for i in range(3):
                ch.basic_publish("", "s-one", b"m%d" % i, pika.BasicProperties(delivery_mode=2))
        with nodes[1].connection() as c:  # the stream's home is node 0
            ch = c.channel()
            ch.basic_qos(prefetch_count=10)
            got = []
            ch.basic_consume("s-one", lambda c_, m, p, b: (got.append(
                (b, p.headers["x-stream-offset"])), c_.basic_ack(m.delivery_tag)),
                arguments={"x-stream-offset": "first"})
            nodes.wait(lambda: (c.process_data_events(0.1), len(got) >= 3)[1], 20, "3 deliveries")
            assert got == [(b"m0", 0), (b"m1", 1), (b"m2", 2)]
    finally:
        nodes.stop()
