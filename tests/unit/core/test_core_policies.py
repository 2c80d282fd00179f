"""Policies: validation and the effective definition of a queue (rabbit_policy)."""
from __future__ import annotations

import pytest

from actors.core import policies
from actors.core.errors import ChannelError


def pol(pattern, definition, priority=0, apply_to="all", vhost="/"):
    return {"vhost": vhost, "pattern": pattern, "definition": definition,
            "priority": priority, "apply_to": apply_to}


def test_highest_priority_match_wins_and_patterns_search_anywhere():
    ps = {("/", "low"): pol("^orders", {"confirm-on": "ack"}, 1),
          ("/", "high"): pol("orders", {"confirm-on": "ack-lite"}, 5),
          ("/", "other"): pol("^x", {"confirm-on": "enqueue"}, 9)}
    assert policies.effective(ps, "/", "orders.eu") == {"confirm-on": "ack-lite"}
    assert policies.effective(ps, "/", "big-orders") == {"confirm-on": "ack-lite"}
    assert policies.effective(ps, "/", "invoices") == {}


def test_apply_to_and_vhost_are_respected():
    ps = {("/", "ex"): pol(".*", {"confirm-on": "ack"}, apply_to="exchanges"),
          ("v2", "q"): pol(".*", {"confirm-on": "ack"}, vhost="v2")}
    assert policies.effective(ps, "/", "q1") == {}
    assert policies.effective(ps, "v2", "q1") == {"confirm-on": "ack"}


def test_equal_priorities_choose_by_name():
    ps = {("/", "b"): pol(".*", {"confirm-on": "ack"}), ("/", "a"): pol(".*", {"confirm-on": "ack-lite"})}
    assert policies.effective(ps, "/", "q") == {"confirm-on": "ack-lite"}


@pytest.mark.parametrize("args", [
    ("", ".*", {"confirm-on": "ack"}, 0, "all"),
    ("p", "(", {"confirm-on": "ack"}, 0, "all"),
    ("p", ".*", {"confirm-on": "never"}, 0, "all"),
    ("p", ".*", {"no-such-key": 1}, 0, "all"),
    ("p", ".*", {}, 0, "all"),
    ("p", ".*", {"confirm-on": "ack"}, 0, "bindings"),
])
def test_invalid_policies_are_refused(args):
    with pytest.raises(ChannelError) as ei:
        policies.validate(*args)
    assert ei.value.reply_code == 406


# --- RabbitMQ's keys (rabbit_policies:validate_policy0/2) ------------------------------------

def refusal(*args, **kw) -> str:
    with pytest.raises(ChannelError) as ei:
        policies.validate(*args, **kw)
    assert ei.value.reply_code == 406
    return ei.value.text


@pytest.mark.parametrize("definition, text", [
    ({"message-ttl": -1}, "-1 is not a valid message TTL"),
    ({"message-ttl": 1.5}, "1.5 is not a valid message TTL"),
    ({"expires": 0}, "0 is not a valid queue expiry"),
    ({"max-length": "5"}, '<<"5">> is not a valid maximum length'),
    ({"max-length-bytes": -3}, "-3 is not a valid maximum length in bytes"),
    ({"overflow": "drop-tail"}, '<<"drop-tail">> is not a valid overflow value'),
    ({"queue-mode": "eager"}, '<<"eager">> is not a valid queue-mode value'),
    ({"dead-letter-exchange": 3}, "3 is not a valid dead letter exchange name"),
    ({"dead-letter-routing-key": True}, "true is not a valid dead letter routing key"),
    ({"alternate-exchange": ["a"]}, '[<<"a">>] is not a valid alternate exchange name'),
    ({"x-max-length": 1}, '[{<<"x-max-length">>,1}] are not recognised policy settings'),
    ({"initial-cluster-size": -1}, "-1 is not a valid cluster size"),
    ({"queue-leader-locator": "nearest"},
     '<<"nearest">> is not a valid queue leader locator value (Leveret places leaders '
     'client-local only)'),
    # RabbitMQ takes balanced; Leveret refuses it rather than accept and ignore it
    ({"queue-leader-locator": "balanced"},
     '<<"balanced">> is not a valid queue leader locator value (Leveret places leaders '
     'client-local only)'),
])
def test_values_are_validated_with_rabbitmq_texts(definition, text):
    assert refusal("p", ".*", definition, 0, "all") == \
        f"PRECONDITION_FAILED - Validation failed\n\n{text}\n"


def test_every_classic_key_is_accepted():
    policies.validate("p", ".*", {
        "message-ttl": 0, "expires": 1, "max-length": 0, "max-length-bytes": 10,
        "overflow": "reject-publish-dlx", "dead-letter-exchange": "dlx",
        "dead-letter-routing-key": "rk", "queue-mode": "lazy", "alternate-exchange": "ae",
        "confirm-on": "ack", "ha-mode": "exactly", "ha-params": 2,
        "ha-sync-mode": "automatic"}, 3, "queues")


def test_the_stream_cluster_keys_are_accepted():
    policies.validate("p", ".*", {"initial-cluster-size": 2,
                                  "queue-leader-locator": "client-local"}, 0, "queues")


def test_operator_policies_take_only_the_numeric_keys():
    policies.validate("o", ".*", {"expires": 5, "message-ttl": 1, "max-length": 2,
                                  "max-length-bytes": 3}, 0, "queues", operator=True)
    assert "are not recognised policy settings" in refusal(
        "o", ".*", {"max-length": 1, "dead-letter-exchange": "x"}, 0, "all", operator=True)
    assert "apply-to 'bindings' unrecognised" in refusal("o", ".*", {"max-length": 1}, 0,
                                                         "bindings", operator=True)


def test_policy_and_operator_policy_merge_with_the_smaller_value():
    ps = {("/", "p"): pol(".*", {"max-length": 10, "message-ttl": 50, "overflow": "reject-publish",
                                 "confirm-on": "ack"})}
    ops = {("/", "o"): pol(".*", {"max-length": 3, "message-ttl": 500, "expires": 9000})}
    assert policies.effective(ps, "/", "q", "queues", ops) == {
        "max-length": 3, "message-ttl": 50, "expires": 9000, "overflow": "reject-publish",
        "confirm-on": "ack"}
    assert policies.effective({}, "/", "q", "queues", ops) == ops[("/", "o")]["definition"]
    assert policies.merge(None, None) == {}


def test_queue_settings_argument_wins_except_for_the_min_keys():
    args = {"x-max-length": 5, "x-message-ttl": 100, "x-dead-letter-exchange": "mine",
            "x-overflow": "drop-head", "x-max-priority": 3}
    pol_def = {"max-length": 2, "message-ttl": 1000, "dead-letter-exchange": "theirs",
               "overflow": "reject-publish", "expires": 60000, "max-length-bytes": 100,
               "dead-letter-routing-key": "rk", "confirm-on": "ack"}
    assert policies.queue_settings(args, pol_def) == {
        "x-max-length": 2, "x-message-ttl": 100, "x-dead-letter-exchange": "mine",
        "x-overflow": "drop-head", "x-max-priority": 3, "x-expires": 60000,
        "x-max-length-bytes": 100, "x-dead-letter-routing-key": "rk"}
    assert policies.queue_settings(None, {}) == {}


def test_alternate_exchange_argument_wins_over_policy():
    assert policies.alternate_exchange({"alternate-exchange": "a"}, {"alternate-exchange": "b"}) \
        == "a"
    assert policies.alternate_exchange({}, {"alternate-exchange": "b"}) == "b"
    assert policies.alternate_exchange(None, {}) is None
