"""actors/core/quorum.py: a quorum queue's arguments, flags, equivalence, group size,
delivery limit and majority confirms, with RabbitMQ's texts (rabbit_quorum_queue 3.10.8 /
4.0, rabbit_amqqueue, rabbit_queue_type_util)."""

import pytest

from actors.core import queue_args as qa
from actors.core import quorum
from actors.core.errors import ChannelError

PF = "PRECONDITION_FAILED - "
Q = {"x-queue-type": "quorum"}


def _text(fn, *a):
    with pytest.raises(ChannelError) as e:
        fn(*a)
    assert e.value.reply_code == 406
    return e.value.text


@pytest.mark.parametrize("args", [
    {}, {"x-max-length": 10, "x-overflow": "reject-publish"}, {"x-overflow": "drop-head"},
    {"x-delivery-limit": 5}, {"x-delivery-limit": -1}, {"x-dead-letter-exchange": "dlx",
                                                         "x-dead-letter-routing-key": "k"},
    {"x-dead-letter-strategy": "at-most-once"}, {"x-expires": 1000, "x-message-ttl": 0},
    {"x-single-active-consumer": True}, {"x-quorum-initial-group-size": 5},
    {"x-queue-leader-locator": "client-local"}, {"x-max-length-bytes": 100},
    {"x-consumer-timeout": 1000}])
def test_quorum_arguments_accepted(args):
    qa.validate({**Q, **args}, "q", "/", {"durable": True})


@pytest.mark.parametrize("args,text", [
    # arguments of other queue types: check_arguments_key
    ({"x-max-priority": 10}, "invalid arg 'x-max-priority' for queue 'q' in vhost '/' of queue "
                             "type rabbit_quorum_queue"),
    ({"x-queue-mode": "lazy"}, "invalid arg 'x-queue-mode' for queue 'q' in vhost '/' of queue "
                               "type rabbit_quorum_queue"),
    ({"x-queue-master-locator": "client-local"}, "invalid arg 'x-queue-master-locator' for "
     "queue 'q' in vhost '/' of queue type rabbit_quorum_queue"),
    ({"x-queue-version": 2}, "invalid arg 'x-queue-version' for queue 'q' in vhost '/' of "
                             "queue type rabbit_quorum_queue"),
    ({"x-max-age": "1D"}, "invalid arg 'x-max-age' for queue 'q' in vhost '/' of queue type "
                          "rabbit_quorum_queue"),
    ({"x-ha-mode": "all"}, "invalid arg 'x-ha-mode' for queue 'q' in vhost '/' of queue type "
                           "rabbit_quorum_queue"),
    # validators of declare_args
    ({"x-quorum-initial-group-size": 0}, "invalid arg 'x-quorum-initial-group-size' for queue "
                                         "'q' in vhost '/': {value_zero,0}"),
    ({"x-quorum-initial-group-size": -1}, "invalid arg 'x-quorum-initial-group-size' for queue "
                                          "'q' in vhost '/': {value_negative,-1}"),
    ({"x-overflow": "sideways"}, "invalid arg 'x-overflow' for queue 'q' in vhost '/': "
                                 "invalid_overflow"),
    ({"x-dead-letter-strategy": "never"}, "invalid arg 'x-dead-letter-strategy' for queue 'q' "
                                          "in vhost '/': invalid_dlx_strategy"),
    ({"x-queue-leader-locator": "nearest"}, "invalid arg 'x-queue-leader-locator' for queue 'q' "
                                            "in vhost '/': invalid_queue_locator_arg"),
    ({"x-max-length": -1}, "invalid arg 'x-max-length' for queue 'q' in vhost '/': "
                           "{value_negative,-1}"),
    ({"x-delivery-limit": "many"}, "invalid arg 'x-delivery-limit' for queue 'q' in vhost '/': "
                                   "\"expected integer, got longstr\""),
    ({"x-single-active-consumer": 1}, "invalid arg 'x-single-active-consumer' for queue 'q' in "
                                      "vhost '/': {unacceptable_type,signedint}"),
])
def test_quorum_argument_errors(args, text):
    assert _text(qa.validate, {**Q, **args}, "q", "/", {"durable": True}) == PF + text


