"""A clustered node's boot waits for the durable queues the log homed on it when it loaded the
log (actors/node/metadata_cluster.py): one the log then moves to a mirror on another node (a
promotion committed while this node restarted after kill -9) or deletes is no longer waited
for, or the node never listens (seen in the Jepsen kill9-home nemesis: connection refused for
30 s after the restart)."""
from __future__ import annotations

import logging

from actors.node.metadata import Metadata
from actors.node.metadata_cluster import JOINED


class Booting:
    """The few fields of Metadata that the boot gate reads, and its two methods."""
    _recovered = Metadata._recovered
    _prune_recovering = Metadata._prune_recovering

    def __init__(self, queues):
        self.me = "n1"
        self.queues = queues
        self.recovering = {k for k, q in queues.items() if q["home"] == "n1"} | {JOINED}
        self.deferred_hellos = []


def test_a_queue_promoted_elsewhere_or_deleted_is_not_waited_for(caplog):
    b = Booting({("/", "moved"): {"home": "n1"}, ("/", "deleted"): {"home": "n1"},
                 ("/", "mine"): {"home": "n1"}})
    b._prune_recovering()
    assert b.recovering == {("/", "moved"), ("/", "deleted"), ("/", "mine"), JOINED}
    b.queues[("/", "moved")] = {"home": "n2"}  # the log: promoted to n2's mirror
    del b.queues[("/", "deleted")]
    b._prune_recovering()
    assert b.recovering == {("/", "mine"), JOINED}
    with caplog.at_level(logging.INFO):
        b._recovered(("/", "mine"))
        b._recovered(JOINED)
    assert not b.recovering and "durable queues recovered" in caplog.text
