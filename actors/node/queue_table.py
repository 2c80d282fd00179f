"""The metadata actor's table of queue definitions, with the load of every queue worker."""

from __future__ import annotations

import collections


class QueueTable(dict):
    """(vhost, name) -> queue definition that counts its queues per (home node, queue worker)
    as they come and go, so that placing a queue costs O(workers), not O(queues): 50,000
    declares made the old count over every queue quadratic."""

    def __init__(self, items=()):
        super().__init__()
        self.load: collections.Counter = collections.Counter()  # (home, worker) -> queues
        for key, q in items:
            self[key] = q

    def __setitem__(self, key, q) -> None:
        old = dict.get(self, key)
        if old is not None:
            self.load[_slot(old)] -= 1
        dict.__setitem__(self, key, q)
        self.load[_slot(q)] += 1

    def __delitem__(self, key) -> None:
        self.load[_slot(dict.__getitem__(self, key))] -= 1
        dict.__delitem__(self, key)

    def pop(self, key, *default):
        if key in self:
            q = dict.pop(self, key)
            self.load[_slot(q)] -= 1
            return q
        return dict.pop(self, key, *default)


def _slot(q: dict) -> tuple:
    return (q.get("home", ""), q.get("worker"))
