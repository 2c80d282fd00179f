"""Classic queue mirroring without sockets (actors/core/mirroring.py): every ha-* policy key and
the x-ha-* arguments are validated with RabbitMQ's rules and texts
(rabbit_mirror_queue_misc:validate_policy/1, rabbit_mirror_queue_mode_*:validate_policy/1),
and each mode puts the mirrors where RabbitMQ's suggested_queue_nodes/5 would."""
from __future__ import annotations

import pytest

from actors.core import mirroring, policies, queue_args
from actors.core.errors import ChannelError


def policy_refusal(definition) -> str:
    with pytest.raises(ChannelError) as ei:
        policies.validate("p", ".*", definition, 0, "queues")
    assert ei.value.reply_code == 406
    return ei.value.text.removeprefix("PRECONDITION_FAILED - Validation failed\n\n").rstrip("\n")


@pytest.mark.parametrize("definition, text", [
    ({"ha-mode": "banana"}, '<<"banana">> is not a valid ha-mode value'),
    ({"ha-mode": "exactly", "ha-params": "banana"},
     'ha-mode="exactly" takes an integer, <<"banana">> given'),
    ({"ha-mode": "exactly", "ha-params": 0}, 'ha-mode="exactly" takes an integer, 0 given'),
    ({"ha-mode": "exactly", "ha-params": -2}, 'ha-mode="exactly" takes an integer, -2 given'),
    ({"ha-mode": "exactly", "ha-params": True}, 'ha-mode="exactly" takes an integer, true given'),
    ({"ha-mode": "exactly"}, 'ha-mode="exactly" takes an integer, none given'),
    ({"ha-mode": "nodes"}, 'ha-mode="nodes" takes a list, none given'),
    ({"ha-mode": "nodes", "ha-params": "leveret@node1"},
     'ha-mode="nodes" takes a list, <<"leveret@node1">> given'),
    ({"ha-mode": "nodes", "ha-params": []}, 'ha-mode="nodes" list must be non-empty'),
    ({"ha-mode": "nodes", "ha-params": ["leveret@node1", 2, 3.5]},
     'ha-mode="nodes" takes a list of strings, [2,3.5] was not a string'),
    ({"ha-mode": "all", "ha-params": 2}, 'ha-mode="all" does not take parameters'),
    ({"ha-params": 2},
     "ha-mode must be specified to specify ha-params, ha-sync-mode or ha-promote-on-shutdown"),
    ({"ha-sync-mode": "automatic"},
     "ha-mode must be specified to specify ha-params, ha-sync-mode or ha-promote-on-shutdown"),
    ({"ha-mode": "all", "ha-sync-mode": "eager"},
     'ha-sync-mode must be "manual" or "automatic", got <<"eager">>'),
    ({"ha-mode": "all", "ha-sync-batch-size": 10},
     '[{<<"ha-sync-batch-size">>,10}] are not recognised policy settings'),
    ({"ha-mode": "all", "ha-promote-on-failure": "always"},
     '[{<<"ha-promote-on-failure">>,<<"always">>}] are not recognised policy settings'),
    ({"ha-mode": "all", "ha-promote-on-shutdown": "always"},
     '[{<<"ha-promote-on-shutdown">>,<<"always">>}] are not recognised policy settings'),
])
def test_ha_policy_keys_are_refused_with_rabbitmq_texts(definition, text):
    assert policy_refusal(definition) == text


@pytest.mark.parametrize("definition", [
    {"ha-mode": "all"}, {"ha-mode": "all", "ha-sync-mode": "automatic"},
    {"ha-mode": "exactly", "ha-params": 2, "ha-sync-mode": "manual"},
    {"ha-mode": "exactly", "ha-params": 1}, {"ha-mode": "exactly", "ha-params": 3},
    {"ha-mode": "nodes", "ha-params": ["leveret@node1"]},
    {"ha-mode": "nodes", "ha-params": ["leveret@node2", "rabbit@elsewhere"]}])
def test_valid_ha_policies_are_accepted(definition):
    policies.validate("p", ".*", definition, 0, "queues")


def test_an_operator_policy_takes_no_ha_key():
    with pytest.raises(ChannelError) as ei:
        policies.validate("o", ".*", {"ha-mode": "all"}, 0, "queues", operator=True)
    assert "are not recognised policy settings" in ei.value.text


