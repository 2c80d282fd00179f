"""actors/core/confirms.py: which publishes wait for which queues, when a queue's copy is
confirmed, what a mirrored master holds, and the frames that answer the publisher
(behaviours C1, C2, C6)."""

from __future__ import annotations

from types import SimpleNamespace

from actors.core.confirms import (NOW, ON_ACK, ON_SYNC, ConfirmFrame, Confirms, LiteConfirms,
                                  MirrorHold, QueueConfirms, Verdict, missing_queue, wanted)


# --- the publishing channel: Confirms -------------------------------------------------------------
def test_a_publish_routed_to_two_queues_is_confirmed_when_both_have__C1():
    c = Confirms()
    c.insert(1, ["q1", "q2"])
    c.insert(2, ["q1"])
    c.confirm([1, 2], "q1")
    assert c.acks == [2] and c.smallest() == 1
    c.confirm([1], "q2")
    assert c.acks == [2, 1] and c.smallest() is None and len(c) == 0


def test_one_refusal_nacks_at_once_and_a_late_ack_changes_nothing__C2():
    c = Confirms()
    c.insert(5, ["q1", "q2"])
    c.reject([5], "reject-publish")
    c.confirm([5], "q2")
    assert c.nacks == [5] and c.acks == []
    assert c.take().reasons == {5: "reject-publish"}


def test_a_second_refusal_in_the_same_turn_names_its_reason_without_a_second_nack():
    c = Confirms()
    c.insert(5, ["q1", "q2"])
    c.reject([5], "reject-publish")
    c.reject([5], "disk")
    answered = c.take()
    assert answered.nacks == [5] and answered.reasons == {5: "disk"}
    c.reject([5], "lost")  # a later turn: answered already, nothing to say
    assert not c.pending() and c.take().reasons == {}


def test_queues_that_died_nack_what_they_owed__C6():
    c = Confirms()
    c.insert(1, ["w1#q", "w2#q"])
    c.insert(2, ["w2#q"])
    c.insert(3, ["w1#q"])
    c.reject_queues(lambda q: q.startswith("w1#"), "queue_down")
    assert c.nacks == [1, 3] and list(c.unconfirmed) == [2]
    assert c.take().reasons == {1: "queue_down", 3: "queue_down"}


def test_the_node_pausing_nacks_every_publish_still_waiting__C6():
    c = Confirms()
    c.insert(1, ["w1#a"])
    c.insert(2, ["w2#b", "w3#c"])
    c.confirm([1], "w1#a")
    c.reject_queues(lambda q: True, "queue_down")
    assert c.acks == [1] and c.nacks == [2] and len(c) == 0


def test_an_unroutable_publish_is_confirmed_at_once():
    c = Confirms()
    c.insert(1, [])
    c.insert(2, ())
    assert c.acks == [1, 2] and len(c) == 0 and c.pending()


def test_a_publish_to_a_dead_queue_is_nacked_and_waits_for_nothing():
    c = Confirms()
    c.refuse(4, "queue_down")
    answered = c.take()
    assert answered.nacks == [4] and answered.reasons == {4: "queue_down"} and len(c) == 0


def test_the_smallest_is_the_oldest_still_waiting():
    c = Confirms()
    for seq in (1, 2, 3):
        c.insert(seq, ["q"])
    c.confirm([2], "q")
    assert c.smallest() == 1
    c.confirm([1], "q")
    assert c.smallest() == 3


def test_a_run_below_the_oldest_unconfirmed_goes_as_one_multiple_ack():
    c = Confirms()
    for seq in range(1, 6):
        c.insert(seq, ["q"])
    c.confirm([3, 1, 2, 5], "q")  # 4 still waits
    answered = c.take()
    assert answered.acks == [1, 2, 3, 5]
    assert answered.frames == [ConfirmFrame(False, 3, True), ConfirmFrame(False, 5, False)]
    assert not c.pending()


def test_everything_confirmed_goes_as_one_multiple_ack_up_to_the_last():
    c = Confirms()
    for seq in range(1, 4):
        c.insert(seq, ["q"])
    c.confirm([1, 2, 3], "q")
    assert c.take().frames == [ConfirmFrame(False, 3, True)]


def test_one_confirm_below_the_oldest_is_a_single_frame():
    c = Confirms()
    c.insert(1, ["q"])
    c.insert(2, ["q"])
    c.confirm([1], "q")
    assert c.take().frames == [ConfirmFrame(False, 1, False)]


def test_acks_and_nacks_in_one_turn_go_one_by_one_nacks_first():
    c = Confirms()
    for seq in range(1, 5):
        c.insert(seq, ["q"])
    c.confirm([1, 2], "q")
    c.reject([3, 4], "disk")
    assert c.take().frames == [ConfirmFrame(True, 3, False), ConfirmFrame(True, 4, False),
                               ConfirmFrame(False, 1, False), ConfirmFrame(False, 2, False)]


