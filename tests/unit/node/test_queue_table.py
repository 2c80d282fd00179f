"""actors/node/queue_table.py: the per-worker load the metadata actor places queues by."""

from __future__ import annotations

from actors.node.queue_table import QueueTable


def q(name, worker, home=""):
    return {"vhost": "/", "name": name, "worker": worker, "home": home}


def test_load_follows_puts_replacements_and_deletes():
    t = QueueTable()
    t[("/", "a")] = q("a", 0)
    t[("/", "b")] = q("b", 1)
    t[("/", "c")] = q("c", 1)
    assert (t.load[("", 0)], t.load[("", 1)]) == (1, 2)
    t[("/", "c")] = q("c", 0)  # moved (a restarted worker, a promotion)
    assert (t.load[("", 0)], t.load[("", 1)]) == (2, 1)
    assert t.pop(("/", "a"))["name"] == "a" and t.pop(("/", "zz"), None) is None
    del t[("/", "b")]
    assert (t.load[("", 0)], t.load[("", 1)]) == (1, 0)
    assert list(t) == [("/", "c")]


def test_built_from_a_snapshot_counts_per_home():
    t = QueueTable((((q_["vhost"], q_["name"]), q_) for q_ in
                    [q("a", 0, "n1"), q("b", 0, "n2"), q("c", 0, "n2")]))
    assert (t.load[("n1", 0)], t.load[("n2", 0)]) == (1, 2)
