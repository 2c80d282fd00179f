"""actors/core/routing.py: exchanges, bindings and routing as RabbitMQ 3.10 does them.

Expected results follow rabbit_exchange:route/2 and the exchange type modules; the randomised
topologies were also checked against a RabbitMQ 3.10.8 node while writing this module.
"""

import datetime
import decimal
import random

import msgpack
import pytest

from actors.core.errors import ChannelError, ConnectionError_
from actors.core.routing import (
    INTERNAL_USER, PREDECLARED_EXCHANGES, Binding, Router, change_add_queue, change_add_vhost,
    change_bind, change_declare_exchange, change_delete_exchange, change_remove_queue, change_remove_vhost,
    change_unbind, check_exchange_type, header_routes, headers_match, pack_table,
    split_topic_key, topic_matches, unpack_table, validate_binding)


def make(*queues, vhost="/"):
    r = Router()
    r.add_vhost(vhost)
    for q in queues:
        r.add_queue(vhost, q)
    return r


# ------------------------------------------------------------------------------ vhosts


def test_add_vhost_predeclares_exchanges():
    r = Router()
    assert r.add_vhost("/")
    assert not r.add_vhost("/")
    names = {n for n, _, _ in PREDECLARED_EXCHANGES}
    assert set(r.exchanges("/")) == names == {
        "", "amq.direct", "amq.fanout", "amq.topic", "amq.headers", "amq.match",
        "amq.rabbitmq.trace"}
    assert r.exchange("/", "").type == "direct"
    assert r.exchange("/", "amq.match").type == "headers"
    assert r.exchange("/", "amq.headers").type == "headers"
    trace = r.exchange("/", "amq.rabbitmq.trace")
    assert trace.type == "topic" and trace.internal and trace.durable
    assert all(x.durable and not x.auto_delete for x in r.exchanges("/").values())
    assert not r.exchange("/", "amq.direct").internal


def test_remove_vhost():
    r = make("q")
    assert r.remove_vhost("/")
    assert not r.remove_vhost("/")
    assert r.route("/", "", "q") == frozenset()
    assert r.exchange("/", "amq.direct") is None


def test_vhosts_are_separate():
    r = make("q")
    r.add_vhost("v2")
    r.bind("/", "amq.direct", "queue", "q", "k")
    assert r.route("v2", "amq.direct", "k") == frozenset()
    assert r.route("v2", "", "q") == frozenset()
    assert r.route("/", "amq.direct", "k") == {"q"}


# ---------------------------------------------------------------------------- exchanges


def test_declare_exchange_fields_and_alternate():
    r = make()
    assert r.declare_exchange("/", "e", "fanout", False, True, True,
                              {"alternate-exchange": "ae", "foo": 1})
    x = r.exchange("/", "e")
    assert (x.vhost, x.name, x.type, x.durable, x.auto_delete, x.internal) == \
        ("/", "e", "fanout", False, True, True)
    assert x.arguments == {"alternate-exchange": "ae", "foo": 1}
    assert x.alternate_exchange == "ae"
    # redeclare: no change
    assert not r.declare_exchange("/", "e", "direct")
    assert r.exchange("/", "e").type == "fanout"
    r.declare_exchange("/", "f", "direct", arguments={"alternate-exchange": 5})
    assert r.exchange("/", "f").alternate_exchange is None


def test_declare_exchange_unknown_type():
    r = make()
    with pytest.raises(ValueError):
        r.declare_exchange("/", "e", "x-foo")
    with pytest.raises(ConnectionError_) as ei:
        check_exchange_type("x-foo")
    assert ei.value.reply_code == 503
    assert ei.value.text == "COMMAND_INVALID - unknown exchange type 'x-foo'"
    assert check_exchange_type("topic") == "topic"


def test_delete_exchange_removes_bindings_both_ways():
    r = make("q")
    r.declare_exchange("/", "a", "fanout")
    r.declare_exchange("/", "b", "fanout")
    r.bind("/", "a", "exchange", "b", "")
    r.bind("/", "b", "queue", "q", "")
    r.bind("/", "a", "queue", "q", "")
    assert r.route("/", "a", "") == {"q"}
    assert r.delete_exchange("/", "b") == []
    assert r.bindings_of_source("/", "a") == [Binding("a", "queue", "q", "", {})]
    assert r.bindings_of_destination("/", "exchange", "b") == []
    assert r.delete_exchange("/", "b") is None
    assert r.delete_exchange("/", "a") == []
    assert r.list_bindings("/") == []


