"""A quorum queue member's log as a leader election reads it (issue 15 "heir";
actors/store/quorum_log.py): the complete-log marker beside the node's index, the end of the
log (the highest seq_id written and synced, which acks do not lower), and a member's Mirror
keeping its log across a restart, dropping it (marker first) only for a live master's resync
and marking it complete only once the sync's last batch is acknowledged and the drop done.
Driven by calling the actors' on_receive directly (no scheduler, no sockets)."""

from __future__ import annotations

import ast
import inspect
import textwrap

from actors import messages as m
from actors.core.queue import Msg
from actors.messages import Forget, Persist
from actors.queue import mirror as mirror_module
from actors.store import quorum_log
from actors.queue.backing_queue import BackingQueue, _Sync
from actors.queue.mirror import Mirror
from actors.store.storage import queue_id
from storage_fakes import Ref, storage

QQ = {"x-queue-type": "quorum"}


def _msg(seq):
    return Msg(seq, "", "q", b"", b"x" * 50, persistent=True, msg_id=seq.to_bytes(16, "big"))


def test_position_is_the_marker_epoch_and_the_last_seq_written(tmp_path, monkeypatch):
    config, _ = storage(tmp_path, monkeypatch)
    assert quorum_log.position(config, "/", "q") is None  # nothing here
    ref = Ref()
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
    config, _ = storage(tmp_path, monkeypatch)
    for name, mirror in (("leader", False), ("member", True)):
        bq = BackingQueue(Ref(), {"durable": True, "vhost": "/", "name": name,
                                   "arguments": QQ}, config, mirror=mirror)
        bq.on_receive(Persist([_msg(1)]))
        bq.on_receive(_Sync())
        quorum_log.mark_complete(config, "/", name, 0)
        bq.on_receive(m.DeleteIndex())
    assert quorum_log.epoch_of(config, "/", "leader") is None
    # (a member's Mirror removes its marker itself, before it asks for the drop: below)
    assert quorum_log.epoch_of(config, "/", "member") == 0


def test_drop_stale_keeps_the_markers_of_queues_kept(tmp_path, monkeypatch):
    config, _ = storage(tmp_path, monkeypatch)
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
    config, _ = storage(tmp_path, monkeypatch)
    qdef = {"vhost": "/", "name": "q", "durable": True, "arguments": QQ, "address": MASTER,
            "epoch": 3}
    host = _Host(config, qdef)
    mirror = Mirror(host, qdef, "me:2")
    bq = Ref()
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
    # (its epoch, 2, is not the master's, 3: nothing was offered, everything is sent again)
    assert (host.transport.sent[0][1].epoch, host.transport.sent[0][1].last) == (-1, -1)
    acks = [x for _, x in host.transport.sent if isinstance(x, m.MirrorAck)]
    assert acks == []  # the batch that makes it count waits for its marker
    mirror.on_receive(m.LogBarrier())  # the drop is done: the log is whole (epoch 3)
    assert quorum_log.epoch_of(config, "/", "q") == 3
    acks = [x for _, x in host.transport.sent if isinstance(x, m.MirrorAck)]
    assert [a.batch for a in acks] == [1]


def test_a_member_syncing_a_paged_master_is_complete_at_the_sync_done_batch(tmp_path,
                                                                            monkeypatch):
    config, host, mirror, bq = _mirror(tmp_path, monkeypatch)
    mirror.on_start()
    mirror.on_receive(m.MirrorPublish(MASTER, 1, True, [], []))  # more follows
    mirror.on_receive(m.LogBarrier())
    assert quorum_log.epoch_of(config, "/", "q") is None  # batch 1 does not end the sync
    item = m.MirrorItem(5, "", "q", b"", True, 0, 0, b"m" * 16)
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


def _published(bq, seqs):
    """What a member's backing queue was given to write and syncs: Persisted back."""
    return [msg for x in bq.got if isinstance(x, Persist) for msg in x.msgs
            if msg.seq_id in seqs]