def test_a_run_of_nacks_alone_goes_as_one_multiple_nack():
    c = Confirms()
    for seq in range(1, 4):
        c.insert(seq, ["w1#q"])
    c.reject_queues(lambda q: True, "queue_down")
    assert c.take().frames == [ConfirmFrame(True, 3, True)]


def test_clear_forgets_what_waits():
    c = Confirms()
    c.insert(1, ["q"])
    c.clear()
    assert len(c) == 0 and c.smallest() is None


# --- the queue: QueueConfirms ---------------------------------------------------------------------
def test_enqueue_confirms_a_transient_copy_on_arrival_and_a_stored_one_after_the_sync():
    q = QueueConfirms()
    assert q.mode == "enqueue" and not q.late
    assert q.on_arrival(stored=False) == NOW
    assert q.on_arrival(stored=True) == ON_SYNC
    assert q.confirms_gone()  # a TTL-0 copy nobody could take: confirmed, as RabbitMQ


def test_ack_modes_confirm_on_the_consumers_ack_whatever_the_storage():
    for mode in ("ack", "ack-lite", b"ack"):
        q = QueueConfirms(mode)
        assert q.late
        assert q.on_arrival(stored=False) == ON_ACK == q.on_arrival(stored=True)
        assert not q.confirms_gone()


def test_ack_answers_the_publisher_on_settle_and_ack_lite_leaves_it_to_the_channel():
    ack, lite, enqueue = QueueConfirms("ack"), QueueConfirms("ack-lite"), QueueConfirms()
    assert ack.on_settle(True) is True and ack.on_settle(False) is False
    assert lite.on_settle(True) is None and enqueue.on_settle(True) is None
    assert lite.carries(no_ack=False) and not lite.carries(no_ack=True)
    assert not ack.carries(no_ack=False) and not enqueue.carries(no_ack=False)


def test_answers_are_collected_per_publisher_and_taken_once():
    q = QueueConfirms("ack")
    q.answer("ch1", 1, True)
    q.answer("ch1", 2, True)
    q.answer("ch2", 7, False)
    q.answer("", 8, True)  # a dead-lettered copy: no publisher to answer
    q.answer("ch1", 0, True)  # no confirm wanted
    assert q.take() == {("ch1", True): [1, 2], ("ch2", False): [7]}
    assert q.take() == {} and not q.answers


def test_switching_from_an_ack_mode_to_enqueue_says_the_waiting_ones_are_confirmed_now():
    q = QueueConfirms("ack")
    assert q.set_mode("enqueue") is True and not q.late and q.mode == "enqueue"
    assert q.set_mode("ack-lite") is False and q.late and q.lite
    assert q.set_mode("ack") is False and not q.lite


def test_the_copies_a_sync_confirms_are_grouped_by_publisher():
    msgs = [SimpleNamespace(publisher=p, pub_seq=s)
            for p, s in (("ch1", 1), ("ch2", 4), ("ch1", 3), ("", 0))]
    assert QueueConfirms.by_publisher(msgs) == {"ch1": [1, 3], "ch2": [4]}


# --- a mirrored master: MirrorHold ----------------------------------------------------------------
def test_a_confirm_waits_until_the_mirrors_have_its_batch():
    h = MirrorHold()
    assert h.hold(batch=3, channel="ch", seqs=[1], low=3) is False  # they have it: goes now
    assert h.hold(batch=4, channel="ch", seqs=[2], low=3) is True
    assert h.hold(batch=5, channel="ch2", seqs=[3], low=3) is True
    assert h.release(3) == [] and len(h) == 2
    assert h.release(4) == [("ch", [2])]
    assert h.release(9) == [("ch2", [3])] and len(h) == 0


def test_a_later_confirm_never_overtakes_one_held_before_it():
    h = MirrorHold()
    assert h.hold(batch=4, channel="ch", seqs=[1], low=3) is True
    # a majority's low can pass this batch before the held one is released by an ack
    assert h.hold(batch=4, channel="ch", seqs=[2], low=4) is True
    assert h.release(4) == [("ch", [1]), ("ch", [2])]


# --- the consuming channel: LiteConfirms ----------------------------------------------------------
def test_ack_lite_collects_the_acked_publishes_per_publisher_and_queue():
    lite = LiteConfirms()
    assert not lite
    lite.acked("pub1", "q", 1)
    lite.acked("pub1", "q", 2)
    lite.acked("pub2", "q", 9)
    assert lite
    assert lite.take() == {("pub1", "q"): [1, 2], ("pub2", "q"): [9]}
    assert not lite and lite.take() == {}


# --- a queue worker without the queue: missing_queue ----------------------------------------------
def test_a_publish_to_a_deleted_queue_is_confirmed_and_to_one_that_runs_elsewhere_nacked():
    assert missing_queue(deleted=True) == Verdict(True, "")
    assert missing_queue(deleted=False) == Verdict(False, "queue_down")


def test_only_the_items_that_want_a_confirm_are_answered():
    items = [SimpleNamespace(seq_no=0), SimpleNamespace(seq_no=3), SimpleNamespace(seq_no=4)]
    assert wanted(items) == [3, 4]
