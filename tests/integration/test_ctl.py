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


def test_ctl_purge_queue_as_rabbitmqctl(fresh_broker):
    conn = fresh_broker.connection()
    try:
        ch = conn.channel()
        q = declare(ch, unique("purge"))
        publish(ch, q, [b"1", b"2", b"3"])
        wait_until(lambda: _list_queues(fresh_broker).get(q) == "3", 10, interval=0.5)
        out = fresh_broker.ctl("purge_queue", q).stdout
        assert f"Purging queue '{q}' in vhost '/' ..." in out
        assert ch.queue_declare(q, passive=True).method.message_count == 0
        res = fresh_broker.ctl("purge_queue", unique("absent"), check=False)
        assert res.returncode != 0
        ch.queue_delete(q)
    finally:
        safe_close(conn)


def test_ctl_list_definitions_with_info_items_and_formatters(fresh_broker):
    """list_users, list_vhosts, list_permissions, list_exchanges, list_bindings: rabbitmqctl's
    headings, default info items, chosen items and --formatter json."""
    import json
    conn = fresh_broker.connection()
    try:
        ch = conn.channel()
        q = declare(ch, unique("lq"))
        x = unique("lx")
        ch.exchange_declare(x, "topic", durable=False)
        ch.queue_bind(q, x, "a.#")
        ctl = fresh_broker.ctl
        users = ctl("list_users").stdout.splitlines()
        assert users[:2] == ["Listing users ...", "user\ttags"]
        assert "guest\t[administrator]" in users
        assert {"user": "guest", "tags": ["administrator"]} in json.loads(
            ctl("list_users", "--formatter", "json").stdout)
        vhosts = ctl("list_vhosts", "name", "tracing").stdout.splitlines()
        assert vhosts[:2] == ["Listing vhosts ...", "name\ttracing"] and "/\tfalse" in vhosts
        perms = ctl("list_permissions", "-p", "/").stdout.splitlines()
        assert perms[:2] == ['Listing permissions for vhost "/" ...',
                             "user\tconfigure\twrite\tread"]
        assert "guest\t.*\t.*\t.*" in perms
        xs = ctl("list_exchanges").stdout.splitlines()
        assert xs[:2] == ["Listing exchanges for vhost / ...", "name\ttype"]
        assert f"{x}\ttopic" in xs and "amq.direct\tdirect" in xs
        assert {"name": x, "type": "topic", "durable": False} in json.loads(
            ctl("list_exchanges", "name", "type", "durable", "--formatter", "json").stdout)
        bs = ctl("list_bindings").stdout.splitlines()
        assert bs[:2] == ["Listing bindings for vhost /...", "source_name\tsource_kind\t"
                          "destination_name\tdestination_kind\trouting_key\targuments"]
        assert f"{x}\texchange\t{q}\tqueue\ta.#\t{{}}" in bs or \
            f"{x}\texchange\t{q}\tqueue\ta.#\t[]" in bs
        assert {"source_name": "", "destination_name": q, "routing_key": q} in json.loads(
            ctl("list_bindings", "source_name", "destination_name", "routing_key",
                "--formatter", "json").stdout)
        res = ctl("list_exchanges", "nope", check=False)
        assert res.returncode != 0
        ch.queue_delete(q)
        ch.exchange_delete(x)
    finally:
        safe_close(conn)


def _logs_in(broker, user: str, password: str) -> bool:
    import pika
    try:
        broker.connection(user=user, password=password).close()
    except pika.exceptions.ProbableAuthenticationError:
        return False
    return True


def test_ctl_add_user_and_change_password_read_the_password_from_stdin__E3(fresh_broker):
    """rabbitmqctl's form without PASSWORD: the first line of standard input, its newline
    stripped, so that no password is ever on a command line; none there is refused."""
    ctl = fresh_broker.ctl
    ctl("add_user", "alice", input="s3cret\n")
    ctl("set_permissions", "alice", ".*", ".*", ".*")
    assert _logs_in(fresh_broker, "alice", "s3cret")
    assert not _logs_in(fresh_broker, "alice", "s3cret\n")
    ctl("change_password", "alice", input="n3w pass\r\nsecond line\n")
    assert _logs_in(fresh_broker, "alice", "n3w pass")
    assert not _logs_in(fresh_broker, "alice", "s3cret")
    ctl("change_password", "alice", input="no-newline")  # (printf '%s' secret | ...)
    assert _logs_in(fresh_broker, "alice", "no-newline")
    for args in (("add_user", "bob"), ("change_password", "alice")):
        res = ctl(*args, input="", check=False)
        assert res.returncode != 0 and "no password given" in res.stderr, res
    assert "bob" not in ctl("list_users").stdout
    assert _logs_in(fresh_broker, "alice", "no-newline")