def argument_refusal(args) -> str:
    with pytest.raises(ChannelError) as ei:
        queue_args.validate(args, "q", "/")
    assert ei.value.reply_code == 406
    return ei.value.text


@pytest.mark.parametrize("args, key, text", [
    ({"x-ha-mode": "banana"}, "x-ha-mode", "unsupported x-ha-mode value 'banana'"),
    ({"x-ha-mode": "exactly", "x-ha-params": 0}, "x-ha-params",
     'ha-mode=\\"exactly\\" takes an integer, 0 given'),
    ({"x-ha-mode": "exactly", "x-ha-params": "banana"}, "x-ha-params",
     'ha-mode=\\"exactly\\" takes an integer, <<\\"banana\\">> given'),
    ({"x-ha-mode": "exactly"}, "x-ha-mode", 'ha-mode=\\"exactly\\" takes an integer, none given'),
    ({"x-ha-mode": "nodes"}, "x-ha-mode", 'ha-mode=\\"nodes\\" takes a list, none given'),
    ({"x-ha-mode": "nodes", "x-ha-params": []}, "x-ha-params",
     'ha-mode=\\"nodes\\" list must be non-empty'),
    ({"x-ha-mode": "nodes", "x-ha-params": ["leveret@node1", 3]}, "x-ha-params",
     'ha-mode=\\"nodes\\" takes a list of strings, [3] was not a string'),
    ({"x-ha-mode": "all", "x-ha-params": 2}, "x-ha-params",
     'ha-mode=\\"all\\" does not take parameters'),
    ({"x-ha-params": 2}, "x-ha-params", "x-ha-mode must be specified to specify x-ha-params"),
])
def test_ha_arguments_are_refused_with_the_policy_texts(args, key, text):
    assert argument_refusal(args) == (f"PRECONDITION_FAILED - invalid arg '{key}' for queue "
                                      f"'q' in vhost '/': \"{text}\"")


@pytest.mark.parametrize("args", [
    {"x-ha-mode": "all"}, {"x-ha-mode": "exactly", "x-ha-params": 2},
    {"x-ha-mode": "nodes", "x-ha-params": ["leveret@node2"]}])
def test_valid_ha_arguments_are_accepted(args):
    queue_args.validate(args, "q", "/")


# --- where the mirrors go (suggested_queue_nodes/5) ---------------------------------------------
UP = ["m1", "m2", "m3", "m4"]
NAMES = {"m1": "n1", "m2": "n2", "m3": "n3", "m4": "n4"}


def mirrors(mode, params=None, home="m1", current=(), up=UP):
    return mirroring.mirror_members(mode, params, home, list(current), up, NAMES)


def test_all_mirrors_on_every_other_running_member():
    assert mirrors("all") == ["m2", "m3", "m4"]
    assert mirrors("all", up=["m1", "m3"]) == ["m3"]


def test_exactly_counts_the_master_and_keeps_the_oldest_mirrors():
    assert mirrors("exactly", 2) == ["m2"]
    assert mirrors("exactly", 1) == []
    assert mirrors("exactly", 3, current=["m4"]) == ["m4", "m2"]
    assert mirrors("exactly", 2, current=["m4", "m3"]) == ["m4"]
    assert mirrors("exactly", 9) == ["m2", "m3", "m4"]


def test_nodes_mirrors_exactly_on_the_listed_running_members():
    assert mirrors("nodes", ["n2", "n4"]) == ["m2", "m4"]
    assert mirrors("nodes", ["n1", "n3"]) == ["m3"]            # the master is listed: stays
    assert mirrors("nodes", ["n3"]) == ["m3"]                  # not listed: stays too
    assert mirrors("nodes", ["n2", "elsewhere"]) == ["m2"]     # not a member: left out
    assert mirrors("nodes", ["n2", "n3"], up=["m1", "m3"]) == ["m3"]  # m2 down
    assert mirrors("nodes", ["n2", "n3"], current=["m3", "m4"]) == ["m3", "m2"]


def test_an_invalid_mode_or_params_gives_no_mirrors_rather_than_failing():
    assert mirrors("exactly", "banana") == []
    assert mirrors("exactly", 0) == []
    assert mirrors("nodes", "n2") == []
    assert mirrors(None) == [] and mirrors("banana") == []
