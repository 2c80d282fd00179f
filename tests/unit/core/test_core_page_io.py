"""actors/core/page_io.py: a queue's page-out and page-in decisions, without a queue: PageIO is
given the paged counts, the priority lanes, the messages_persistent count, the confirm mode,
the id source and the queue's two decisions (drop, must-read) as callables, and these tests
give it recording ones."""

from __future__ import annotations

from actors.core.confirms import QueueConfirms
from actors.core.page_io import AT_HEAD, PageIO
from actors.core.paging import Paging, PersistentCount
from actors.core.priorities import PriorityLanes
from actors.core.queue_msg import Msg
from actors.messages import StoredMessage
from core_fakes import PageRequests
from queue_index import IndexEntry


class Rig:
    """A PageIO with everything it is given in reach, and what it handed to the queue."""

    def __init__(self, page_bytes=10, page_size=3, max_priority=0, durable=True,
                 confirm_on="enqueue", must_read=False):
        self.asked = PageRequests()
        self.prios = PriorityLanes(max_priority)
        self.paging = Paging(self.asked, len(self.prios.lanes), page_bytes, page_size)
        self.pers = PersistentCount()
        self.confirms = QueueConfirms(confirm_on)
        self.dropped: list = []  # what the queue was told to drop (drop-head, maxlen)
        self.must_read = must_read
        self.ids = iter(range(1000, 2000))
        self.io = PageIO(self.paging, self.prios, self.pers, self.confirms, durable,
                         lambda n: next(self.ids).to_bytes(n, "big"), self.dropped.append,
                         lambda: self.must_read)
        self.seq = 0
        self.durable = durable

    def paged_waiter(self, pub_seq: int, written: list) -> Msg:
        """Two messages in memory fill it; a third, whose publisher waits, is paged out."""
        self.arrive(self.msg(), written)
        self.arrive(self.msg(), written)
        paged = self.msg(publisher="ch/1", pub_seq=pub_seq)
        self.arrive(paged, written)
        return paged

    def tail_ids(self, p=0) -> list:
        return [m.msg_id for m in self.prios.lanes[p].tail]

    def msg(self, body=b"xxxxxx", persistent=False, priority=0, publisher="", pub_seq=0):
        self.seq += 1
        return Msg(self.seq, "x", "rk", b"\x00\x00", body, persistent, priority,
                   publisher=publisher, pub_seq=pub_seq)

    def arrive(self, msg, to_persist):
        """What QueueCore does with a new message of a paging queue, in PageIO's steps (a
        persistent one of a durable queue counted and written as it comes; the tail's
        transient ones before it first)."""
        divert, behind = self.io.placement(msg.priority, to_persist)
        if msg.persistent and self.durable:
            self.pers.add(msg)
        if divert:
            self.io.page_out(msg)
        if msg.persistent and self.durable:
            if behind:
                self.io.write_tail_before(msg, to_persist)
            msg.stored = True
            to_persist.append(msg)
        elif divert:
            self.io.write_paged(msg, to_persist)
        if divert:
            pass
        elif behind:
            self.prios.push_behind(msg)
        else:
            self.prios.push(msg)
        return divert, behind


def stored(msgs, delivered=False):
    """What the backing queue reads back for these messages."""
    return [StoredMessage(IndexEntry(m.seq_id, m.msg_id, m.exchange, m.routing_key, m.props_raw,
                                     m.body, len(m.body), m.priority, 0, delivered),
                          m.body, m.persistent) for m in msgs]


def test_a_message_goes_to_the_head_below_the_budget_and_to_the_index_past_it__R1():
    r = Rig()
    written: list = []
    a, b, c = r.msg(), r.msg(), r.msg()
    assert r.arrive(a, written) == AT_HEAD
    assert r.arrive(b, written) == AT_HEAD  # 12 bytes now, past the 10 of the budget
    assert r.arrive(c, written) == (True, False)
    assert written == [c] and c.stored and not c.persistent and c.pub_seq == 0
    assert (r.paging.paged, r.paging.lanes[0].page_after) == (1, 2)
    assert list(r.prios.lanes[0].items) == [a, b]


