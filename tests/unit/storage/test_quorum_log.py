"""A quorum queue member's log as a leader election reads it (issue 15 "heir";
actors/queue/quorum_log.py): the complete-log marker beside the node's index, the end of the
log (the highest seq_id written and synced, which acks do not lower), and a member's Mirror
keeping its log across a restart, dropping it (marker first) only for a live master's resync
and marking it complete only once the sync's last batch is acknowledged and the drop done.
Driven by calling the actors' on_receive directly (no scheduler, no sockets)."""

from __future__ import annotations

from actors import messages as m
from actors.config import Config
from actors.core.queue import Msg
from actors.messages import Forget, Persist
from actors.queue import quorum_log
from actors.queue.backing_queue import BackingQueue, _Sync
from actors.queue.mirror import Mirror
from actors.queue.storage import Storage, queue_id

QQ = {"x-queue-type": "quorum"}


class _Ref:
    def __init__(self):
        self.got = []

    def tell(self, msg):
        self.got.append(msg)


def _storage(tmp_path, monkeypatch):
    config = Config(data_dir=str(tmp_path), storage_map_size=1 << 26)
    s = Storage(config)
    monkeypatch.setattr(Storage, "of", classmethod(lambda cls, c: s))
    return config, s


def _msg(seq):
    return Msg(seq, "", "q", b"", b"x" * 50, persistent=True, msg_id=seq.to_bytes(16, "big"))


def test_position_is_the_marker_epoch_and_the_last_seq_written(tmp_path, monkeypatch):
    config, _ = _storage(tmp_path, monkeypatch)
    assert quorum_log.position(config, "/", "q") is None  # nothing here
    ref = _Ref()
    bq = BackingQueue(ref, {"durable": True, "vhost": "/", "name": "q", "arguments": QQ},
                      config, mirror=True)
    bq.on_receive(Persist([_msg(s) for s in (1, 2, 3, 7)]))
    bq.on_receive(_Sync())
    assert quorum_log.position(config, "/", "q") is None  # written, but no complete log
    quorum_log.mark_complete(config, "/", "q", 4)
    assert quorum_log.position(config, "/", "q") == [4, 7]
    bq.on_receive(Forget([_msg(7), _msg(3)]))  # acks do not shorten the log
    bq.on_receive(_Sync())
    assert quorum_log.position(config, "/", "q") == [4, 7]
    quorum_log.mark_incomplete(config, "/", "q")
    assert quorum_log.position(config, "/", "q") is None
    quorum_log.mark_incomplete(config, "/", "q")  # (again: nothing to remove)


def test_a_leaders_index_dropped_takes_its_marker_a_members_keeps_its_own(tmp_path,
                                                                          monkeypatch):
    config, _ = _storage(tmp_path, monkeypatch)
    for name, mirror in (("leader", False), ("member", True)):
        bq = BackingQueue(_Ref(), {"durable": True, "vhost": "/", "name": name,
                                   "arguments": QQ}, config, mirror=mirror)
        bq.on_receive(Persist([_msg(1)]))
        bq.on_receive(_Sync())
        quorum_log.mark_complete(config, "/", name, 0)
        bq.on_receive(m.DeleteIndex())
    assert quorum_log.epoch_of(config, "/", "leader") is None
    # (a member's Mirror removes its marker itself, before it asks for the drop: below)
    assert quorum_log.epoch_of(config, "/", "member") == 0


def test_drop_stale_keeps_the_markers_of_queues_kept(tmp_path, monkeypatch):
    config, _ = _storage(tmp_path, monkeypatch)
    quorum_log.mark_complete(config, "/", "kept", 1)
    quorum_log.mark_complete(config, "/", "gone", 1)
    assert quorum_log.drop_stale(config, {queue_id("/", "kept")}) == [queue_id("/", "gone")]
    assert quorum_log.epoch_of(config, "/", "kept") == 1
    assert quorum_log.epoch_of(config, "/", "gone") is None


# --- a member's Mirror --------------------------------------------------------------------------
class _Transport:
    def __init__(self):
        self.sent = []

    def address(self, name):
        return "tcp://me:1#" + name

    def register(self, name, ref):
        return self.address(name)

    def unregister(self, name):
        pass

    def send(self, address, msg):
        self.sent.append((address, msg))


