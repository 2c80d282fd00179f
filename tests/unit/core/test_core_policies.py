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