def test_delete_exchange_reports_auto_delete_sources():
    r = make()
    r.declare_exchange("/", "src", "fanout", auto_delete=True)
    r.declare_exchange("/", "dst", "fanout")
    r.bind("/", "src", "exchange", "dst", "")
    assert r.delete_exchange("/", "dst") == ["src"]
    assert r.exchange("/", "src") is not None  # the caller deletes it


def test_delete_exchange_bound_to_itself():
    r = make("q")
    r.declare_exchange("/", "x", "fanout")
    r.bind("/", "x", "exchange", "x", "")
    r.bind("/", "x", "queue", "q", "")
    assert r.route("/", "x", "") == {"q"}
    assert r.delete_exchange("/", "x") == []
    assert r.bindings_of_destination("/", "queue", "q") == []


# ----------------------------------------------------------------------------- bindings


def test_bind_identity_and_unbind():
    r = make("q")
    assert r.bind("/", "amq.direct", "queue", "q", "k", {"a": 1, "b": "x"})
    # same table in another order: same binding (RabbitMQ sorts binding arguments)
    assert not r.bind("/", "amq.direct", "queue", "q", "k", {"b": "x", "a": 1})
    # 1 vs 1.0 vs true are different arguments
    assert r.bind("/", "amq.direct", "queue", "q", "k", {"a": True, "b": "x"})
    assert r.bind("/", "amq.direct", "queue", "q", "k", {"a": 1.0, "b": "x"})
    assert r.bind("/", "amq.direct", "queue", "q", "k", {"a": 1, "b": b"x"})
    assert r.bind("/", "amq.direct", "queue", "q", "k")
    assert len(r.bindings_of_source("/", "amq.direct")) == 5
    assert r.has_binding("/", "amq.direct", "queue", "q", "k", {"b": "x", "a": 1})
    assert r.unbind("/", "amq.direct", "queue", "q", "k", {"b": "x", "a": 1})
    assert not r.unbind("/", "amq.direct", "queue", "q", "k", {"b": "x", "a": 1})
    # the destination is still bound with the other bindings
    assert r.route("/", "amq.direct", "k") == {"q"}
    for b in r.bindings_of_source("/", "amq.direct"):
        assert r.unbind("/", b.source, b.dest_kind, b.dest, b.routing_key, b.arguments)
    assert r.route("/", "amq.direct", "k") == frozenset()
    assert not r.has_bindings_from("/", "amq.direct")


def test_bind_errors():
    r = make("q")
    with pytest.raises(ValueError):
        r.bind("/", "", "queue", "q", "q")
    with pytest.raises(KeyError):
        r.bind("/", "nope", "queue", "q", "k")
    with pytest.raises(KeyError):
        r.bind("v9", "amq.direct", "queue", "q", "k")
    with pytest.raises(ValueError):
        r.bind("/", "amq.direct", "topic", "q", "k")
    assert not r.unbind("/", "nope", "queue", "q", "k")
    assert not r.unbind("v9", "amq.direct", "queue", "q", "k")


def test_remove_queue_removes_its_bindings_and_reports_auto_delete():
    r = make("q1", "q2")
    r.declare_exchange("/", "ad", "direct", auto_delete=True)
    r.declare_exchange("/", "ad2", "direct", auto_delete=True)
    r.bind("/", "ad", "queue", "q1", "a")
    r.bind("/", "ad", "queue", "q1", "b")
    r.bind("/", "ad2", "queue", "q1", "a")
    r.bind("/", "ad2", "queue", "q2", "a")
    r.bind("/", "amq.direct", "queue", "q1", "a")
    assert r.remove_queue("/", "q1") == ["ad"]
    assert not r.has_queue("/", "q1")
    assert r.route("/", "ad2", "a") == {"q2"}
    assert r.bindings_of_destination("/", "queue", "q1") == []
    assert r.route("/", "", "q1") == frozenset()
    assert r.remove_queue("/", "q1") == []


def test_has_bindings_from_counts_only_source_side():
    r = make("q")
    r.declare_exchange("/", "a", "fanout")
    r.declare_exchange("/", "b", "fanout")
    r.bind("/", "a", "exchange", "b", "")
    assert r.has_bindings_from("/", "a")
    assert not r.has_bindings_from("/", "b")
    assert not r.has_bindings_from("/", "nope")