class _Replica:
    def __init__(self, q):
        self.q = q

    def queue(self, vhost, name):
        return self.q


class _Host:
    def __init__(self, config, q):
        self.transport = _Transport()
        self.replica = _Replica(q)
        self.config = config
        self.timers = None


MASTER = "tcp://leader:1#q"


def _mirror(tmp_path, monkeypatch):
    config, _ = _storage(tmp_path, monkeypatch)
    qdef = {"vhost": "/", "name": "q", "durable": True, "arguments": QQ, "address": MASTER,
            "epoch": 3}
    host = _Host(config, qdef)
    mirror = Mirror(host, qdef, "me:2")
    bq = _Ref()
    monkeypatch.setattr(mirror, "_bq", lambda: bq)
    return config, host, mirror, bq


def test_a_member_keeps_its_log_at_start_and_marks_it_complete_once_synced(tmp_path,
                                                                           monkeypatch):
    config, host, mirror, bq = _mirror(tmp_path, monkeypatch)
    quorum_log.mark_complete(config, "/", "q", 2)  # what it held before its node restarted
    mirror.on_start()
    assert bq.got == []  # no DeleteIndex: the log stays until a live master resyncs it
    assert isinstance(host.transport.sent[-1][1], m.MirrorJoin)
    assert quorum_log.epoch_of(config, "/", "q") == 2
    # the master answers: MirrorSynced first, then the (empty) reset batch that ends the sync
    mirror.on_receive(m.MirrorSynced(MASTER, 1))
    mirror.on_receive(m.MirrorPublish(MASTER, 1, True, [], []))
    assert [type(x) for x in bq.got] == [m.DeleteIndex, m.LogBarrier]
    assert quorum_log.epoch_of(config, "/", "q") is None  # gone before the index is dropped
    acks = [x for _, x in host.transport.sent if isinstance(x, m.MirrorAck)]
    assert [a.batch for a in acks] == [1]
    mirror.on_receive(m.LogBarrier())  # the drop is done: the log is whole (epoch 3)
    assert quorum_log.epoch_of(config, "/", "q") == 3


def test_a_member_syncing_a_paged_master_is_complete_at_the_sync_done_batch(tmp_path,
                                                                            monkeypatch):
    config, host, mirror, bq = _mirror(tmp_path, monkeypatch)
    mirror.on_start()
    mirror.on_receive(m.MirrorPublish(MASTER, 1, True, [], []))  # more follows
    mirror.on_receive(m.LogBarrier())
    assert quorum_log.epoch_of(config, "/", "q") is None  # batch 1 does not end the sync
    item = [5, "", "q", b"", True, 0, 0, b"m" * 16]
    mirror.on_receive(m.MirrorPublish(MASTER, 1, False, [item], [b"x"]))  # a page
    mirror.on_receive(m.MirrorSynced(MASTER, 2))
    mirror.on_receive(m.MirrorPublish(MASTER, 2, False, [], []))
    assert quorum_log.epoch_of(config, "/", "q") is None  # the page is not on disk yet
    persist = [x for x in bq.got if isinstance(x, Persist)][0]
    mirror.on_receive(m.Persisted(persist.msgs))
    acks = [x.batch for _, x in host.transport.sent if isinstance(x, m.MirrorAck)]
    assert acks[-1] == 2 and quorum_log.epoch_of(config, "/", "q") == 3
    # a later resync (the master restarted) drops the marker again at once
    mirror.on_receive(m.MirrorPublish(MASTER, 3, True, [], []))
    assert quorum_log.epoch_of(config, "/", "q") is None


def test_a_member_whose_queue_is_gone_drops_its_log(tmp_path, monkeypatch):
    config, host, mirror, bq = _mirror(tmp_path, monkeypatch)
    quorum_log.mark_complete(config, "/", "q", 3)
    mirror.on_start()
    mirror.on_receive(m.DeleteIndex())
    assert quorum_log.epoch_of(config, "/", "q") is None
    assert [type(x) for x in bq.got] == [m.DeleteIndex, m.LogBarrier]