@pytest.mark.parametrize("args,what", [
    ({"x-overflow": "reject-publish-dlx"}, "reject-publish-dlx is not supported"),
    ({"x-dead-letter-strategy": "at-least-once"}, "at-least-once is not implemented"),
    ({"x-max-in-memory-length": 10}, "in-memory limits of quorum queues are not implemented"),
    ({"x-max-in-memory-bytes": 10}, "in-memory limits of quorum queues are not implemented"),
    ({"x-queue-leader-locator": "balanced"}, "leader locator 'balanced' is not implemented"),
])
def test_quorum_arguments_leveret_refuses(args, what):
    """What RabbitMQ accepts and Leveret does not implement is refused, never ignored."""
    assert what in _text(qa.validate, {**Q, **args}, "q", "/", {"durable": True})


@pytest.mark.parametrize("flags,prop", [
    ({"durable": False}, "non-durable"),
    ({"durable": True, "exclusive": True}, "exclusive-owner"),
    ({"durable": True, "auto_delete": True}, "auto-delete"),
    # rabbit_quorum_queue:declare/2's order: auto-delete, exclusive, non-durable
    ({"durable": False, "exclusive": True, "auto_delete": True}, "auto-delete"),
    ({"durable": False, "exclusive": True}, "exclusive-owner"),
])
def test_quorum_is_durable_only(flags, prop):
    assert _text(qa.validate, dict(Q), "q", "/", flags) == \
        PF + f"invalid property '{prop}' for queue 'q' in vhost '/'"


def test_classic_flags_are_not_quorum_checked():
    qa.validate({"x-queue-type": "classic"}, "q", "/", {"durable": False, "exclusive": True})
    qa.validate(None, "q", "/", {"durable": False, "auto_delete": True})


@pytest.mark.parametrize("old,new,text", [
    ({"x-queue-type": "quorum"}, {"x-queue-type": "classic"},
     "inequivalent arg 'x-queue-type' for queue 'q' in vhost '/': received 'classic' but "
     "current is 'quorum'"),
    ({"x-queue-type": "quorum"}, {}, "inequivalent arg 'x-queue-type' for queue 'q' in vhost "
     "'/': received none but current is the value 'quorum' of type 'longstr'"),
    ({}, {"x-queue-type": "quorum"}, "inequivalent arg 'x-queue-type' for queue 'q' in vhost "
     "'/': received the value 'quorum' of type 'longstr' but current is none"),
    ({"x-queue-type": "classic"}, {"x-queue-type": "quorum"},
     "inequivalent arg 'x-queue-type' for queue 'q' in vhost '/': received 'quorum' but "
     "current is 'classic'"),
    ({"x-queue-type": "quorum", "x-delivery-limit": 5}, {"x-queue-type": "quorum"},
     "inequivalent arg 'x-delivery-limit' for queue 'q' in vhost '/': received none but "
     "current is the value '5' of type 'signedint'"),
])
def test_redeclare_with_another_type_is_inequivalent(old, new, text):
    assert _text(qa.assert_equivalent, old, new, "q", "/") == PF + text


def test_quorum_equivalence_compares_its_own_arguments():
    qa.assert_equivalent({"x-queue-type": "quorum", "x-quorum-initial-group-size": 3},
                         {"x-queue-type": "quorum", "x-quorum-initial-group-size": 3}, "q", "/")


def test_quorum_consume_arguments():
    qa.check_consume_arguments({"x-priority": 3}, "q", "/", "quorum")
    assert _text(qa.check_consume_arguments, {"x-cancel-on-ha-failover": True}, "q", "/",
                 "quorum") == PF + ("invalid arg 'x-cancel-on-ha-failover' for queue 'q' in "
                                    "vhost '/' of queue type rabbit_quorum_queue")


@pytest.mark.parametrize("args,cluster,size", [
    ({}, 1, 1), ({}, 3, 3), ({}, 5, 3), ({"x-quorum-initial-group-size": 5}, 3, 3),
    ({"x-quorum-initial-group-size": 5}, 7, 5), ({"x-quorum-initial-group-size": 1}, 3, 1)])
def test_group_size(args, cluster, size):
    assert quorum.group_size(args, cluster) == size


def test_majority():
    assert [quorum.majority(n) for n in (1, 2, 3, 4, 5)] == [1, 2, 2, 3, 3]


@pytest.mark.parametrize("arg,policy,limit", [
    (None, None, 20), (5, None, 5), (None, 7, 7), (5, 7, 5), (9, 7, 7), (-1, None, None),
    (-1, 7, 7), (0, None, 0), (-1, -1, None)])
def test_delivery_limit__S6(arg, policy, limit):
    """Default 20 (RabbitMQ 4.0), the smaller of argument and policy, negative = none."""
    assert quorum.delivery_limit(arg, policy) == limit