def test_list_bindings_sorted_and_implicit():
    r = make("qb", "qa")
    r.declare_exchange("/", "x", "direct")
    r.bind("/", "x", "queue", "qb", "k2")
    r.bind("/", "amq.topic", "queue", "qa", "z")
    r.bind("/", "x", "queue", "qa", "k1")
    r.bind("/", "x", "exchange", "amq.topic", "k1")
    got = [(b.source, b.routing_key, b.dest_kind, b.dest) for b in r.list_bindings("/")]
    assert got == [("amq.topic", "z", "queue", "qa"), ("x", "k1", "exchange", "amq.topic"),
                   ("x", "k1", "queue", "qa"), ("x", "k2", "queue", "qb")]
    imp = r.list_bindings("/", implicit=True)
    assert imp[:2] == [Binding("", "queue", "qa", "qa", {}), Binding("", "queue", "qb", "qb", {})]
    assert len(imp) == 6
    assert r.list_bindings("nope") == []


# ------------------------------------------------------------------------------ direct/fanout


def test_default_exchange():
    r = make("q1")
    assert r.route("/", "", "q1") == {"q1"}
    assert r.route("/", "", "q2") == frozenset()
    r.add_queue("/", "q2")
    assert r.route("/", "", "q2") == {"q2"}  # cache invalidated by add_queue
    r.remove_queue("/", "q2")
    assert r.route("/", "", "q2") == frozenset()
    assert r.route("/", "", ["q1", "q2", "q1"]) == {"q1"}
    assert r.route("/", "", "amq.rabbitmq.reply-to.abc") == frozenset()


def test_direct():
    r = make("q1", "q2", "q3")
    r.bind("/", "amq.direct", "queue", "q1", "a")
    r.bind("/", "amq.direct", "queue", "q2", "a")
    r.bind("/", "amq.direct", "queue", "q3", "b")
    r.bind("/", "amq.direct", "queue", "q3", "")
    assert r.route("/", "amq.direct", "a") == {"q1", "q2"}
    assert r.route("/", "amq.direct", "b") == {"q3"}
    assert r.route("/", "amq.direct", "") == {"q3"}
    assert r.route("/", "amq.direct", "A") == frozenset()
    assert r.route("/", "amq.direct", ["a", "b"]) == {"q1", "q2", "q3"}  # CC/BCC
    assert r.route("/", "nope", "a") == frozenset()


def test_fanout_ignores_key():
    r = make("q1", "q2")
    r.bind("/", "amq.fanout", "queue", "q1", "x")
    r.bind("/", "amq.fanout", "queue", "q2", "")
    assert r.route("/", "amq.fanout", "whatever") == {"q1", "q2"}
    assert r.route("/", "amq.fanout", "") == {"q1", "q2"}


# ------------------------------------------------------------------------------------ topic


def test_split_topic_key():
    assert split_topic_key("") == []
    assert split_topic_key("a") == ["a"]
    assert split_topic_key("a.b") == ["a", "b"]
    assert split_topic_key("a..b") == ["a", "", "b"]
    assert split_topic_key(".") == ["", ""]
    assert split_topic_key("a.") == ["a", ""]


@pytest.mark.parametrize("pattern,key,expected", [
    ("#", "", True), ("#", "a", True), ("#", "a.b.c", True), ("#", ".", True),
    ("*", "", False), ("*", "a", True), ("*", "a.b", False), ("*", ".", False),
    ("", "", True), ("", "a", False), ("", ".", False),
    ("a", "a", True), ("a", "b", False), ("a", "a.b", False),
    ("a.*", "a.b", True), ("a.*", "a", False), ("a.*", "a.b.c", False), ("a.*", "a.", True),
    ("a.#", "a", True), ("a.#", "a.b", True), ("a.#", "a.b.c", True), ("a.#", "b.a", False),
    ("a.#", "ab", False),
    ("#.a", "a", True), ("#.a", "b.a", True), ("#.a", "b.c.a", True), ("#.a", "a.b", False),
    ("#.a", "", False),
    ("a.#.b", "a.b", True), ("a.#.b", "a.x.b", True), ("a.#.b", "a.x.y.b", True),
    ("a.#.b", "a.b.b", True), ("a.#.b", "a.x", False), ("a.#.b", "b.a.b", False),
    ("#.#", "", True), ("#.#", "a.b", True), ("#.*", "", False), ("#.*", "a", True),
    ("*.#", "a", True), ("*.#", "", False), ("*.*", "a.b", True), ("*.*", "a", False),
    ("*.*", "a.b.c", False), ("a.*.#", "a.b", True), ("a.*.#", "a", False),
    ("#.b.#", "b", True), ("#.b.#", "a.b.c", True), ("#.b.#", "a.c", False),
    ("a..b", "a..b", True), ("a.*.b", "a..b", True), ("a.#", "a..", True),
    ("*", "*", True), ("a.*", "a.#", True),  # literal wildcard characters in keys
    ("#", "#", True), ("b", "*", False),
    ("a.#.#.b", "a.b", True), ("a.#.#.b", "a.x.y.z.b", True),
])
def test_topic_patterns(pattern, key, expected):
    assert topic_matches(pattern, key) is expected
    r = make("q")
    r.bind("/", "amq.topic", "queue", "q", pattern)
    assert (r.route("/", "amq.topic", key) == {"q"}) is expected


