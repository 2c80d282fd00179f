"""actors/core/permissions.py against rabbit_auth_backend_internal / rabbit_access_control (3.10).

The hashes below were exported from a RabbitMQ 3.10.8 node (rabbitmqctl export_definitions);
the permission cases and the refusal texts were compared with the same node.
"""

import base64
import hashlib
import struct

import msgpack
import pytest

from actors.core.errors import ChannelError, ConnectionError_
from actors.core.permissions import (MD5, SHA256, SHA512, AuthDB, check_hash, hash_password,
                                     login_refused, parse_amqplain, parse_plain,
                                     resource_access_refused, topic_access_refused,
                                     vhost_access_refused)


def test_rabbitmq_exported_hashes():
    assert check_hash("urtf0KIj4r0LWdhCdCahid6TDyO0MYZigal7PEI0YFEG0q5d", "secret")
    assert not check_hash("urtf0KIj4r0LWdhCdCahid6TDyO0MYZigal7PEI0YFEG0q5d", "Secret")
    assert check_hash("dmrAEttyH7frzanaUjadLaiwtlpbFXzIyYdPdl4NumsOuDbL", "guest")


def test_hash_format():
    h = hash_password("pw", salt=b"\x01\x02\x03\x04")
    raw = base64.b64decode(h)
    assert raw[:4] == b"\x01\x02\x03\x04"
    assert raw[4:] == hashlib.sha256(b"\x01\x02\x03\x04pw").digest()
    assert len(base64.b64decode(hash_password("pw"))) == 36
    assert hash_password("pw") != hash_password("pw")  # random salt
    for alg in (SHA256, SHA512, MD5):
        assert check_hash(hash_password("pé", algorithm=alg), "pé", alg)
        assert not check_hash(hash_password("pé", algorithm=alg), "pe", alg)
    # legacy users without an algorithm are md5
    assert check_hash(hash_password("x", algorithm=MD5), "x", None)
    assert not check_hash("", "x")
    assert not check_hash("AAA=", "x")
    assert not check_hash("not base64!", "x")


def test_default():
    db = AuthDB.default()
    assert db.list_vhosts() == ["/"]
    assert db.check_password("guest", "guest")
    assert not db.check_password("guest", "Guest")
    assert db.user_tags("guest") == ["administrator"]
    assert db.get_permissions("guest", "/") == (".*", ".*", ".*")
    assert db.check_vhost("guest", "/")
    for perm in ("configure", "write", "read"):
        assert db.check_resource("guest", "/", perm, "anything")
        assert db.check_resource("guest", "/", perm, "")


def test_users_lifecycle():
    db = AuthDB.default()
    db.add_user("alice", "s3cret", ["monitoring"])
    with pytest.raises(ValueError):
        db.add_user("alice", "x")
    assert db.check_password("alice", "s3cret")
    db.change_password("alice", "new")
    assert not db.check_password("alice", "s3cret")
    assert db.check_password("alice", "new")
    db.set_user_tags("alice", "administrator,policymaker")
    assert db.user_tags("alice") == ["administrator", "policymaker"]
    db.set_user_tags("alice", None)
    assert db.user_tags("alice") == []
    db.set_permissions("alice", "/", "", "", "")
    db.delete_user("alice")
    assert not db.user_exists("alice")
    assert db.get_permissions("alice", "/") is None
    for f in (db.delete_user, db.clear_password):
        with pytest.raises(KeyError):
            f("alice")
    with pytest.raises(KeyError):
        db.change_password("alice", "x")
    with pytest.raises(KeyError):
        db.set_user_tags("alice", [])
    db.add_user("nopw")
    assert not db.check_password("nopw", "")
    assert not db.check_password("nopw", "x")
    db.add_user_with_hash("imported", "dmrAEttyH7frzanaUjadLaiwtlpbFXzIyYdPdl4NumsOuDbL", SHA256,
                          ["management"])
    assert db.check_password("imported", "guest")
    assert {"name": "imported", "tags": ["management"]} in db.list_users()


