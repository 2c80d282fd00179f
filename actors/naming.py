"""Transport names of actors that other processes address by what they are, not by a reply."""

from __future__ import annotations


def queue_actor_name(vhost: str, name: str) -> str:
    """A queue's actor (or its mirror's): `q<US>vhost<US>name`, unit separators between (no
    vhost or queue name may contain one, so the parts split back)."""
    return f"q\x1f{vhost}\x1f{name}"