def _regex_topic(pattern, key):
    """Independent reference: a direct recursive reading of the AMQP topic semantics."""
    pw = split_topic_key(pattern)
    kw = split_topic_key(key)

    def m(i, j):
        if i == len(pw):
            return j == len(kw)
        if pw[i] == "#":
            return any(m(i + 1, jj) for jj in range(j, len(kw) + 1))
        if j == len(kw):
            return False
        return (pw[i] == "*" or pw[i] == kw[j]) and m(i + 1, j + 1)
    return m(0, 0)


def test_topic_against_reference_random():
    rnd = random.Random(7)
    for _ in range(3000):
        pattern = ".".join(rnd.choice(["a", "b", "*", "#", ""]) for _ in range(rnd.randrange(5)))
        key = ".".join(rnd.choice(["a", "b", ""]) for _ in range(rnd.randrange(6)))
        assert topic_matches(pattern, key) == _regex_topic(pattern, key), (pattern, key)


def test_topic_many_bindings_and_cache_invalidation():
    r = make(*[f"q{i}" for i in range(5)])
    r.bind("/", "amq.topic", "queue", "q0", "stock.#")
    r.bind("/", "amq.topic", "queue", "q1", "*.usd.*")
    r.bind("/", "amq.topic", "queue", "q2", "stock.usd.nyse")
    r.bind("/", "amq.topic", "queue", "q3", "#")
    assert r.route("/", "amq.topic", "stock.usd.nyse") == {"q0", "q1", "q2", "q3"}
    assert r.route("/", "amq.topic", "stock.eur.nyse") == {"q0", "q3"}
    r.unbind("/", "amq.topic", "queue", "q3", "#")
    assert r.route("/", "amq.topic", "stock.eur.nyse") == {"q0"}
    r.bind("/", "amq.topic", "queue", "q4", "*.eur.*")
    assert r.route("/", "amq.topic", "stock.eur.nyse") == {"q0", "q4"}
    r.remove_queue("/", "q0")
    assert r.route("/", "amq.topic", "stock.eur.nyse") == {"q4"}
    # two bindings ending on the same trie node for one queue: one unbind keeps the other
    r.bind("/", "amq.topic", "queue", "q4", "*.eur.*", {"x": 1})
    r.unbind("/", "amq.topic", "queue", "q4", "*.eur.*")
    assert r.route("/", "amq.topic", "stock.eur.nyse") == {"q4"}


def test_topic_trie_pruned_on_unbind():
    r = make("q")
    r.bind("/", "amq.topic", "queue", "q", "a.b.c.d")
    r.bind("/", "amq.topic", "queue", "q", "a.b")
    r.unbind("/", "amq.topic", "queue", "q", "a.b.c.d")
    root = r._vhosts["/"].sources["amq.topic"].index
    assert list(root.children["a"].children["b"].children) == []
    r.unbind("/", "amq.topic", "queue", "q", "a.b")
    assert root.children == {}


def test_topic_pathological_hashes_are_fast():
    r = make("q")
    r.bind("/", "amq.topic", "queue", "q", ".".join(["#"] * 12) + ".z")
    key = ".".join(["a"] * 60)
    assert r.route("/", "amq.topic", key) == frozenset()
    assert r.route("/", "amq.topic", key + ".z") == {"q"}


# ---------------------------------------------------------------------------------- headers


