"""The master's side of mirrored queues (actors/queue/mirror.py Masters), without sockets: C5 for
mirrors -- a confirm waits until every live mirror has accepted the batch with the message (held
by the master's QueueCore, which asks Masters for the batches through its port)."""

from __future__ import annotations

import pytest

from actors import messages as m
from actors.core import queue_args
from actors.core.errors import ChannelError
from actors.core.queue import Msg, QueueCore, QueuePort
from actors.core.queue_settings import parse as queue_settings
from actors.queue.mirror import Masters


class Wire:
    def __init__(self):
        self.sent = []  # (address, msg)
        self.synced = []

    def of(self, kind):
        return [(a, x) for a, x in self.sent if isinstance(x, kind)]


class _Queue:
    """The Queue actor's side of its core's port: the confirms it sent, the rest dropped."""

    def __init__(self):
        self.confirms: list = []  # (channel, seqs, ok)

    def confirm(self, channel, seqs, ok, reason=""):
        self.confirms.append((channel, seqs, ok))

    def now_ms(self):
        return 0

    def __getattr__(self, name):
        return lambda *args: None


class Master:
    """Masters under the QueueCore whose confirms wait for its mirrors, as the Queue actor
    joins them (QueuePort.of(queue, masters)): what each step let go to the publishers."""

    def __init__(self, ms: Masters):
        self.ms, self.out = ms, _Queue()
        self.core = QueueCore("/", "q", queue_settings({}), QueuePort.of(self.out, ms), 0)
        self.seen = 0

    def confirm(self, channel, seqs) -> bool:
        """A confirm is due -> True when it is held for the mirrors."""
        self.core.confirm(channel, seqs)
        return not self._sent()

    def acked(self, mirror, batch) -> list:
        low = self.ms.acked(mirror, batch)
        if low is not None:
            self.core.mirrors_acked(low)
        return self._sent()

    def down(self, endpoint) -> list:
        self.core.mirrors_acked(self.ms.down(endpoint))
        return self._sent()

    def _sent(self) -> list:
        """[(channel, seqs)] confirmed since the last step."""
        sent = self.out.confirms
        new, self.seen = sent[self.seen:], len(sent)
        assert all(ok for _, _, ok in new)
        return [(ch, seqs) for ch, seqs, _ in new]


def masters():
    w = Wire()
    return w, Masters(lambda a, x: w.sent.append((a, x)), "tcp://h:1#q", w.synced.append)


def item(seq):
    """A paged-out message read back for a sync, as the master sends it."""
    return m.MirrorItem(seq, "", "", b"", False, 0, 0, None)


def msg(seq):
    return Msg(seq, "", "q", b"", b"body%d" % seq, persistent=True)


def test_no_mirrors_no_waiting():
    w, ms = masters()
    mc = Master(ms)
    ms.enqueued(msg(1), 0)
    assert not mc.confirm("ch", [1])
    assert w.sent == []


def test_confirm_waits_for_every_mirror_C5():
    w, ms = masters()
    mc = Master(ms)
    ms.join("tcp://a:1#q", "A", [], 0)
    ms.join("tcp://b:1#q", "B", [msg(1)], 0)  # B's sync batch carries message 1
    assert w.synced == []
    ms.enqueued(msg(2), 0)
    assert mc.confirm("ch", [2])  # held: batch 3 not acknowledged by anyone
    batch = w.of(m.MirrorPublish)[-1][1].batch
    assert [x.reset for _, x in w.of(m.MirrorPublish)] == [True, True, False, False]
    assert mc.acked("tcp://a:1#q", batch) == []  # B still owes it
    assert mc.acked("tcp://b:1#q", batch) == [("ch", [2])]
    assert sorted(w.synced) == ["A", "B"]  # both acknowledged their sync batches