def test_check_login_texts():
    db = AuthDB.default()
    assert db.check_login("guest", "guest") is None
    assert db.check_login("guest", "bad") == "user 'guest' - invalid credentials"
    assert db.check_login("nobody", "x") == "user 'nobody' - invalid credentials"
    blank = db.check_login("guest", "")
    assert blank.startswith("user 'guest' attempted to log in with a blank password, which is "
                            "prohibited by the internal authN backend.")
    assert db.check_login("guest", b"") == blank
    e = login_refused("PLAIN", db.check_login("guest", "bad"))
    assert isinstance(e, ConnectionError_) and e.reply_code == 403
    assert e.text == "ACCESS_REFUSED - PLAIN login refused: user 'guest' - invalid credentials"
    e = login_refused("PLAIN", blank)
    assert len(e.text.encode()) == 255 and e.text.endswith("...")
    assert e.text.startswith("ACCESS_REFUSED - PLAIN login refused: user 'guest' attempted")
    e = login_refused("AMQPLAIN", "whatever", safe=True)
    assert e.text == ("ACCESS_REFUSED - Login was refused using authentication mechanism "
                      "AMQPLAIN. For details see the broker logfile.")


def test_vhosts_and_permissions():
    db = AuthDB.default()
    db.add_user("u", "p")
    db.add_vhost("v1")
    with pytest.raises(ValueError):
        db.add_vhost("v1")
    assert not db.check_vhost("u", "v1")
    with pytest.raises(KeyError):
        db.set_permissions("u", "nope", ".*", ".*", ".*")
    with pytest.raises(KeyError):
        db.set_permissions("nobody", "v1", ".*", ".*", ".*")
    with pytest.raises(ValueError):
        db.set_permissions("u", "v1", "(", ".*", ".*")
    db.set_permissions("u", "v1", "", "", "")
    assert db.check_vhost("u", "v1")  # any entry gives access to the vhost
    assert not db.check_vhost("u", "/")
    assert not db.check_vhost("u", "missing")
    assert db.list_permissions("v1") == [{"user": "u", "vhost": "v1", "configure": "",
                                          "write": "", "read": ""}]
    db.clear_permissions("u", "v1")
    assert not db.check_vhost("u", "v1")
    db.clear_permissions("u", "v1")  # no entry: fine
    with pytest.raises(KeyError):
        db.clear_permissions("u", "nope")
    db.set_permissions("u", "v1", ".*", ".*", ".*")
    db.delete_vhost("v1")
    assert db.get_permissions("u", "v1") is None
    with pytest.raises(KeyError):
        db.delete_vhost("v1")


@pytest.mark.parametrize("pattern,name,expected", [
    (".*", "x", True),
    ("", "x", False),  # empty pattern is ^$
    ("", "", True),
    ("^a", "ab", True), ("^a", "ba", False),
    ("a", "ba", True),  # unanchored like re:run
    ("^a$", "ab", False), ("^a$", "a", True),
    ("b|^c", "ab", True), ("b|^c", "ca", True), ("b|^c", "ac", False),
    (r"^(amq\.gen.*|x)$", "amq.gen-1", True), (r"^(amq\.gen.*|x)$", "xx", False),
    (r"q\d", "q1", True), (r"q\d", "q", False),
    (".", "", False), ("é", "é", True), ("^.$", "é", False),  # bytes, as PCRE without utf
    ("a$", "a\n", True),  # PCRE $ also matches before a final newline
])
def test_check_resource_regex(pattern, name, expected):
    db = AuthDB.default()
    db.add_user("u", "p")
    db.set_permissions("u", "/", pattern, ".*", "^$")
    assert db.check_resource("u", "/", "configure", name) is expected
    assert db.check_resource("u", "/", "write", name) is True
    assert db.check_resource("u", "/", "read", name) is (name == "")


