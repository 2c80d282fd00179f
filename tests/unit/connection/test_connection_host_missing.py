"""A message from a queue to a channel that is gone (actors/connection/connection_host.py `missing`): a
delivery tells its queue that the channel is down, so the queue requeues what it holds for
that channel and drops its consumers. A channel closed while its queue could not hear the
ChannelDown (its node paused in a partition, never marked down) otherwise kept a consumer in
the queue that received every later delivery and acked none: confirmed messages that no
client could ever get (C5, the short Jepsen run's majority-minority: 289 lost)."""
from __future__ import annotations

from types import SimpleNamespace

from actors import messages as m
from actors.connection.connection_host import ConnectionHost

QUEUE = "tcp://127.0.0.2:5000#q/jobs"
CHANNEL = "ch/1/1/1"


def missing(msg):
    sent = []
    transport = SimpleNamespace(address=lambda name: "tcp://127.0.0.3:6000#" + name,
                                send=lambda to, x: sent.append((to, x)))
    ConnectionHost.missing(SimpleNamespace(transport=transport), CHANNEL, msg)
    return sent


def test_a_delivery_to_a_channel_that_is_gone_makes_its_queue_requeue__C5():
    deliver = m.Deliver(QUEUE, "jobs", [["ctag", 7, False, "", "jobs", b""]], [b"x"])
    assert missing(deliver) == [(QUEUE, m.ChannelDown("tcp://127.0.0.3:6000#" + CHANNEL))]


def test_a_get_answer_to_a_channel_that_is_gone_makes_its_queue_requeue():
    got = m.GetReply(3, QUEUE, ["", 7, False, "", "jobs", b""], 0, [b"x"])
    assert missing(got) == [(QUEUE, m.ChannelDown("tcp://127.0.0.3:6000#" + CHANNEL))]
    assert missing(m.GetReply(3, QUEUE, None, 0, [])) == []  # get-empty: nothing held


def test_other_messages_to_a_channel_that_is_gone_are_dropped():
    assert missing(m.Credit(QUEUE, 10, 1000)) == []
    assert missing(m.ConsumerGone(QUEUE, "ctag")) == []