def test_a_dead_mirror_is_not_waited_for():
    w, ms = masters()
    mc = Master(ms)
    ms.join("tcp://a:1#q", "A", [], 0)
    ms.join("tcp://b:1#q", "B", [], 0)
    ms.enqueued(msg(1), 0)
    assert mc.confirm("ch", [1])
    batch = w.of(m.MirrorPublish)[-1][1].batch
    assert mc.acked("tcp://a:1#q", batch) == []
    assert mc.down("tcp://b:1") == [("ch", [1])]


def test_forget_flushes_what_entered_first():
    w, ms = masters()
    ms.join("tcp://a:1#q", "A", [], 0)
    ms.enqueued(msg(7), 0)
    ms.forget([7])
    kinds = [type(x).__name__ for _, x in w.sent]
    assert kinds == ["MirrorPublish", "MirrorPublish", "MirrorForget"]
    assert w.sent[1][1].items[0].seq_id == 7


@pytest.mark.parametrize("args,ok", [
    ({"x-ha-mode": "all"}, True), ({"x-ha-mode": "exactly", "x-ha-params": 2}, True),
    ({"x-ha-mode": "nodes"}, False), ({"x-ha-mode": "exactly", "x-ha-params": 0}, False)])
def test_ha_arguments_are_validated(args, ok):
    if ok:
        queue_args.validate(args, "q", "/")
    else:
        with pytest.raises(ChannelError) as e:
            queue_args.validate(args, "q", "/")
        assert e.value.reply_code == 406


# --- ha-sync-mode manual: a mirror that joined without the messages held then ------------------
def test_a_manual_sync_mirror_is_synchronised_once_the_older_messages_have_left():
    w, ms = masters()
    ms.join("tcp://a:1#q", "A", [], 0, missing=2, below=10)  # seq 4 and 7 are held
    assert w.of(m.MirrorPublish)[-1][1].items == []          # (not sent them)
    ms.enqueued(msg(10), 0)
    ms.forget([10])                                           # newer: it has it
    ms.acked("tcp://a:1#q", ms.batch)
    assert w.synced == [] and ms.unsynchronised() == [("tcp://a:1#q", "A")]
    ms.forget([4])
    assert w.synced == []
    ms.forget([7])                                            # the last older one left
    assert w.synced == ["A"] and ms.unsynchronised() == []


def test_a_manual_sync_mirror_caught_up_waits_for_its_ack_of_what_was_sent():
    w, ms = masters()
    ms.join("tcp://a:1#q", "A", [], 0, missing=1, below=5)
    ms.enqueued(msg(5), 0)
    ms.forget([3])
    assert w.synced == []                                     # batch with seq 5 not acked yet
    ms.acked("tcp://a:1#q", ms.batch)
    assert w.synced == ["A"]


def test_a_cancelled_eager_sync_leaves_the_mirror_missing_what_is_held():
    w, ms = masters()
    ms.join("tcp://a:1#q", "A", [msg(1)], 0, more=True)       # paged part to follow
    ms.sync_cancelled("tcp://a:1#q", 3, 9)
    ms.acked("tcp://a:1#q", ms.batch)
    assert w.synced == [] and ms.unsynchronised() == [("tcp://a:1#q", "A")]
    ms.forget([1, 2, 8])
    assert w.synced == ["A"]


# --- quorum queues: a majority of the members, the heir among them ------------------------------
def quorum_masters(needed, heir=None):
    w = Wire()
    return w, Masters(lambda a, x: w.sent.append((a, x)), "tcp://h:1#q", w.synced.append,
                      needed, lambda: heir)


def test_quorum_of_one_confirms_at_once():
    w, ms = quorum_masters(0)
    mc = Master(ms)
    ms.enqueued(msg(1), 0)
    assert not mc.confirm("ch", [1])