@pytest.mark.parametrize("args,headers,expected", [
    ({}, {}, True),  # all with nothing to match: matches everything
    ({"x-match": "any"}, {"a": 1}, False),  # any with nothing to match
    ({"a": 1}, {"a": 1}, True),
    ({"a": 1}, {"a": 2}, False),
    ({"a": 1}, {}, False),
    ({"a": 1}, None, False),
    ({"a": 1, "b": 2}, {"a": 1}, False),
    ({"a": 1, "b": 2}, {"a": 1, "b": 2, "c": 3}, True),
    ({"x-match": "all", "a": 1, "b": 2}, {"a": 1, "b": 3}, False),
    ({"x-match": "any", "a": 1, "b": 2}, {"a": 1, "b": 3}, True),
    ({"x-match": "any", "a": 1, "b": 2}, {"a": 0, "b": 3}, False),
    ({"x-match": "any", "a": 1}, {}, False),
    ({"a": None}, {"a": "anything"}, True),  # void binding value: presence
    ({"a": None}, {"a": None}, True),
    ({"a": None}, {"b": 1}, False),
    ({"a": "v"}, {"a": None}, False),
    ({"a": 1}, {"a": 1.0}, True),  # Erlang ==
    ({"a": 1}, {"a": True}, False),
    ({"a": True}, {"a": 1}, False),
    ({"a": True}, {"a": True}, True),
    ({"a": "v"}, {"a": b"v"}, True),  # longstr/binary are both binaries
    ({"a": "v"}, {"a": "V"}, False),
    ({"x-foo": "bar", "a": 1}, {"a": 1}, True),  # x- keys ignored
    ({"x-foo": "bar"}, {}, True),
    ({"x-match": "any", "x-foo": "bar"}, {"x-foo": "bar"}, False),
    ({"x-match": "all-with-x", "x-foo": "bar"}, {"x-foo": "bar"}, True),
    ({"x-match": "all-with-x", "x-foo": "bar"}, {}, False),
    ({"x-match": "all-with-x", "x-foo": "bar", "a": 1}, {"x-foo": "bar", "a": 2}, False),
    ({"x-match": "any-with-x", "x-foo": "bar", "a": 1}, {"x-foo": "bar", "a": 2}, True),
    ({"x-match": "any-with-x", "x-foo": "bar"}, {"x-foo": "baz"}, False),
    ({"x-match": "foo", "a": 1}, {"a": 1}, True),  # unparseable x-match means all
    ({"x-match": b"any", "a": 1, "b": 1}, {"a": 1}, False),  # only a longstr counts
    ({"a": [1, "x"]}, {"a": [1, "x"]}, True),
    ({"a": [1, "x"]}, {"a": [1, "y"]}, False),
    ({"a": {"k": 1}}, {"a": {"k": 1}}, True),
    ({"a": decimal.Decimal("1.5")}, {"a": decimal.Decimal("1.5")}, True),
    ({"a": decimal.Decimal("1.5")}, {"a": decimal.Decimal("1.50")}, False),
    ({"a": datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc)},
     {"a": datetime.datetime(2020, 1, 1)}, True),
    # a timestamp is its seconds at the top level, {timestamp, S} inside an array or table
    ({"a": datetime.datetime.fromtimestamp(5, datetime.timezone.utc)}, {"a": 5}, True),
    ({"a": 5}, {"a": datetime.datetime.fromtimestamp(5, datetime.timezone.utc)}, True),
    ({"a": [datetime.datetime.fromtimestamp(5, datetime.timezone.utc)]}, {"a": [5]}, False),
    ({"a": {"k": datetime.datetime.fromtimestamp(5, datetime.timezone.utc)}}, {"a": {"k": 5}},
     False),
    ({"a": ["v"]}, {"a": [b"v"]}, False),  # {longstr, V} /= {binary, V}
    ({"a": [1]}, {"a": [1.0]}, False),
    ({"a": [True]}, {"a": [1]}, False),
])
def test_headers_match(args, headers, expected):
    assert headers_match(args, headers) is expected
    r = make("q")
    r.bind("/", "amq.headers", "queue", "q", "ignored", args)
    assert (r.route("/", "amq.headers", "any-key", headers) == {"q"}) is expected


def test_headers_exchange_routes_are_not_cached_by_key():
    r = make("q1", "q2")
    r.bind("/", "amq.match", "queue", "q1", "", {"k": 1})
    r.bind("/", "amq.match", "queue", "q2", "", {"k": 2})
    assert r.route("/", "amq.match", "", {"k": 1}) == {"q1"}
    assert r.route("/", "amq.match", "", {"k": 2}) == {"q2"}
    # behind an exchange-to-exchange binding too
    r.declare_exchange("/", "f", "fanout")
    r.bind("/", "f", "exchange", "amq.match", "")
    assert r.route("/", "f", "", {"k": 1}) == {"q1"}
    assert r.route("/", "f", "", {"k": 2}) == {"q2"}


