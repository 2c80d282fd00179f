"""actors/core/stream_replication.py: members, the committed offset, a joining member's
matching prefix."""
from __future__ import annotations

from actors.core.quorum import elect
from actors.core.stream_replication import (Replicas, cluster_size, committed_offset,
                                            common_prefix)


def test_cluster_size_defaults_to_every_node_as_rabbitmq():
    assert cluster_size({}, 3) == 3
    assert cluster_size({"x-initial-cluster-size": 2}, 3) == 2
    assert cluster_size({"x-initial-cluster-size": 7}, 3) == 3  # at most the cluster
    assert cluster_size({}, 0) == 1  # a lone node
    assert cluster_size({"x-initial-cluster-size": True}, 3) == 3
    # the policy's initial-cluster-size wins over the argument (policy_precedence/2)
    assert cluster_size({"x-initial-cluster-size": 3}, 3, {"initial-cluster-size": 2}) == 2
    assert cluster_size({}, 3, {"initial-cluster-size": 0}) == 1  # (RabbitMQ accepts 0)
    assert cluster_size({"x-initial-cluster-size": 2}, 3, {"max-age": "1D"}) == 2


def test_committed_offset_is_what_a_majority_holds():
    # three members: the leader and one member make a majority
    assert committed_offset(10, {}, 3) == -1
    assert committed_offset(10, {"a": 4}, 3) == 4
    assert committed_offset(10, {"a": 4, "b": 7}, 3) == 7
    assert committed_offset(10, {"a": 10, "b": 7}, 3) == 10
    # five members: three ends needed
    assert committed_offset(10, {"a": 9, "b": 3}, 5) == 3
    assert committed_offset(10, {"a": 9, "b": 3, "c": 8}, 5) == 8
    assert committed_offset(10, {}, 1) == 10  # a lone member's log is committed


def test_common_prefix_keeps_what_matches_the_leaders_log():
    leader = [[0, 9], [1, 14], [3, 20]]
    assert common_prefix([], leader) == 0  # an empty log keeps nothing
    assert common_prefix([[0, 9]], leader) == 10  # a prefix: all of it
    assert common_prefix([[0, 9], [1, 12]], leader) == 13
    # an unconfirmed tail of epoch 1 the new leader (epoch 3) never had: cut at epoch 1's end
    assert common_prefix([[0, 9], [1, 17]], leader) == 15
    # a tail of an epoch the leader never saw (a leader of epoch 2 that wrote alone)
    assert common_prefix([[0, 9], [1, 14], [2, 30]], leader) == 15
    # a member longer in the leader's own epoch cannot be (it copies it), but is cut anyway
    assert common_prefix([[0, 9], [1, 14], [3, 25]], leader) == 21
    assert common_prefix([[0, 3]], [[0, 9]]) == 4


def test_the_election_promotes_the_latest_epoch_then_the_longest_log():
    # answers are [epoch of the leader whose log it is a prefix of, last offset]
    voters = ["leader", "a", "b"]
    assert elect(voters, {"a": (2, 10), "b": (2, 14)}, 3) == "b"
    assert elect(voters, {"a": (3, 5), "b": (2, 14)}, 3) == "a"  # joined the newer leader
    assert elect(voters, {"a": (2, 10)}, 3) is None  # no majority answered
    assert elect(voters, {"a": None, "b": (1, 0)}, 3) == "b"  # never joined: votes only


def test_replicas_confirm_once_a_majority_holds_a_chunk():
    r = Replicas(3, 1, [], 0)
    assert r.join("n2#q", "b", [], 0, 0) == 0 and r.join("n3#q", "c", [], 0, 0) == 0
    r.written(0, 5, {"ch": [1, 2]})
    r.written(5, 8, {"ch": [3]})
    assert r.commit(8) == []  # the leader alone is no majority
    assert r.due(8, 100, 1000) == [("n2#q", 0), ("n3#q", 0)]
    r.sent("n2#q", 8, 80)
    assert r.due(8, 100, 1000) == [("n3#q", 0)]
    assert r.acked("n2#q", 1, 5) == "b"  # it holds what we held when it joined (nothing)
    assert r.commit(8) == [{"ch": [1, 2]}] and r.committed == 5
    assert r.acked("n2#q", 0, 8) is None  # an acknowledgement of another epoch's leader
    assert r.commit(8) == []
    assert r.acked("n3#q", 1, 8) == "c"
    assert r.commit(8) == [{"ch": [3]}] and r.committed == 8
    assert r.overview == [[1, 7]]


def test_replicas_window_and_a_member_that_went_away():
    r = Replicas(3, 0, [[0, 99]], 0)
    r.join("w1#q", "b", [[0, 39]], 0, 100)  # it keeps its 40 matching offsets
    assert r.due(100, 50, 1000) == [("w1#q", 40)]
    r.sent("w1#q", 90, 500)
    assert r.due(100, 50, 1000) == []  # 50 sent past where it matched, none acknowledged yet
    assert r.acked("w1#q", 0, 60) is None  # not yet what we held when it joined (100)
    assert r.due(100, 50, 1000) == [("w1#q", 90)]
    assert r.acked("w1#q", 0, 100) == "b"
    r.sent("w1#q", 100, 1000)  # a window's bytes: nothing more until acknowledged
    assert r.due(200, 50, 1000) == []
    r.acked("w1#q", 0, 100)
    assert r.due(200, 50, 1000) == [("w1#q", 100)]
    r.gone("w1")
    assert not r and r.due(100, 50, 1000) == []


def test_replicas_join_keeps_the_matching_prefix_within_our_log():
    r = Replicas(3, 2, [[0, 9], [2, 19]], 0)
    assert r.join("a#q", "a", [[0, 9], [1, 30]], 0, 20) == 10  # epoch 1's tail goes
    assert r.join("b#q", "b", [[0, 9], [2, 25]], 0, 20) == 20  # never past our end
    assert r.join("c#q", "c", [[0, 4]], 8, 20) == 0  # what matched is gone here: all goes
    assert r.members["c#q"].sent == 8  # ...and it is sent our log from its first offset