def test_quorum_confirm_waits_for_a_majority_C5():
    w, ms = quorum_masters(1)  # three members: the master and one mirror
    mc = Master(ms)
    assert mc.confirm("ch", [1])  # no mirror at all: held
    ms.join("tcp://a:1#q", "A", [msg(1)], 0)
    ms.join("tcp://b:1#q", "B", [msg(1)], 0)
    ms.enqueued(msg(2), 0)
    assert mc.confirm("ch", [2])
    batch = ms.batch
    # A's acknowledgement of the last batch makes a majority with the master: both released
    assert mc.acked("tcp://a:1#q", batch) == [("ch", [1]), ("ch", [2])]
    ms.enqueued(msg(3), 0)
    assert mc.confirm("ch", [3])
    assert mc.acked("tcp://b:1#q", ms.batch) == [("ch", [3])]  # B alone is enough too


def test_quorum_confirm_needs_the_heir():
    w, ms = quorum_masters(1, heir="B")  # B is the mirror a promotion would pick
    mc = Master(ms)
    ms.join("tcp://a:1#q", "A", [], 0)
    ms.join("tcp://b:1#q", "B", [], 0)
    ms.acked("tcp://a:1#q", ms.batch)
    ms.acked("tcp://b:1#q", ms.batch)
    ms.enqueued(msg(1), 0)
    assert mc.confirm("ch", [1])
    assert mc.acked("tcp://a:1#q", ms.batch) == []  # a majority, but not the heir
    assert mc.acked("tcp://b:1#q", ms.batch) == [("ch", [1])]
    ms.enqueued(msg(2), 0)
    assert mc.confirm("ch", [2])
    assert mc.down("tcp://b:1") == []  # the heir died: A has not acknowledged yet
    assert mc.acked("tcp://a:1#q", ms.batch) == [("ch", [2])]


def test_quorum_unsynchronised_mirror_does_not_count():
    w, ms = quorum_masters(1)
    mc = Master(ms)
    ms.join("tcp://a:1#q", "A", [msg(1)], 0, more=True)  # paged messages follow: syncing
    assert mc.confirm("ch", [1])
    assert mc.acked("tcp://a:1#q", ms.batch) == []  # still syncing
    ms.sync_done("tcp://a:1#q")
    assert mc.acked("tcp://a:1#q", ms.batch) == [("ch", [1])]


def test_a_kept_log_is_told_what_is_still_here_and_sent_only_what_follows():
    """A quorum member offering its log up to seq 3 of this epoch: MirrorKeep (always, before
    the reset batch) names the queued ones up to 3; the reset batch and the pages of a paged
    sync carry only what follows 3 (a page wholly kept sends no MirrorPublish)."""
    w = Wire()
    ms = Masters(lambda a, x: w.sent.append((a, x)), "tcp://h:1#q", w.synced.append, needed=1)
    ms.join("tcp://a:1#q", "A", [msg(2), msg(4)], 0, more=True, upto=3)
    assert [(x.upto, x.seq_ids) for _, x in w.of(m.MirrorKeep)] == [(3, [2])]
    [(_, reset)] = w.of(m.MirrorPublish)
    assert reset.reset and [it.seq_id for it in reset.items] == [4] and \
        reset.bodies == [b"body4"]
    assert w.sent.index(w.of(m.MirrorKeep)[0]) < w.sent.index((_, reset))
    ms.sync_page("tcp://a:1#q", [item(1), item(3)], [b"1", b"3"])  # all kept
    ms.sync_page("tcp://a:1#q", [item(3), item(5)], [b"3", b"5"])
    assert [x.seq_ids for _, x in w.of(m.MirrorKeep)] == [[2], [1, 3], [3]]
    assert [[it.seq_id for it in x.items] for _, x in w.of(m.MirrorPublish)] == [[4], [5]]
    assert w.of(m.MirrorPublish)[-1][1].bodies == [b"5"]
    ms.join("tcp://b:1#q", "B", [msg(2)], 0)  # nothing offered: everything, no MirrorKeep
    assert len(w.of(m.MirrorKeep)) == 3
    assert [it.seq_id for it in w.of(m.MirrorPublish)[-1][1].items] == [2]
