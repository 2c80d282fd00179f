"""Stream queues' answers against RabbitMQ 3.10.8's, captured by tools/stream_probes.py.

The same probes (declare errors, consume refusals, basic.get, queue.purge, the messages and
``x-stream-offset`` headers each offset spec delivers, nack and reject) run against Leveret and
must answer as RabbitMQ did when tests/data/rabbitmq-3.10-streams.json was captured
(``python -m tools.stream_probes``). Where Leveret answers otherwise on purpose, KNOWN says so
and why (docs/streams.md).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tools.stream_probes import OUT, Probe, probes

pytestmark = pytest.mark.skipif(bool(os.environ.get("LEVERET_TEST_URL")),
                                reason="compares Leveret's own answers with RabbitMQ's")

# probe -> Leveret's own answer, where it differs from RabbitMQ 3.10.8's on purpose
KNOWN = {
    # RabbitMQ 3.10.8 crashes the channel process on an interval without digits
    # (list_to_integer("") in check_max_age/1) and closes the connection with a bare 541;
    # Leveret gives the 406 its validator meant to give
    "consume_bad_offset": {
        "closed": "channel", "code": 406,
        "text": "PRECONDITION_FAILED - invalid arg 'x-stream-offset' for queue "
                "'probe-c4' in vhost '/': {invalid_stream_offset_arg,{longstr,<<\"abc\">>}}"},
    # RabbitMQ 3.10.8's channel crashes on basic.recover of a stream's delivery (541, the
    # connection closed); Leveret closes it with the 540 it gives nack and reject
    "recover": {
        "closed": "connection", "code": 540,
        "text": "NOT_IMPLEMENTED - basic.recover not supported by stream queues queue "
                "'probe-settle-recover' in vhost '/'"},
}


@pytest.fixture(scope="module")
def captured():
    return json.loads(Path(OUT).read_text())


@pytest.fixture(scope="module")
def answers(broker):
    return probes(Probe(broker.url, "probe"))


def test_capture_is_rabbitmq_3_10(captured):
    assert captured["_version"] == "RabbitMQ 3.10.8"


@pytest.mark.parametrize("name", sorted(json.loads(Path(OUT).read_text()).keys() - {"_version"}))
def test_stream_answer_matches_rabbitmq(answers, captured, name):
    assert answers[name] == KNOWN.get(name, captured[name])
