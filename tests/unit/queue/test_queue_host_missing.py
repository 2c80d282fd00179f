"""A publish that reaches a queue worker where its queue does not run (actors/queue/queue_host.py
`missing`): confirmed when the queue was deleted (RabbitMQ's channel confirms what it routed
to a queue that exited normally), nacked when the metadata still has the queue, which then
lives at another address (a master moved, a stale route): such a message reached no queue and
must never be confirmed (C5)."""
from __future__ import annotations

from types import SimpleNamespace

from actors import messages as m
from actors.naming import queue_actor_name
from actors.queue.queue_host import QueueHost
from actors.replica import Replica


class Transport:
    def __init__(self):
        self.sent = []

    def set_fallback(self, fn):
        self.fallback = fn

    def address(self, name):
        return "tcp://127.0.0.1:1#" + name

    def send(self, to, msg):
        self.sent.append((to, msg))


def host():
    t = Transport()
    replica = Replica()
    h = QueueHost(SimpleNamespace(node="leveret@n1", cluster_address="n1"), t, replica,
                  "node", 0)
    return h, t, replica


def publish(h, t, qname):
    t.sent.clear()
    h.missing(queue_actor_name("/", qname),
              m.Publish("w1#ch/1/1/1", [m.PublishItem(7, "", qname, b"", True, 0, -1),
                                         m.PublishItem(0, "", qname, b"", False, 0, -1)],
                        [b"a", b"b"]))
    return t.sent


def test_a_publish_to_a_deleted_queue_is_confirmed():
    h, t, _ = host()
    [(to, confirm)] = publish(h, t, "gone")
    assert to == "w1#ch/1/1/1" and confirm.seq_nos == [7] and confirm.ok


def test_a_publish_to_a_queue_living_elsewhere_is_nacked__C5():
    h, t, replica = host()
    replica.queues[("/", "moved")] = {"vhost": "/", "name": "moved", "home": "n2"}
    [(_, confirm)] = publish(h, t, "moved")
    assert confirm.seq_nos == [7] and not confirm.ok