def test_below_the_budget_again_a_message_waits_behind_the_paged_part_then_spills_first__R1():
    r = Rig()
    written: list = []
    for _ in range(3):
        r.arrive(r.msg(), written)  # the third is paged out
    r.prios.pop(0)  # a consumer took one: 6 bytes in memory
    behind = r.msg(b"yy")
    assert r.arrive(behind, written) == (False, True)
    assert list(r.prios.lanes[0].tail) == [behind] and len(written) == 1
    r.arrive(r.msg(b"zzzzzz"), written)  # 14 bytes: still within, behind too
    newest = r.msg()
    assert r.tail_ids() == [None, None]
    assert r.arrive(newest, written) == (True, False)  # full: the tail first, then it
    assert [m.seq_id for m in written] == [3, 4, 5, 6]
    assert not r.prios.lanes[0].tail and r.paging.lanes[0].paged == 4
    assert all(m.msg_id is not None for m in written[1:3])  # the index names each one


def test_a_persistent_message_in_the_tail_has_the_transient_ones_before_it_written_first():
    r = Rig()
    written: list = []
    for _ in range(3):
        r.arrive(r.msg(), written)
    r.prios.pop(0)
    t1, t2 = r.msg(b"a"), r.msg(b"b")
    r.arrive(t1, written)
    r.arrive(t2, written)
    p = r.msg(b"p", persistent=True)
    assert r.arrive(p, written) == (False, True)
    assert written[1:] == [t1, t2, p] and t1.stored and t2.stored
    assert t1.msg_id is not None and t2.msg_id is not None  # (the index takes them by id)
    last = r.msg(b"c")
    r.arrive(last, written)
    p2 = r.msg(b"q", persistent=True)
    r.arrive(p2, written)
    assert written[4:] == [last, p2]  # the scan stops at the last one written


def test_an_ack_waiter_of_a_paged_message_is_kept_by_its_lane_and_comes_back_with_it():
    r = Rig(confirm_on="ack")
    paged = r.paged_waiter(7, [])
    assert paged.pub_seq == 0 and len(r.paging.lanes[0].pubs) == 1
    r.io.paged_in(stored([paged]), 0, 0, 0, 0, 0)
    back = r.prios.lanes[0].items[-1]
    assert (back.publisher, back.pub_seq) == ("ch/1", 7)
    assert r.paging.lanes[0].pubs is None  # nothing paged any more: the table goes


def test_a_page_read_back_drops_the_owed_first_and_the_tail_joins_once_none_is_paged():
    r = Rig(page_size=10)
    written: list = []
    for _ in range(4):
        r.arrive(r.msg(), written)  # seq 3 and 4 paged out
    for _ in range(2):
        r.prios.pop(0)
    behind = r.msg(b"t")
    r.arrive(behind, written)
    assert r.io.drop_paged_head(0, over_count=True)  # seq 3 owed
    r.io.ask_owing()
    assert r.asked.calls == [("drop_paged", 2, 1, 0)]  # nothing must see it: dropped unread
    r.asked.calls.clear()
    r.paging.lanes[0].asked = False  # (the drop's answer, as if a page had been asked instead)
    r.io.paged_in(stored(written), 0, 0, 0, 0, 0)
    assert [m.seq_id for m in r.dropped] == [3]
    assert [m.seq_id for m in r.prios.lanes[0].items] == [4, 5]
    assert r.paging.paged == 0 and r.paging.owed == 0 and not r.prios.lanes[0].tail


def test_owed_drops_are_read_back_when_the_queue_must_see_them():
    r = Rig(must_read=True)
    written: list = []
    for _ in range(4):
        r.arrive(r.msg(), written)
    r.prios.pop(0)
    r.prios.pop(0)
    assert r.io.drop_paged_head(0, over_count=True)
    assert r.io.drop_paged_head(0, over_count=True)
    r.io.ask_owing()
    assert r.asked.calls == [("page_in", 2, 2, 0)]  # one ask for the lane, not one a message
    r.io.ask_owing()
    assert r.asked.calls == [("page_in", 2, 2, 0)]  # nothing owed since: nothing asked


