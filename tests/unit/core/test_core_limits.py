"""Vhost and user limits (actors/core/limits.py): validation as rabbit_parameter_validation,
refusals with rabbit_reader's / rabbit_amqqueue's texts. Behaviour: R3."""
from __future__ import annotations

import pytest

from actors.core import limits
from actors.core.errors import ChannelError, ConnectionError_


def test_validation():
    assert limits.validate("vhost", {"max-connections": 5, "max-queues": -1}) == \
        {"max-connections": 5, "max-queues": -1}
    assert limits.validate("user", {"max-channels": 0}) == {"max-channels": 0}
    with pytest.raises(ChannelError) as ei:
        limits.validate("vhost", {"max-queues": "x"})
    assert 'max-queues should be a number, actually was <<"x">>' in ei.value.text
    with pytest.raises(ChannelError) as ei:
        limits.validate("user", {"max-queues": 1})
    assert 'Unrecognised terms [{<<"max-queues">>,1}] in user-limits' in ei.value.text
    with pytest.raises(ChannelError):
        limits.validate("vhost", [1])


def test_negative_means_no_limit_and_zero_allows_none():
    assert limits.limit({"max-queues": -1}, "max-queues") is None
    assert limits.limit({"max-queues": 0}, "max-queues") == 0
    assert limits.limit(None, "max-queues") is None
    limits.check_queue_limit({"max-queues": -1}, 100, "q", "/")
    with pytest.raises(ChannelError) as ei:
        limits.check_queue_limit({"max-queues": 0}, 0, "q", "/")
    assert ei.value.text == ("PRECONDITION_FAILED - cannot declare queue 'q': queue limit in "
                             "vhost '/' (0) is reached")


def test_connection_and_channel_refusals__R3():
    limits.check_vhost_connections({"max-connections": 2}, 1, "/", "u")
    with pytest.raises(ConnectionError_) as ei:
        limits.check_vhost_connections({"max-connections": 2}, 2, "/", "u")
    assert (ei.value.reply_code, ei.value.text) == (530, "NOT_ALLOWED - access to vhost '/' "
                                                         "refused for user 'u': connection "
                                                         "limit (2) is reached")
    with pytest.raises(ConnectionError_) as ei:
        limits.check_user_connections({"max-connections": 1}, 1, "u")
    assert ei.value.text == ("NOT_ALLOWED - Connection refused for user 'u': user connection "
                             "limit (1) is reached")
    limits.check_user_channels({"max-channels": 3}, 2, "u")
    with pytest.raises(ConnectionError_) as ei:
        limits.check_user_channels({"max-channels": 3}, 3, "u")
    assert ei.value.text == ("NOT_ALLOWED - number of channels opened for user 'u' has reached "
                             "the maximum allowed user limit of (3)")