def test_check_resource_default_exchange_is_amq_default():
    db = AuthDB.default()
    db.add_user("u", "p")
    db.set_permissions("u", "/", "", "^amq\\.default$", "")
    assert db.check_resource("u", "/", "write", "", kind="exchange")
    assert not db.check_resource("u", "/", "configure", "", kind="exchange")
    # an empty pattern lets nothing named through, not even the default exchange
    assert not db.check_resource("u", "/", "read", "", kind="exchange")
    assert not db.check_resource("nobody", "/", "read", "x")
    assert not db.check_resource("u", "v9", "read", "x")


def test_refusal_texts():
    e = resource_access_refused("queue", "q", "/", "u")
    assert isinstance(e, ChannelError)
    assert (e.reply_code, e.text) == (403, "ACCESS_REFUSED - access to queue 'q' in vhost '/' "
                                           "refused for user 'u'")
    e = resource_access_refused("exchange", "", "v", "u")
    assert e.text == ("ACCESS_REFUSED - access to exchange 'amq.default' in vhost 'v' refused "
                      "for user 'u'")
    e = vhost_access_refused("/", "u")
    assert isinstance(e, ConnectionError_)
    assert (e.reply_code, e.text) == (530, "NOT_ALLOWED - access to vhost '/' refused for user "
                                           "'u'")


def test_state_roundtrip():
    db = AuthDB.default()
    db.add_user("u", "p", ["a", "b"])
    db.add_vhost("v", "desc")
    db.set_permissions("u", "v", "c", "w", "r")
    db2 = AuthDB.from_state(msgpack.unpackb(msgpack.packb(db.to_state())))
    assert db2.to_state() == db.to_state()
    assert db2.check_password("u", "p")
    assert db2.check_resource("u", "v", "read", "r")
    assert db2.list_vhosts() == ["/", "v"]
    # definitions-style input (tags as a string, no algorithm = md5)
    db3 = AuthDB.from_state({"users": [{"name": "x", "password_hash":
                                        hash_password("pw", algorithm=MD5),
                                        "tags": "administrator"}],
                             "vhosts": ["/"], "permissions": []})
    assert db3.check_password("x", "pw") and db3.user_tags("x") == ["administrator"]


def test_empty_constructor():
    db = AuthDB()
    assert db.list_vhosts() == [] and db.list_users() == []
    assert not db.check_password("guest", "guest")


# ----------------------------------------------------------------------------- SASL


def test_parse_plain():
    assert parse_plain(b"\x00guest\x00guest") == ("guest", "guest")
    assert parse_plain(b"\x00\x00") == ("", "")
    assert parse_plain(b"\x00us\xc3\xa9r\x00p\xff") == ("usér", "p\udcff")
    assert AuthDB.default().check_login(*parse_plain(b"\x00guest\x00guest")) is None
    for bad in (b"authz\x00guest\x00guest", b"\x00guest", b"", b"\x00a\x00b\x00c"):
        with pytest.raises(ConnectionError_) as ei:
            parse_plain(bad)
        assert ei.value.reply_code == 502
    with pytest.raises(ConnectionError_) as ei:
        parse_plain(b"\x00guest")
    assert ei.value.text == "SYNTAX_ERROR - response <<0,103,117,101,115,116>> invalid"


def _amqplain(items):
    out = b""
    for k, t, v in items:
        out += bytes([len(k)]) + k + t
        out += struct.pack(">I", len(v)) + v if t == b"S" else v
    return out


def test_parse_amqplain():
    body = _amqplain([(b"LOGIN", b"S", b"alice"), (b"PASSWORD", b"S", b"secret")])
    assert parse_amqplain(body) == ("alice", "secret")
    body = _amqplain([(b"PASSWORD", b"S", b"p\xff"), (b"LOGIN", b"S", b"bob")])
    assert parse_amqplain(body) == ("bob", "p\udcff")
    with pytest.raises(ConnectionError_) as ei:
        parse_amqplain(_amqplain([(b"LOGIN", b"S", b"alice")]))
    assert ei.value.text == ("SYNTAX_ERROR - AMQPLAIN auth info [{<<76,79,71,73,78>>,longstr,"
                             "<<97,108,105,99,101>>}] is missing LOGIN or PASSWORD field")
    with pytest.raises(ConnectionError_) as ei:
        parse_amqplain(_amqplain([(b"LOGIN", b"I", struct.pack(">i", 5)),
                                  (b"PASSWORD", b"I", struct.pack(">i", 6))]))
    assert ei.value.text == ("SYNTAX_ERROR - AMQPLAIN auth info [{<<76,79,71,73,78>>,signedint,"
                             "5},{<<80,65,83,83,87,79,82,68>>,signedint,6}] uses unsupported "
                             "type for LOGIN or PASSWORD field")
    with pytest.raises(ConnectionError_) as ei:
        parse_amqplain(b"\x05LOGINS\x00\x00")
    assert ei.value.reply_code == 502


