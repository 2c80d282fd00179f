"""The queue worker: per AMQP queue a Queue actor (queue.py) and its BackingQueue (backing_queue.py,
on the queue worker's LMDB environment, storage.py), mirrors of queues homed on other nodes
(mirror.py), dead-lettering (dead_letter_publish.py), and the process's own part (host.py)."""