def test_a_member_of_the_masters_epoch_keeps_its_log_and_is_sent_only_what_follows(tmp_path,
                                                                                   monkeypatch):
    """Raft keeps a follower's log: a member whose node restarted offers the log it kept (of
    the master's epoch, 3); the master takes it (MirrorKeep first: which of it is still
    queued) and sends only what follows. Meanwhile the member votes with its kept log's end
    (a partial marker); at the sync's end it prunes what the master no longer holds, and only
    then is its log complete and its acknowledgement sent."""
    config, host, mirror, bq = _mirror(tmp_path, monkeypatch)
    real = BackingQueue(Ref(), {"durable": True, "vhost": "/", "name": "q",
                                 "arguments": QQ}, config, mirror=True)
    real.on_receive(Persist([_msg(s) for s in (1, 2, 3, 4)]))
    real.on_receive(_Sync())
    quorum_log.mark_complete(config, "/", "q", 3)
    mirror.on_start()
    join = host.transport.sent[-1][1]
    assert (join.epoch, join.last) == (3, 4)   # offered: its log of epoch 3, up to 4
    mirror.on_receive(m.MirrorKeep(MASTER, 4, [2, 4]))  # 1 and 3 were acked meanwhile
    mirror.on_receive(m.MirrorSynced(MASTER, 1))
    item = m.MirrorItem(5, "", "q", b"", True, 0, 0, b"m" * 16)
    mirror.on_receive(m.MirrorPublish(MASTER, 1, True, [item], [b"x"]))
    assert not any(isinstance(x, m.DeleteIndex) for x in bq.got)  # kept
    assert quorum_log.position(config, "/", "q") == [3, 4]  # its vote: the kept log's end
    keep = [x for x in bq.got if isinstance(x, m.KeepOnly)]
    assert [(k.upto, sorted(k.keep)) for k in keep] == [(4, [2, 4])]
    for x in bq.got:  # the backing queue does what it was told, in order
        if not isinstance(x, (m.LogBarrier, Persist)):
            real.on_receive(x)
    real.on_receive(Persist(_published(bq, {5})))
    real.on_receive(_Sync())
    with real.storage.begin() as txn:
        assert [e.seq_id for e in real.index.read(txn, -1, 100)] == [2, 4, 5]
    mirror.on_receive(m.LogBarrier())  # the prune is done
    assert [x for _, x in host.transport.sent if isinstance(x, m.MirrorAck)] == []
    assert quorum_log.is_partial(config, "/", "q")  # 5 is not on disk yet
    mirror.on_receive(m.Persisted(_published(bq, {5})))
    acks = [x.batch for _, x in host.transport.sent if isinstance(x, m.MirrorAck)]
    assert acks == [1] and quorum_log.position(config, "/", "q") == [3, 5]
    assert not quorum_log.is_partial(config, "/", "q")
    # the master forgets a kept one: it leaves the index with the next flush
    mirror.on_receive(m.MirrorForget(MASTER, [2]))
    assert [x.msgs[0].seq_id for x in bq.got if isinstance(x, Forget)] == [2]


def test_a_log_of_another_epoch_or_cut_short_is_not_offered(tmp_path, monkeypatch):
    config, _ = storage(tmp_path, monkeypatch)
    bq = BackingQueue(Ref(), {"durable": True, "vhost": "/", "name": "q", "arguments": QQ},
                      config, mirror=True)
    bq.on_receive(Persist([_msg(s) for s in (1, 2, 3)]))
    bq.on_receive(_Sync())
    assert quorum_log.offer(config, "/", "q") is None  # no marker: nothing complete
    quorum_log.mark_partial(config, "/", "q", 3, 3)
    assert quorum_log.offer(config, "/", "q") == [3, 3]
    bq.on_receive(Persist([_msg(7)]))  # a keeping sync wrote past its kept log, then stopped
    bq.on_receive(_Sync())
    assert quorum_log.position(config, "/", "q") == [3, 3]  # its vote: still the kept end
    assert quorum_log.offer(config, "/", "q") is None  # a master could not append after 3