def test_validate_binding_texts():
    validate_binding("headers", {"x-match": "any", "a": 1})
    validate_binding("headers", {})
    validate_binding("headers", None)
    validate_binding("direct", {"x-match": "foo"})
    cases = [
        ({"x-match": "foo"}, 'Invalid x-match field value <<"foo">>; expected all, any, '
                             'all-with-x, or any-with-x'),
        ({"x-match": 5}, "Invalid x-match field type signedint (value 5); expected longstr"),
        ({"x-match": b"any"}, 'Invalid x-match field type binary (value <<"any">>); expected '
                              'longstr'),
        ({"x-match": True}, "Invalid x-match field type bool (value true); expected longstr"),
        ({"x-match": ["a"]}, 'Invalid x-match field type array (value [{longstr,<<"a">>}]); '
                             'expected longstr'),
        ({"x-match": {"a": 1}}, 'Invalid x-match field type table (value '
                                '[{<<"a">>,signedint,1}]); expected longstr'),
    ]
    for args, text in cases:
        with pytest.raises(ChannelError) as ei:
            validate_binding("headers", args)
        assert ei.value.reply_code == 406
        assert ei.value.text == "PRECONDITION_FAILED - " + text


def test_header_routes():
    assert header_routes(None) == []
    assert header_routes({"CC": ["a", "b"], "BCC": ["c"], "x": 1}) == ["a", "b", "c"]
    assert header_routes({"CC": ["a", 5]}) == ["a"]
    assert header_routes({"CC": "a"}) == []


# ------------------------------------------------------------------- e2e and alternate exchanges


def test_exchange_to_exchange_chain():
    r = make("q1", "q2")
    r.declare_exchange("/", "e1", "topic")
    r.declare_exchange("/", "e2", "direct")
    r.declare_exchange("/", "e3", "fanout")
    r.bind("/", "e1", "exchange", "e2", "a.*")
    r.bind("/", "e2", "exchange", "e3", "a.b")
    r.bind("/", "e3", "queue", "q1", "")
    r.bind("/", "e2", "queue", "q2", "a.c")
    assert r.route("/", "e1", "a.b") == {"q1"}
    assert r.route("/", "e1", "a.c") == {"q2"}
    assert r.route("/", "e1", "b.b") == frozenset()


def test_exchange_to_exchange_cycles():
    r = make("q1", "q2")
    for x in ("a", "b", "c"):
        r.declare_exchange("/", x, "fanout")
    r.bind("/", "a", "exchange", "b", "")
    r.bind("/", "b", "exchange", "c", "")
    r.bind("/", "c", "exchange", "a", "")
    r.bind("/", "a", "exchange", "a", "")
    assert r.route("/", "a", "k") == frozenset()
    r.bind("/", "c", "queue", "q1", "")
    r.bind("/", "a", "queue", "q2", "")
    assert r.route("/", "a", "k") == {"q1", "q2"}
    assert r.route("/", "b", "k") == {"q1", "q2"}


def test_diamond_delivers_once():
    r = make("q")
    for x in ("top", "l", "r"):
        r.declare_exchange("/", x, "fanout")
    r.bind("/", "top", "exchange", "l", "")
    r.bind("/", "top", "exchange", "r", "")
    r.bind("/", "l", "queue", "q", "")
    r.bind("/", "r", "queue", "q", "")
    assert r.route("/", "top", "") == {"q"}


def test_e2e_destination_missing_is_skipped():
    r = make("q")
    r.declare_exchange("/", "a", "fanout")
    r.declare_exchange("/", "b", "fanout")
    r.bind("/", "a", "exchange", "b", "")
    r.bind("/", "a", "queue", "q", "")
    del r._vhosts["/"].sources["b"]  # as if gone without cleanup
    assert r.route("/", "a", "") == {"q"}


def test_alternate_exchange():
    r = make("q", "unrouted")
    r.declare_exchange("/", "ae", "fanout")
    r.bind("/", "ae", "queue", "unrouted", "")
    r.declare_exchange("/", "x", "direct", arguments={"alternate-exchange": "ae"})
    r.bind("/", "x", "queue", "q", "k")
    assert r.route("/", "x", "k") == {"q"}
    assert r.route("/", "x", "other") == {"unrouted"}
    # an alternate exchange that does not exist
    r.declare_exchange("/", "y", "direct", arguments={"alternate-exchange": "missing"})
    assert r.route("/", "y", "k") == frozenset()