def test_confirmable_batch_needs_a_majority_and_the_heir():
    # three members: the master and one mirror make a majority
    assert quorum.confirmable_batch({"b": 4, "c": 9}, "b", 1) == 4  # the heir is behind
    assert quorum.confirmable_batch({"b": 4, "c": 9}, None, 1) == 9
    assert quorum.confirmable_batch({"c": 9}, "b", 1) == 9  # the heir is gone: the next one
    assert quorum.confirmable_batch({}, None, 1) == -1  # no mirror: nothing confirmed
    # five members: two mirrors besides the master
    assert quorum.confirmable_batch({"b": 8, "c": 3, "d": 6}, "b", 2) == 6
    assert quorum.confirmable_batch({"b": 8}, "b", 2) == -1
    # one member: the master alone
    assert quorum.confirmable_batch({}, None, 0) > 10 ** 9


def test_global_qos_and_delete_flags_are_not_implemented():
    quorum.check_consume_qos(0, "q", "/")
    with pytest.raises(ChannelError) as e:
        quorum.check_consume_qos(10, "q", "/")
    assert (e.value.reply_code, e.value.text) == (
        540, "NOT_IMPLEMENTED - queue 'q' in vhost '/' does not support global qos")
    quorum.check_delete(False, False, "q", "/")
    with pytest.raises(ChannelError) as e:
        quorum.check_delete(False, True, "q", "/")
    assert e.value.text == ("NOT_IMPLEMENTED - cannot delete queue 'q' in vhost '/'. "
                            "queue.delete operations with if-empty flag set are not supported "
                            "by quorum queues")


def test_elect_takes_the_longest_log_among_a_majority():
    """issue 15 "heir": Raft's vote (ra): a majority of the members must answer, and the one
    with the most up to date log (epoch, then last seq_id) leads."""
    voters = ["l", "a", "b"]  # the leader (gone) first, then the members oldest first
    # the oldest synchronised member (b) lags: the longer log (a) wins
    assert quorum.elect(voters, {"a": (0, 300), "b": (0, 120)}, 3) == "a"
    assert quorum.elect(voters, {"a": (0, 120), "b": (0, 300)}, 3) == "b"
    # a later epoch (a leader promoted since) wins over a longer log of an older leader
    assert quorum.elect(voters, {"a": (1, 5), "b": (0, 900)}, 3) == "a"
    # a tie: the voters' order (the leader, then the oldest member)
    assert quorum.elect(voters, {"a": (0, 7), "b": (0, 7)}, 3) == "a"
    assert quorum.elect(voters, {"l": (0, 7), "b": (0, 7)}, 3) == "l"
    # fewer than a majority answered: wait (a Raft group without a majority elects nobody)
    assert quorum.elect(voters, {"b": (0, 300)}, 3) is None
    assert quorum.elect(voters, {}, 3) is None
    # a member resynchronising (None) votes but cannot lead
    assert quorum.elect(voters, {"a": None, "b": (0, 3)}, 3) == "b"
    assert quorum.elect(voters, {"a": None, "b": None}, 3) is None
    # answers of members whose logs do not count are not votes
    assert quorum.elect(voters, {"a": (0, 3), "x": (0, 9)}, 3) is None
    # five members: three must answer
    five = ["l", "a", "b", "c", "d"]
    assert quorum.elect(five, {"a": (0, 1), "b": (0, 2)}, 5) is None
    assert quorum.elect(five, {"a": (0, 1), "b": (0, 2), "d": (0, 9)}, 5) == "d"
    # a lone member: its own answer is the majority
    assert quorum.elect(["l"], {"l": (0, 0)}, 1) == "l"


def test_trim_logs_drops_replaced_members_first():
    # three members: two besides the leader; d replaced a (down, no longer a mirror)
    assert quorum.trim_logs(["a", "b", "d"], "l", ["b", "d"], 3) == ["b", "d"]
    # a still a mirror (its node came back): the oldest that is not a mirror goes
    assert quorum.trim_logs(["a", "b", "d"], "l", ["a", "d"], 3) == ["a", "d"]
    # nothing to drop: every one is a mirror (cannot happen with at most size-1 mirrors)
    assert quorum.trim_logs(["a", "b", "d"], "l", ["a", "b", "d"], 3) == ["a", "b", "d"]
    # the leader and duplicates never count
    assert quorum.trim_logs(["l", "a", "a"], "l", ["a"], 3) == ["a"]
    assert quorum.trim_logs(["a", "b"], "l", [], 3) == ["a", "b"]
    assert quorum.trim_logs(["a"], "l", [], 1) == []
