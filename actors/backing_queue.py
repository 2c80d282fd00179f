"""BackingQueue actor: the storage half of a queue (rabbit_variable_queue.erl's role).

The Queue actor hands it persistent messages of a durable queue with `("persist", msgs)` and
settled ones with `("forget", msgs)`; it answers `Persisted(msgs)` once they are safe, and the
Queue sends the publisher confirms then. It runs in its own thread next to its Queue so that a
slow fsync never stalls deliveries.

This version keeps messages in memory only (the Queue holds them): a message is "safe" as soon as
it is accepted, the rule RabbitMQ applies to transient messages. The queue index and message
store (queue_index/, msg_store/) plug in here: `persist` will append to the journal and answer
after the grouped fsync, `forget` will journal the acks, and start-up will recover.
"""

from __future__ import annotations

import logging

import pykka

log = logging.getLogger("leveret.backing_queue")


class BackingQueue(pykka.ThreadingActor):
    def __init__(self, queue_ref, qdef: dict, config):
        super().__init__()
        self.queue_ref = queue_ref  # the Queue actor this serves
        self.durable = qdef["durable"]  # only durable queues persist anything
        self.config = config  # node configuration (storage settings)
        self.held = 0  # persistent messages accepted and not yet forgotten

    def on_receive(self, msg):
        op, msgs = msg
        if op == "persist":
            self.held += len(msgs)
            from actors.queue import Persisted
            self.queue_ref.tell(Persisted(msgs))
        elif op == "forget":
            self.held -= len(msgs)