def test_a_member_told_to_keep_a_log_it_did_not_offer_drops_it_and_asks_again(tmp_path,
                                                                              monkeypatch):
    config, host, mirror, bq = _mirror(tmp_path, monkeypatch)
    mirror.on_start()  # nothing kept: nothing offered
    mirror.on_receive(m.MirrorKeep(MASTER, 9, [8]))
    mirror.on_receive(m.MirrorPublish(MASTER, 1, True, [], []))
    assert [type(x) for x in bq.got] == [m.DeleteIndex, m.LogBarrier]
    joins = [x for _, x in host.transport.sent if isinstance(x, m.MirrorJoin)]
    assert len(joins) == 2 and (joins[-1].epoch, joins[-1].last) == (-1, -1)
    mirror.on_receive(m.LogBarrier())
    # batches of the first join: no ack, no marker (what it skipped is missing)
    mirror.on_receive(m.MirrorSynced(MASTER, 2))
    item = m.MirrorItem(5, "", "q", b"", True, 0, 0, b"m" * 16)
    mirror.on_receive(m.MirrorPublish(MASTER, 2, False, [item], [b"x"]))
    mirror.on_receive(m.Persisted([x for x in bq.got if isinstance(x, Persist)][0].msgs))
    assert not any(isinstance(x, m.MirrorAck) for _, x in host.transport.sent)
    assert quorum_log.epoch_of(config, "/", "q") is None
    mirror.on_receive(m.MirrorSynced(MASTER, 3))  # the join asked again: everything
    mirror.on_receive(m.MirrorPublish(MASTER, 3, True, [], []))
    mirror.on_receive(m.LogBarrier())
    assert [x.batch for _, x in host.transport.sent if isinstance(x, m.MirrorAck)] == [3]
    assert quorum_log.epoch_of(config, "/", "q") == 3


def test_a_members_log_keeps_its_event_log_name_across_restarts_and_a_resync_renames_it(
        tmp_path, monkeypatch):
    config, host, mirror, bq = _mirror(tmp_path, monkeypatch)
    quorum_log.mark_complete(config, "/", "q", 2, "log-before")

    def restarted():
        return Mirror(_Host(config, host.replica.q), host.replica.q, "me:2")

    mirror = restarted()
    monkeypatch.setattr(mirror, "_bq", lambda: bq)
    assert mirror.rlog.log_id == "log-before"  # the log on disk is the one it named
    mirror.on_start()
    # an older epoch's log: the master resyncs it, which drops it under its own name
    mirror.on_receive(m.MirrorSynced(MASTER, 1))
    mirror.on_receive(m.MirrorPublish(MASTER, 1, True, [], []))
    renamed = mirror.rlog.log_id
    assert renamed != "log-before"
    mirror.on_receive(m.LogBarrier())
    assert quorum_log.log_id_of(config, "/", "q") == renamed  # the new log, whole, on disk
    assert restarted().rlog.log_id == renamed  # a member restarting on it names it as before
    quorum_log.mark_incomplete(config, "/", "q")
    assert restarted().rlog.log_id not in (None, renamed)


def test_a_member_takes_from_its_own_master_only_and_answers_a_promotion(tmp_path,
                                                                          monkeypatch):
    """Mirror.on_receive's tables: a member's (durably) MirrorKeep counts from its master
    alone; TakeMessages is answered through the table (the ask's reply)."""
    _, host, mirror, bq = _mirror(tmp_path, monkeypatch)
    mirror.on_start()
    mirror.on_receive(m.MirrorKeep("tcp://other:1#q", 5, [1, 2]))
    assert mirror.keep is None
    mirror.on_receive(m.MirrorKeep(MASTER, 5, [1, 2]))
    assert mirror.keep == {1, 2}
    adopted = mirror.on_receive(m.TakeMessages())
    assert isinstance(adopted, m.Adopted) and (adopted.messages, adopted.paged) == ([], [0])


def test_the_mirror_routes_by_tables_not_type_checks():
    """Each message type a mirror takes has one handler per kind of mirror; those both kinds
    take alike are in one table."""
    source = textwrap.dedent(inspect.getsource(Mirror.on_receive))
    assert not [c for c in ast.walk(ast.parse(source)) if isinstance(c, ast.Call)
                and getattr(c.func, "id", "") == "isinstance"]
    either = set(mirror_module._EITHER)
    assert not either & set(mirror_module._DURABLE) and not either & set(
        mirror_module._IN_MEMORY)
    assert set(mirror_module._IN_MEMORY) <= set(mirror_module._DURABLE)
