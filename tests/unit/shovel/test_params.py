"""A shovel parameter's validation, with RabbitMQ 3.10's texts in rabbit_runtime_parameters'
order (rabbit_shovel_parameters.erl, rabbit_parameter_validation.erl), and its parsed form."""

from __future__ import annotations

import pytest

from actors.core.errors import ChannelError
from actors.shovel import params

OK = {"src-uri": "amqp://u:p@h1:5672/%2F", "src-queue": "a",
      "dest-uri": "amqp://u:p@h2", "dest-exchange": "x"}


def test_a_complete_value_is_valid():
    assert params.errors("s", OK) == []
    params.validate("s", OK)


def test_missing_keys_name_the_shovel_last_constraint_first():
    assert params.errors("s", {}) == [
        "Must specify 'src-exchange' or 'src-queue'",
        'Key "dest-uri" not found in s',
        'Key "src-uri" not found in s']


def test_unknown_keys_come_first_among_the_key_checks_as_erlang_terms():
    assert params.errors("s", dict(OK, foo=1, bar="b")) == [
        'Unrecognised terms [{<<"foo">>,1},{<<"bar">>,<<"b">>}] in s']


def test_enum_number_boolean_and_binary_texts():
    errs = params.errors("s", dict(OK, **{"ack-mode": "sometimes", "reconnect-delay": "5",
                                          "dest-add-forward-headers": "yes",
                                          "dest-exchange": 7}))
    assert errs == [
        'dest-add-forward-headers should be boolean, actually was <<"yes">>',
        "dest-exchange should be binary, actually was 7",
        'ack-mode should be one of [<<"no-ack">>,<<"on-publish">>,<<"on-confirm">>], '
        'actually was <<"sometimes">>',
        'reconnect-delay should be a number, actually was <<"5">>']


def test_both_sources_both_destinations_and_no_ack_with_a_count():
    value = dict(OK, **{"src-exchange": "e", "dest-queue": "q", "ack-mode": "no-ack",
                        "src-delete-after": 10})
    assert params.errors("s", value)[:3] == [
        "Cannot specify 'src-exchange' and 'src-queue'",
        "Cannot specify 'no-ack' and numerical 'delete-after'",
        "Cannot specify 'dest-exchange' and 'dest-queue'"]


@pytest.mark.parametrize("value", ["never", "queue-length", 0, 12])
def test_delete_after_values_accepted(value):
    assert params.errors("s", dict(OK, **{"src-delete-after": value})) == []


@pytest.mark.parametrize("value, shown", [(-1, "-1"), ("soon", '<<"soon">>'), (1.5, "1.5")])
def test_delete_after_values_refused(value, shown):
    assert params.errors("s", dict(OK, **{"src-delete-after": value})) == [
        'src-delete-after should be a number greater than or equal to 0, "never" or '
        f'"queue-length", actually was {shown}']


def test_uri_errors_are_amqp_uri_reasons_and_a_list_is_checked_item_by_item():
    errs = params.errors("s", dict(OK, **{"src-uri": ["amqp://h", "http://h"],
                                          "dest-uri": 5}))
    assert errs == ["dest-uri should be list, actually was 5",
                    '"http://h" not a valid URI: {{unexpected_uri_scheme,"http"},"http://h"}']


def test_a_hostless_direct_uri_is_refused_not_ignored():
    errs = params.errors("s", dict(OK, **{"dest-uri": "amqp://"}))
    assert len(errs) == 1 and errs[0].startswith(
        '"amqp://" not a valid URI: {{direct_connection_not_supported,')


def test_an_unknown_uri_query_key_is_refused():
    errs = params.errors("s", dict(OK, **{"dest-uri": "amqp://h?auth_mechanism=external"}))
    assert errs == ['"amqp://h?auth_mechanism=external" not a valid URI: '
                    '{{parameter_unconfigurable_in_query,auth_mechanism,"external"},'
                    '"amqp://h?auth_mechanism=external"}']


def test_unimplemented_keys_and_amqp10_are_refused_clearly():
    errs = params.errors("s", dict(OK, **{"src-queue-args": {"x-queue-type": "quorum"},
                                          "dest-protocol": "amqp10"}))
    assert "src-queue-args is not supported by Leveret's shovels" in errs
    assert "dest-protocol amqp10 is not supported by Leveret's shovels (amqp091 only)" in errs


def test_publish_properties_are_checked_as_a_proplist():
    errs = params.errors("s", dict(OK, **{"dest-publish-properties": {
        "delivery_mode": "2", "colour": "red"}}))
    assert errs == [
        'Unrecognised terms [{<<"colour">>,<<"red">>}] in dest-publish-properties',
        'delivery_mode should be a number, actually was <<"2">>']


def test_dest_queue_longer_than_255_bytes():
    value = {k: v for k, v in OK.items() if k != "dest-exchange"}
    assert params.errors("s", dict(value, **{"dest-queue": "é" * 128})) == [
        "dest-queue should be less than 255 bytes, actually was 256"]


def test_validate_raises_every_error_as_rabbitmqctl_prints_them():
    with pytest.raises(ChannelError) as e:
        params.validate("s", {"src-queue": "a", "dest-uri": "amqp://h"})
    assert e.value.reply_code == 406
    assert e.value.text.endswith('Validation failed\n\nKey "src-uri" not found in s\n')


def test_parse_fills_rabbitmq_defaults():
    spec = params.parse("/", "s", OK)
    assert (spec.ack_mode, spec.prefetch, spec.reconnect_delay, spec.delete_after) == \
        ("on-confirm", 1000, 5, "never")
    assert [u.host for u in spec.src_uris] == ["h1"] and spec.dest_uris[0].user == "u"
    assert (spec.src_queue, spec.dest_exchange, spec.dest_queue) == ("a", "x", None)


def test_parse_takes_the_legacy_names_when_the_new_are_absent():
    spec = params.parse("v", "s", dict(OK, **{"prefetch-count": 10, "delete-after": 3,
                                               "add-forward-headers": True,
                                               "publish-properties": {"priority": 3}}))
    assert (spec.prefetch, spec.delete_after, spec.forward_headers) == (10, 3, True)
    assert spec.publish_properties == (("priority", 3),)
    spec = params.parse("v", "s", dict(OK, **{"prefetch-count": 10, "src-prefetch-count": 20}))
    assert spec.prefetch == 20
