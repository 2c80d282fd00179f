"""When a shovel that stopped is started again (rabbit_shovel_dyn_worker_sup's restart
strategy), and which URI it tries next.

RabbitMQ restarts a dynamic shovel `reconnect-delay` seconds after it failed, every time
(supervisor2's `{permanent, Delay}`; `{transient, Delay}` for one with src-delete-after,
which does not come back after it deleted itself); a delay of 0 means it is not restarted
(`temporary`): it stays terminated with its reason. The delay is fixed, as RabbitMQ's, so an
operator who sets 1 s gets 1 s. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

AUTODELETE = "autodelete"  # the shovel moved its src-delete-after count


@dataclass(frozen=True, slots=True)
class Restart:
    """What to do after a shovel stopped."""
    after: float | None  # seconds until the next attempt; None: stay terminated
    delete: bool  # clear the shovel's runtime parameter (it deleted itself)


def after_exit(reason: str, reconnect_delay: float) -> Restart:
    """`reason`: AUTODELETE, or any failure's text."""
    if reason == AUTODELETE:
        return Restart(None, True)
    if not reconnect_delay or reconnect_delay <= 0:
        return Restart(None, False)
    return Restart(float(reconnect_delay), False)


class UriCycle:
    """Each connection attempt takes the next URI of the list (RabbitMQ picks among them
    too), so a dead first URI does not stop a shovel from reaching the second."""

    def __init__(self, uris: tuple):
        self.uris = uris  # the parameter's Endpoints
        self.next = 0  # index of the next one to try

    def take(self):
        uri = self.uris[self.next % len(self.uris)]
        self.next += 1
        return uri