def test_alternate_exchange_not_used_when_routed_to_an_exchange():
    # rabbit_exchange:process_alternate/2 looks only at the exchange's own destinations
    r = make("unrouted")
    r.declare_exchange("/", "ae", "fanout")
    r.bind("/", "ae", "queue", "unrouted", "")
    r.declare_exchange("/", "x", "direct", arguments={"alternate-exchange": "ae"})
    r.declare_exchange("/", "sink", "direct")
    r.bind("/", "x", "exchange", "sink", "k")
    assert r.route("/", "x", "k") == frozenset()
    assert r.route("/", "x", "j") == {"unrouted"}


def test_alternate_exchange_chains_and_cycles():
    r = make("q")
    r.declare_exchange("/", "a", "direct", arguments={"alternate-exchange": "b"})
    r.declare_exchange("/", "b", "direct", arguments={"alternate-exchange": "c"})
    r.declare_exchange("/", "c", "direct", arguments={"alternate-exchange": "a"})
    assert r.route("/", "a", "k") == frozenset()
    r.bind("/", "c", "queue", "q", "k")
    assert r.route("/", "a", "k") == {"q"}
    assert r.route("/", "b", "k") == {"q"}
    r.declare_exchange("/", "self", "direct", arguments={"alternate-exchange": "self"})
    assert r.route("/", "self", "k") == frozenset()


def test_alternate_exchange_of_an_e2e_destination():
    r = make("q")
    r.declare_exchange("/", "ae", "fanout")
    r.bind("/", "ae", "queue", "q", "")
    r.declare_exchange("/", "inner", "direct", arguments={"alternate-exchange": "ae"})
    r.declare_exchange("/", "outer", "fanout")
    r.bind("/", "outer", "exchange", "inner", "")
    assert r.route("/", "outer", "nomatch") == {"q"}


def test_route_cache_invalidated_by_every_change():
    r = make("q1", "q2")
    r.declare_exchange("/", "x", "direct")
    r.bind("/", "x", "queue", "q1", "k")
    assert r.route("/", "x", "k") == {"q1"}
    r.declare_exchange("/", "y", "direct")
    r.bind("/", "x", "exchange", "y", "k")
    r.bind("/", "y", "queue", "q2", "k")
    assert r.route("/", "x", "k") == {"q1", "q2"}
    r.delete_exchange("/", "y")
    assert r.route("/", "x", "k") == {"q1"}
    r.remove_queue("/", "q1")
    assert r.route("/", "x", "k") == frozenset()


# ------------------------------------------------------------------------------ replication


def _sample_router():
    r = make("q1", "q2")
    r.add_vhost("v")
    r.add_queue("v", "qv")
    r.declare_exchange("/", "t", "topic", False, True, False, {"alternate-exchange": "amq.fanout"})
    r.declare_exchange("/", "h", "headers", arguments={"d": decimal.Decimal("1.25"),
                                                       "ts": datetime.datetime(
                                                           2021, 5, 1, tzinfo=datetime.timezone.utc),
                                                       "b": b"\xff", "n": None,
                                                       "l": [1, "a", [True]]})
    r.bind("/", "t", "queue", "q1", "a.#")
    r.bind("/", "t", "exchange", "h", "b.*")
    r.bind("/", "h", "queue", "q2", "", {"x-match": "any", "k": 1, "z": b"\x00"})
    r.bind("/", "amq.fanout", "queue", "q2", "")
    r.bind("v", "amq.direct", "queue", "qv", "k")
    return r


def test_state_roundtrip_through_msgpack():
    r = _sample_router()
    wire = msgpack.packb(r.to_state())
    r2 = Router.from_state(msgpack.unpackb(wire))
    for vh in ("/", "v"):
        assert r2.exchanges(vh) == r.exchanges(vh)
        assert r2.list_bindings(vh) == r.list_bindings(vh)
        assert r2.list_queues(vh) == r.list_queues(vh)
    assert r2.route("/", "t", "a.x") == {"q1"}
    assert r2.route("/", "t", "b.x", {"k": 1}) == {"q2"}
    assert r2.route("/", "t", "c") == {"q2"}  # via alternate exchange amq.fanout
    assert r2.route("v", "amq.direct", "k") == {"qv"}
    assert r2.exchange("/", "h").arguments["d"] == decimal.Decimal("1.25")
    assert r2.exchange("/", "h").arguments["b"] == b"\xff"


