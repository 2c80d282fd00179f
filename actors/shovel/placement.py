"""Which node of a cluster runs a shovel: exactly one, and another when it goes.

Every node computes the same answer from the replicated member table (the Raft log's
`member_put` entries), so no election is needed: the owner is the member up with the highest
hash of (member, vhost, name) (rendezvous hashing), so a node that goes moves only its own
shovels, spread over the others, and one that comes back takes back the same ones. While the
log still lists a dead node up (until the leader marks it down) its shovels wait; a node
the log lists down runs none. Alone, the node runs them all. Pure.
"""

from __future__ import annotations

import hashlib


def _score(member: str, vhost: str, name: str) -> bytes:
    return hashlib.sha256(f"{member}\0{vhost}\0{name}".encode()).digest()


def owner(members: dict, vhost: str, name: str) -> str | None:
    """The member id that runs shovel (vhost, name), from {member: info} (info["up"]);
    None when no member is up."""
    up = [m for m, info in members.items() if info.get("up")]
    if not up:
        return None
    return max(up, key=lambda m: _score(m, vhost, name))


def runs_here(me: str, members: dict, vhost: str, name: str) -> bool:
    """Does this node (member id `me`, "" alone) run the shovel?"""
    if not me or not members:
        return True
    return owner(members, vhost, name) == me
