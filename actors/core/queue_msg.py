"""One message in a queue, as the queue process and its paging keep it: rabbit_variable_queue's
#msg_status{} (the index's entry, its body, where it is and who waits for its confirm).

QueueCore (actors/core/queue.py) creates it when a message arrives; the page-in of
actors/core/page_io.py when one is read back from the index.
"""

from __future__ import annotations


class Msg:
    """One message in this queue."""

    __slots__ = ("seq_id", "exchange", "routing_key", "props_raw", "body", "persistent",
                 "priority", "expires_at", "ttl", "redelivered", "publisher", "pub_seq",
                 "msg_id", "stored", "delivery_count", "pers", "channel", "consumer_tag")

    def __init__(self, seq_id, exchange, routing_key, props_raw, body, persistent=False,
                 priority=0, expires_at=0, ttl=-1, publisher="", pub_seq=0, msg_id=None):
        self.seq_id = seq_id  # position in this queue, from 1; the backing queue's key
        self.exchange = exchange  # exchange it was published to
        self.routing_key = routing_key  # routing key it was published with
        self.props_raw = props_raw  # encoded content properties, untouched
        self.body = body  # bytes, untouched
        self.persistent = persistent  # delivery_mode == 2
        self.priority = priority  # 0..max priority of the queue
        self.expires_at = expires_at  # monotonic ms, 0 = never
        self.ttl = ttl  # the message's own expiration in ms (-1 none), for x-death
        self.redelivered = False  # delivered before (then redelivered=true next time)
        self.publisher = publisher  # publishing channel address, "" if none
        self.pub_seq = pub_seq  # publisher's confirm seq no, 0 if no confirm wanted
        self.msg_id = msg_id  # 16 bytes naming the body in msg_store (persistent), else None
        self.stored = False  # handed to the backing queue's storage (it must hear of the settle)
        # deliveries that ended in a requeue (x-delivery-count, x-delivery-limit); in memory
        # only: a restart starts it again from 0
        self.delivery_count = 0
        # counted in messages_persistent (rabbit_variable_queue's IsPersistent: persistent in
        # a durable queue), set when it enters the queue; `persistent` may change after
        self.pers = False
        # while unacked (QueueCore.unacked): the channel it was delivered to (its address) and
        # the consumer ("": basic.get), as rabbit_queue_consumers keeps each ack tag's
        self.channel = ""
        self.consumer_tag = ""
