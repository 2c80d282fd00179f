"""Sans-IO broker logic (no pykka, zmq or socket here).

RabbitMQ-mirroring modules: errors (reply codes and texts), routing (exchanges, bindings,
routing), queue_args (declare argument checks and equivalence), dead_letter (x-death),
permissions (users, vhosts, permissions, SASL responses).
"""


class NoEvents:
    """The event log a core gets when its shell gives none: off. Shells pass actors.events
    (the writer), which has the same two functions; cores never import it."""

    @staticmethod
    def enabled() -> bool:
        return False

    @staticmethod
    def emit(kind, msg_id=None, **fields) -> None:
        pass


NO_EVENTS = NoEvents()
