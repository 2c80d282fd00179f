"""Sans-IO broker logic (no pykka, zmq or socket here).

RabbitMQ-mirroring modules: errors (reply codes and texts), erl_terms (Erlang terms: field
values as RabbitMQ holds them, io_lib printing), routing (exchanges, bindings, routing),
declare_args (the argument checks every queue type shares), queue_args (classic declare
argument checks and equivalence), quorum (quorum queues' rules), dead_letter (x-death),
permissions (users, vhosts, permissions, SASL responses). They import each other without a
cycle (tests/unit/core/test_core_imports.py).
"""


class NoEvents:
    """The event log a core gets when its shell gives none: off. Shells pass actors.events
    (the writer), which has the same functions; cores never import it."""

    @staticmethod
    def enabled() -> bool:
        return False

    @staticmethod
    def keeps(msg_id) -> bool:
        return False

    @staticmethod
    def put(kind, msg_id, values) -> None:
        pass

    @staticmethod
    def put_published(msg_id, values) -> None:
        pass

    @staticmethod
    def emit(kind, msg_id=None, **fields) -> None:
        pass

    @staticmethod
    def sync() -> None:
        pass


NO_EVENTS = NoEvents()
