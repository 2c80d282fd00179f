"""Re-publishing a dead message to its queue's dead-letter exchange (rabbit_dead_letter.erl).

The decision that a message is dead is the queue core's; this module builds the dead-lettered
copy (x-death headers from actors/core/dead_letter.py, the expiration property removed), routes
it through the local metadata replica and sends it to the target queues without confirms
(RabbitMQ's at-most-once dead-lettering).
"""

from __future__ import annotations

import logging
import time

from actors import events, faults
from actors import messages as m
from actors.core.dead_letter import dead_letter_headers, detect_cycles
from protocol.properties import BasicProperties

log = logging.getLogger("leveret.dead_letter")


def dead_letter_publish(queue, msg, reason: str, new_msg_id: bytes | None = None) -> None:
    """queue: the Queue actor (vhost, qname, transport, replica, core.dlx, core.dlrk, and
    config.host for the test-only fault hook);
    new_msg_id (events on): the copy's msg_id, sent with it to the target queues so their
    events name it, transient or not."""
    core = queue.core
    dlx = core.dlx
    if dlx is None:
        return
    # typed: the copy's headers go out with the wire types they came with, as RabbitMQ's do
    props = BasicProperties.decode(msg.props_raw, typed=True) if msg.props_raw else \
        BasicProperties()
    headers = dict(props.headers or {})
    cc = headers.get("CC")
    routing_keys = [msg.routing_key] + ([k for k in cc if isinstance(k, str)]
                                        if isinstance(cc, list) else [])
    headers = dead_letter_headers(
        headers, queue.qname, reason, msg.exchange, routing_keys,
        props.expiration, int(time.time()), dlx_routing_key=core.dlrk)
    props.headers = headers
    props.expiration = None
    props_raw = props.encode()
    # rabbit_dead_letter:make_msg: routed by x-dead-letter-routing-key alone (the CC header
    # was removed above), else by the message's routing keys: its own and its CC keys (BCC keys
    # are not kept: the header is gone since the publish)
    rk = core.dlrk if core.dlrk is not None else msg.routing_key
    keys = rk if core.dlrk is not None or len(routing_keys) == 1 else routing_keys
    replica = queue.replica
    targets, cycles = detect_cycles(reason, headers,
                                    replica.route(queue.vhost, dlx, keys, headers))
    for cycle in cycles:
        log.warning("Message dropped. Dead-letter queues cycle detected: %s", cycle)
    running = []  # (name, address) of the targets that run somewhere
    for name in targets:
        qdef = replica.queue(queue.vhost, name)
        if qdef is not None and qdef.get("address"):
            running.append((name, qdef["address"]))
    if new_msg_id is not None:
        # the child's first event, before any target can enqueue it: its link to the parent
        events.emit("dead_letter_published", new_msg_id, actor="queue", vhost=queue.vhost,
                    parent_msg_id=msg.msg_id, reason=reason, exchange=dlx, routing_key=rk,
                    queues=sorted(name for name, _ in running), source_queue=queue.qname,
                    persistent=props.delivery_mode == 2, message_id=props.message_id)
    if faults.bug("lose_dead_lettered_copy", queue.qname, queue.config.host):
        return  # a test-only bug (actors/faults.py): announced, never sent
    for _, address in running:
        # (the message's own delivery mode: a quorum queue stores every message alike)
        item = m.PublishItem(0, dlx, rk, props_raw, props.delivery_mode == 2,
                             props.priority or 0, _expiry(props.expiration), new_msg_id)
        queue.transport.send(address, m.Publish("", [item], [msg.body]))


def _expiry(expiration) -> int:
    try:
        return int(expiration) if expiration is not None else -1
    except ValueError:
        return -1