# --- topic permissions and the checks of a declare that creates (issue 11) --------------------
def _tenant() -> AuthDB:
    db = AuthDB.default()
    db.add_vhost("v")
    db.add_user("u", "pw")
    db.set_permissions("u", "v", ".*", "^u-.*", ".*")
    return db


def test_topic_permissions_set_list_clear__E3():
    db = _tenant()
    db.set_topic_permissions("u", "v", "amq.topic", "^a\\.", "^b\\.")
    db.set_topic_permissions("u", "v", "t2", "", ".*")
    assert db.list_topic_permissions("v") == [
        {"user": "u", "vhost": "v", "exchange": "amq.topic", "write": "^a\\.", "read": "^b\\."},
        {"user": "u", "vhost": "v", "exchange": "t2", "write": "", "read": ".*"}]
    assert db.list_topic_permissions("/") == []
    assert [p["exchange"] for p in db.list_topic_permissions(user="u")] == ["amq.topic", "t2"]
    db.clear_topic_permissions("u", "v", "t2")
    assert [p["exchange"] for p in db.list_topic_permissions()] == ["amq.topic"]
    db.clear_topic_permissions("u", "v")
    assert db.list_topic_permissions() == []
    with pytest.raises(ValueError):
        db.set_topic_permissions("u", "v", "amq.topic", "(", ".*")
    with pytest.raises(KeyError):
        db.set_topic_permissions("nobody", "v", "amq.topic", ".*", ".*")
    with pytest.raises(KeyError):
        db.set_topic_permissions("u", "nowhere", "amq.topic", ".*", ".*")
    with pytest.raises(KeyError):
        db.clear_topic_permissions("u", "nowhere")


def test_check_topic_as_check_topic_access__E3():
    """No entry: allowed; an entry: write or read pattern searched (unanchored) in the routing
    key, empty pattern = ^$; {username} and {vhost} expanded."""
    db = _tenant()
    assert db.check_topic("u", "v", "amq.topic", "write", "anything")
    db.set_topic_permissions("u", "v", "amq.topic", "^{username}\\.{vhost}\\.", "")
    assert db.check_topic("u", "v", "amq.topic", "write", "u.v.x")
    assert not db.check_topic("u", "v", "amq.topic", "write", "w.v.x")
    assert not db.check_topic("u", "v", "amq.topic", "read", "u.v.x")
    assert db.check_topic("u", "v", "amq.topic", "read", "")
    assert db.check_topic("u", "v", "other", "read", "x")  # no entry for that exchange
    db.set_topic_permissions("u", "v", "amq.topic", "mid", ".*")
    assert db.check_topic("u", "v", "amq.topic", "write", "a.mid.b")


def test_topic_permissions_go_with_their_user_and_vhost():
    db = _tenant()
    db.set_topic_permissions("u", "v", "amq.topic", ".*", ".*")
    db.delete_user("u")
    assert db.list_topic_permissions() == []
    db = _tenant()
    db.set_topic_permissions("u", "v", "amq.topic", ".*", ".*")
    db.delete_vhost("v")
    assert db.list_topic_permissions() == []