def test_apply_changes_through_msgpack():
    src = Router()
    dst = Router()
    changes = [
        change_add_vhost("/"),
        change_add_queue("/", "q"),
        change_declare_exchange("/", "x", "headers", True, False, False,
                                {"alternate-exchange": "amq.fanout",
                                 "d": decimal.Decimal("2.5")}),
        change_bind("/", "x", "queue", "q", "", {"x-match": "all", "k": b"v", "n": None}),
        change_bind("/", "amq.fanout", "queue", "q", ""),
        change_unbind("/", "amq.fanout", "queue", "q", ""),
    ]
    for c in changes:
        src.apply(c)
        dst.apply(msgpack.unpackb(msgpack.packb(c)))
    assert dst.exchanges("/") == src.exchanges("/")
    assert dst.list_bindings("/") == src.list_bindings("/")
    assert dst.route("/", "x", "", {"k": b"v", "n": 1}) == {"q"}
    assert dst.route("/", "amq.fanout", "") == frozenset()
    assert dst.apply(change_remove_queue("/", "q")) == []
    assert dst.route("/", "x", "", {"k": b"v", "n": 1}) == frozenset()
    assert dst.apply(change_delete_exchange("/", "x")) == []
    assert dst.exchange("/", "x") is None
    assert dst.apply(change_remove_vhost("/")) is True
    with pytest.raises(ValueError):
        dst.apply(["frobnicate", "/"])


def test_an_exchange_keeps_who_declared_it_through_changes_and_state():
    """user_who_performed_action: the declaring user rides the change list (a change of an
    older log, without it, and a predeclared exchange are rmq-internal's) and the state."""
    r = make()
    r.apply(change_declare_exchange("/", "by-alice", "direct", user="alice"))
    r.apply(["declare_exchange", "/", "older", "fanout", True, False, False, []])
    assert r.exchange("/", "by-alice").user == "alice"
    assert r.exchange("/", "older").user == INTERNAL_USER == "rmq-internal"
    assert r.exchange("/", "amq.direct").user == INTERNAL_USER
    copy = Router.from_state(msgpack.unpackb(msgpack.packb(r.to_state())))
    assert copy.exchange("/", "by-alice").user == "alice"


def test_change_lists_are_plain_data():
    c = change_bind("/", "x", "queue", "q", "k", {"a": decimal.Decimal("1.5"), "b": (1, 2)})
    assert c == ["bind", "/", "x", "queue", "q", "k",
                 [["a", ["D", "1.5"]], ["b", ["A", [["I", 1], ["I", 2]]]]]]
    assert msgpack.unpackb(msgpack.packb(c)) == c


def test_pack_table_roundtrip():
    t = {"s": "é", "b": b"\x00", "i": -5, "big": 2 ** 62, "t": True, "f": 1.5,
         "d": decimal.Decimal("-0.001"), "ts": datetime.datetime(2000, 1, 1,
                                                                 tzinfo=datetime.timezone.utc),
         "tab": {"z": 1, "a": [None, "x"]}, "v": None}
    back = unpack_table(msgpack.unpackb(msgpack.packb(pack_table(t))))
    assert back == t
    assert list(back["tab"]) == ["z", "a"]
    assert isinstance(back["b"], bytes) and back["t"] is True


def test_methods_accept_packed_arguments():
    r = make("q")
    r.bind("/", "amq.headers", "queue", "q", "", pack_table({"k": 1}))
    assert r.has_binding("/", "amq.headers", "queue", "q", "", {"k": 1})
    assert r.unbind("/", "amq.headers", "queue", "q", "", pack_table({"k": 1}))


def test_policy_alternate_exchange_is_used_where_the_argument_is_absent():
    """Policy key alternate-exchange (issue 13 item 4): the x-argument wins over it."""
    from actors.core.routing import Router
    r = Router()
    r.add_vhost("/")
    r.declare_exchange("/", "src", "direct")
    r.declare_exchange("/", "own", "direct", arguments={"alternate-exchange": "ae1"})
    for name in ("ae1", "ae2"):
        r.declare_exchange("/", name, "fanout")
        r.add_queue("/", name + "-q")
        r.bind("/", name, "queue", name + "-q", "")
    assert r.route("/", "src", "k") == frozenset()
    r.set_policy_alternates("/", {"src": "ae2", "own": "ae2"})
    assert r.route("/", "src", "k") == {"ae2-q"}
    assert r.route("/", "own", "k") == {"ae1-q"}
    r.set_policy_alternates("/", {})
    assert r.route("/", "src", "k") == frozenset()