def test_over_the_bytes_only_the_paged_head_waits_for_its_page_and_all_owed_drops_the_tail():
    r = Rig()
    written: list = []
    for _ in range(3):
        r.arrive(r.msg(), written)
    r.prios.pop(0)
    r.prios.pop(0)
    assert not r.io.drop_paged_head(0, over_count=False)  # its size comes with its page
    assert r.asked.calls == [("page_in", 2, 1, 0)] and not r.dropped
    behind = r.msg(b"t")
    r.arrive(behind, written)
    r.paging.owe(r.paging.lanes[0])  # every paged one owed: the next oldest is the tail's
    assert r.io.drop_paged_head(0, over_count=True)
    assert r.dropped == [behind] and not r.prios.lanes[0].tail


def test_dropped_unread_counts_off_and_says_whether_drops_are_still_owed():
    r = Rig()
    written: list = []
    for _ in range(5):
        r.arrive(r.msg(persistent=True), written)  # 3, 4, 5 paged out
    for _ in range(2):
        r.io.drop_paged_head(0, over_count=True)
    assert r.paging.lanes[0].pers == 3
    assert r.io.paged_dropped(0, 1, 6, 3, 1, 6)  # one of the two: the other is asked again
    assert r.asked.calls[-1] == ("drop_paged", 3, 1, 0)
    assert not r.io.paged_dropped(0, 1, 6, 4, 1, 6)
    assert (r.paging.paged, r.paging.owed, r.paging.lanes[0].pers) == (1, 0, 1)


def test_restore_loads_the_first_page_and_counts_the_rest_per_lane():
    r = Rig(max_priority=2)
    first = [r.msg(persistent=True, priority=2), r.msg(persistent=True)]
    r.io.restore(stored(first), [3, 0, 2], [30, 0, 20], 0, 0)
    assert [len(lane.items) for lane in r.prios.lanes] == [1, 0, 1]
    assert (r.pers.n, r.pers.nbytes) == (2, 12)  # durable: what the index kept is persistent
    assert [lane.page_after for lane in r.paging.lanes] == [2, 0, 1]
    assert (r.paging.paged, r.paging.lanes[2].pers) == (5, 2)


def test_a_refused_write_leaves_the_lane_and_its_waiter_is_lost():
    r = Rig(confirm_on="ack")
    paged = r.paged_waiter(9, [])
    assert r.io.refused([paged], {paged.seq_id}) == [("ch/1", 9)]
    assert r.paging.paged == 0


def test_a_purge_settles_the_paged_parts_and_unmarks_the_tails_stored_messages():
    r = Rig(confirm_on="ack")
    assert r.io.purge() is None  # nothing paged: nothing asked
    written: list = []
    r.paged_waiter(4, written)
    r.prios.pop(0)
    behind = r.msg(b"t")
    r.arrive(behind, written)
    behind.stored = True  # (written before a persistent one, as write_tail_before does)
    assert r.io.purge() == [("ch/1", 4)]
    assert r.asked.calls == [("purge_paged", 2, 0)] and not behind.stored


def test_persistent_count_follows_a_message_into_its_lane_and_out_of_the_queue():
    count = PersistentCount()
    r = Rig()
    a, b = r.msg(persistent=True), r.msg(b"tt")
    count.add(a)
    assert a.pers and (count.n, count.nbytes) == (1, 6)
    lane = r.paging.lanes[0]
    count.to_lane(b, lane)  # not counted: nothing moves
    count.to_lane(a, lane)
    assert (count.n, lane.pers, lane.pers_bytes) == (0, 1, 6)
    count.add(b)
    count.gone([b])
    assert (count.n, count.nbytes) == (0, 0) and not b.pers