def test_topic_permissions_in_state_roundtrip():
    db = _tenant()
    db.set_topic_permissions("u", "v", "amq.topic", "^{username}", "r")
    state = msgpack.unpackb(msgpack.packb(db.to_state()))
    assert state["topic_permissions"] == [{"user": "u", "vhost": "v", "exchange": "amq.topic",
                                           "write": "^{username}", "read": "r"}]
    back = AuthDB.from_state(state)
    assert back.topic_permissions == db.topic_permissions
    assert AuthDB.from_state({k: v for k, v in state.items()
                              if k != "topic_permissions"}).topic_permissions == {}


def test_topic_refusal_text():
    e = topic_access_refused("a.b", "amq.topic", "/", "u")
    assert (e.reply_code, e.text) == (403, "ACCESS_REFUSED - access to topic 'a.b' in exchange "
                                           "'amq.topic' in vhost '/' refused for user 'u'")


def test_new_queue_with_dlx_needs_read_on_queue_and_write_on_dlx__E3():
    """The issue's bypass: write only on u-* names, a queue dead-lettering into another
    exchange. RabbitMQ 3.10: read on the queue, then write on the DLX, else 403."""
    db = _tenant()
    with pytest.raises(ChannelError) as ei:
        db.check_new_queue("u", "v", "u-q", {"x-dead-letter-exchange": "victim"})
    assert (ei.value.reply_code, ei.value.text) == (
        403, "ACCESS_REFUSED - access to exchange 'victim' in vhost 'v' refused for user 'u'")
    with pytest.raises(ChannelError) as ei:
        db.check_new_queue("u", "v", "u-q", {"x-dead-letter-exchange": ""})
    assert "exchange 'amq.default'" in ei.value.text
    db.check_new_queue("u", "v", "u-q", {"x-dead-letter-exchange": "u-dlx"})
    db.check_new_queue("u", "v", "u-q", {"x-message-ttl": 5})
    db.check_new_queue("u", "v", "u-q", None)
    db.set_permissions("u", "v", ".*", ".*", "^u-")
    with pytest.raises(ChannelError) as ei:  # read on the queue comes first
        db.check_new_queue("u", "v", "q", {"x-dead-letter-exchange": "x"})
    assert ei.value.text == ("ACCESS_REFUSED - access to queue 'q' in vhost 'v' refused for "
                             "user 'u'")
    with pytest.raises(ChannelError) as ei:  # the type is checked before any permission
        db.check_new_queue("u", "v", "q", {"x-dead-letter-exchange": 5})
    assert ei.value.reply_code == 406
    assert "invalid type 'signedint' for arg 'x-dead-letter-exchange'" in ei.value.text


def test_new_exchange_with_ae_needs_read_on_it_and_write_on_ae__E3():
    db = _tenant()
    with pytest.raises(ChannelError) as ei:
        db.check_new_exchange("u", "v", "u-x", {"alternate-exchange": "victim"})
    assert (ei.value.reply_code, ei.value.text) == (
        403, "ACCESS_REFUSED - access to exchange 'victim' in vhost 'v' refused for user 'u'")
    db.check_new_exchange("u", "v", "u-x", {"alternate-exchange": "u-ae"})
    db.check_new_exchange("u", "v", "u-x", {})
    db.set_permissions("u", "v", ".*", ".*", "^u-")
    with pytest.raises(ChannelError) as ei:
        db.check_new_exchange("u", "v", "x", {"alternate-exchange": "u-ae"})
    assert ei.value.text == ("ACCESS_REFUSED - access to exchange 'x' in vhost 'v' refused "
                             "for user 'u'")
    with pytest.raises(ChannelError) as ei:
        db.check_new_exchange("u", "v", "x", {"alternate-exchange": 1})
    assert ei.value.reply_code == 406


def test_require_names_the_resource():
    db = _tenant()
    db.require("u", "v", "configure", "queue", "amq.gen-abc")
    db.set_permissions("u", "v", "^u-", ".*", ".*")
    with pytest.raises(ChannelError) as ei:
        db.require("u", "v", "configure", "queue", "amq.gen-abc")
    assert ei.value.text == ("ACCESS_REFUSED - access to queue 'amq.gen-abc' in vhost 'v' "
                             "refused for user 'u'")
