"""Policies, operator policies and limits in a 3-node cluster (issue 13 items 4 and 5): the
definitions are Raft-replicated, so a limit or policy set through one node holds on every node;
max-queues counts the cluster's queues; connection counts are each node's own (docs/policies.md).
Behaviour: R3."""

from __future__ import annotations

import json

import pika
import pytest


pytestmark = pytest.mark.timeout(240)


def test_limits_and_policies_set_on_one_node_hold_on_the_others__R3(nodes):
    nodes[0].ctl("set_vhost_limits", '{"max-queues": 2, "max-connections": 1}')
    nodes[1].ctl("set_operator_policy", "cap", "^cap", '{"max-length": 1}',
                 "--apply-to", "queues")
    for i in range(3):
        nodes.wait(lambda: json.loads(nodes[i].ctl("list_vhost_limits").stdout) ==
                   [{"vhost": "/", "limits": {"max-queues": 2, "max-connections": 1}}],
                   what=f"limits on node {i + 1}")
        nodes.wait(lambda: "cap" in nodes[i].ctl("list_operator_policies").stdout,
                   what=f"operator policy on node {i + 1}")
    c1 = nodes[0].connection()
    c2 = nodes[1].connection()                     # counted per node: one each
    try:
        c1.channel().queue_declare("cap-1")
        c2.channel().queue_declare("cap-2")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as ei:
            c2.channel().queue_declare("cap-3")    # the cluster has 2 queues
        assert ei.value.reply_text == ("PRECONDITION_FAILED - cannot declare queue 'cap-3': "
                                       "queue limit in vhost '/' (2) is reached")
        with pytest.raises(pika.exceptions.AMQPConnectionError) as ei:
            nodes[1].connection()
        assert "connection limit (1) is reached" in str(ei.value)
        ch = c2.channel()
        for body in (b"1", b"2", b"3"):
            ch.basic_publish("", "cap-1", body)    # a queue homed on node 1, from node 2
        nodes.wait(lambda: ch.queue_declare("cap-1", passive=True).method.message_count == 1,
                   what="the operator policy's max-length on cap-1")
    finally:
        for c in (c1, c2):
            if c.is_open:
                c.close()
