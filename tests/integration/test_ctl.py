"""The ctl tool (leveretctl / rabbitmqctl) on a node of the test's own."""
from __future__ import annotations

from amqp_helpers import declare, publish, safe_close, unique, wait_until


def _list_queues(broker) -> dict[str, str]:
    out = broker.ctl("list_queues", "name", "messages").stdout
    rows = {}
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) == 2 and parts != ["name", "messages"]:   # rabbitmqctl's column heading
            rows[parts[0]] = parts[1].strip()
    return rows


def test_ctl_list_queues_on_fresh_node(fresh_broker):
    conn = fresh_broker.connection()
    try:
        ch = conn.channel()
        q = declare(ch, unique("q"))
        publish(ch, q, [b"1", b"2", b"3"])
        wait_until(lambda: _list_queues(fresh_broker).get(q) == "3", 10,
                   interval=0.5, message="list_queues to show 3 messages")
        if not fresh_broker.external:
            assert set(_list_queues(fresh_broker)) == {q}   # a clean node has only our queue
        ch.queue_delete(q)
        wait_until(lambda: q not in _list_queues(fresh_broker), 10, interval=0.5)
    finally:
        safe_close(conn)
