"""Users, vhosts and permissions: a pure data structure, as RabbitMQ 3.10's internal backend.

Mirrors (3.10.8):
  * ``rabbit_auth_backend_internal``: ``user_login_authentication/2`` (blank passwords refused,
    ``<<Salt:4/binary, Hash/binary>>`` compared with the salted hash), ``check_vhost_access/3``
    (access needs a permission entry for the vhost), ``check_resource_access/4`` (``re:run``
    of the name against the configure/write/read regex -- unanchored, so ``^``/``$`` matter;
    an empty pattern means ``^$``), ``set_permissions`` (the regexes must compile);
    ``set_topic_permissions`` / ``clear_topic_permissions`` / ``list_topic_permissions`` and
    ``check_topic_access/4`` (write/read patterns per user, vhost and topic exchange, matched
    against the routing key after ``{username}`` / ``{vhost}`` expansion; no entry: allowed);
  * ``rabbit_password`` / ``rabbit_password_hashing_sha256`` (and ``_sha512``, ``_md5`` for
    imported hashes): the stored hash is ``base64(salt(4 bytes) + H(salt + password))``;
  * ``rabbit_access_control``: ``check_user_loopback/2`` (``loopback_users`` log in only from
    a loopback address, ``rabbit_net:is_loopback/1``), the default exchange is checked as
    ``amq.default``; the refusal texts (``access to queue 'q' in vhost '/' refused for user
    'u'``, ``access to vhost '/' refused for user 'u'``);
  * ``rabbit_auth_mechanism_plain`` / ``_amqplain``: parsing the start-ok responses;
  * ``rabbit_reader:auth_fail/5``: ``ACCESS_REFUSED - PLAIN login refused: user 'u' - invalid
    credentials``.

Names of users and vhosts are ``str``; bytes that are not UTF-8 travel as surrogate escapes.
Errors from the mutating methods are ``KeyError`` (no such user/vhost) and ``ValueError``
(already exists, bad regex); their text is rabbitmqctl-like.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import os
import re
import struct
from typing import Iterable, Mapping

from actors.core.erl_terms import Atom, amqp_type_name, erl_p, erl_w, field_term
from actors.core.errors import ChannelError, ConnectionError_, rs
from actors.core.queue_args import check_alternate_exchange_arg, check_dlx_arg_type

__all__ = [
    "SHA256", "SHA512", "MD5", "AuthDB", "hash_password", "hashed_auth_call", "check_hash", "parse_plain",
    "parse_amqplain", "is_loopback", "loopback_refused", "login_refused",
    "resource_access_refused", "vhost_access_refused",
    "topic_access_refused", "BLANK_PASSWORD_TEXT",
]

SHA256 = "rabbit_password_hashing_sha256"
SHA512 = "rabbit_password_hashing_sha512"
MD5 = "rabbit_password_hashing_md5"
_HASHES = {SHA256: hashlib.sha256, SHA512: hashlib.sha512, MD5: hashlib.md5}

PERMS = ("configure", "write", "read")

BLANK_PASSWORD_TEXT = (
    "user '{}' attempted to log in with a blank password, which is prohibited by the internal "
    "authN backend. To use TLS/x509 certificate-based authentication, see the "
    "rabbitmq_auth_mechanism_ssl plugin and configure the client to use the EXTERNAL "
    "authentication mechanism. Alternatively change the password for the user to be non-blank.")


def _b(s: str | bytes) -> bytes:
    return s.encode("utf-8", "surrogateescape") if isinstance(s, str) else bytes(s)


def pattern_error(pattern: str) -> str | None:
    """Why a permission pattern is refused (RabbitMQ: ``{invalid_regexp, Regexp, Reason}``),
    None when it compiles."""
    try:
        re.compile(_b(pattern or "^$"))
    except re.error as e:
        return f"invalid regexp {pattern!r}: {e}"
    return None


def hash_password(password: str | bytes, salt: bytes | None = None,
                  algorithm: str = SHA256) -> str:
    """rabbit_password:hash/2: base64 of a random 4-byte salt followed by H(salt + password)."""
    if salt is None:
        salt = os.urandom(4)
    h = _HASHES[algorithm](salt + _b(password)).digest()
    return base64.b64encode(salt + h).decode("ascii")


def hashed_auth_call(method: str, args: list) -> tuple[str, list]:
    """An auth call with its plaintext password replaced by a fresh salted hash:
    add_user(name, password) -> add_user_with_hash(name, hash, algorithm),
    change_password(name, password) -> change_password_hash(name, hash, algorithm); any other
    call as it is. What travels on from here, and what a definitions log records, is the hash."""
    if method == "add_user" and len(args) >= 2 and args[1] is not None:
        return "add_user_with_hash", [args[0], hash_password(args[1]), SHA256, *args[2:]]
    if method == "change_password" and len(args) == 2 and args[1] is not None:
        return "change_password_hash", [args[0], hash_password(args[1]), SHA256]
    return method, list(args)


def check_hash(password_hash: str | bytes, password: str | bytes,
               algorithm: str | None = SHA256) -> bool:
    """Whether ``password`` matches a stored hash (``algorithm`` None is RabbitMQ's legacy
    default, md5)."""
    try:
        raw = base64.b64decode(password_hash, validate=True) if password_hash else b""
    except (ValueError, TypeError):
        return False
    if len(raw) < 4:
        return False
    fn = _HASHES.get(algorithm or MD5)
    if fn is None:
        return False
    salt, digest = raw[:4], raw[4:]
    return hmac.compare_digest(digest, fn(salt + _b(password)).digest())


class AuthDB:
    """Users (password hash, hashing algorithm, tags), vhosts and permissions."""

    def __init__(self):
        self.users: dict[str, dict] = {}  # name -> {"password_hash", "hashing_algorithm", "tags"}
        self.vhosts: dict[str, dict] = {}  # name -> {"description", "tags"}
        self.permissions: dict[tuple[str, str], tuple[str, str, str]] = {}
        # (user, vhost, exchange) -> (write, read) regexes on routing keys of a topic exchange
        self.topic_permissions: dict[tuple[str, str, str], tuple[str, str]] = {}
        self._re_cache: dict[str, re.Pattern] = {}

    @classmethod
    def default(cls) -> "AuthDB":
        """RabbitMQ's first boot: vhost "/", user guest/guest tagged administrator with
        ".*" ".*" ".*" on "/" (guest may log in from loopback addresses only)."""
        db = cls()
        db.add_vhost("/")
        db.add_user("guest", "guest", ["administrator"])
        db.set_permissions("guest", "/", ".*", ".*", ".*")
        return db

    # --- users -----------------------------------------------------------------------------
    def add_user(self, name: str, password: str | bytes | None = None,
                 tags: Iterable[str] | None = None) -> None:
        """ValueError if the user exists. ``password`` None: no password (such a user cannot
        log in with one)."""
        if name in self.users:
            raise ValueError(f'User "{name}" already exists')
        self.users[name] = {
            "password_hash": hash_password(password) if password is not None else "",
            "hashing_algorithm": SHA256,
            "tags": _tags(tags),
        }

    def add_user_with_hash(self, name: str, password_hash: str,
                           hashing_algorithm: str = SHA256,
                           tags: Iterable[str] | None = None) -> None:
        """As definitions import does: the base64 hash as exported by RabbitMQ."""
        if name in self.users:
            raise ValueError(f'User "{name}" already exists')
        if hashing_algorithm not in _HASHES:
            raise ValueError(f"unknown hashing algorithm {hashing_algorithm}")
        self.users[name] = {"password_hash": password_hash or "",
                            "hashing_algorithm": hashing_algorithm, "tags": _tags(tags)}

    def _user(self, name: str) -> dict:
        u = self.users.get(name)
        if u is None:
            raise KeyError(f'User "{name}" does not exist')
        return u

    def delete_user(self, name: str) -> None:
        self._user(name)
        del self.users[name]
        for key in [k for k in self.permissions if k[0] == name]:
            del self.permissions[key]
        for key in [k for k in self.topic_permissions if k[0] == name]:
            del self.topic_permissions[key]

    def change_password(self, name: str, password: str | bytes | None) -> None:
        """A new salted hash (``None`` clears the password)."""
        u = self._user(name)
        u["password_hash"] = hash_password(password) if password is not None else ""
        u["hashing_algorithm"] = SHA256

    def change_password_hash(self, name: str, password_hash: str,
                             hashing_algorithm: str = SHA256) -> None:
        """A hash made elsewhere (the node that took the request: passwords are hashed
        before they enter a definitions change, so no log or link carries them)."""
        if hashing_algorithm not in _HASHES:
            raise ValueError(f"unknown hashing algorithm {hashing_algorithm}")
        u = self._user(name)
        u["password_hash"] = password_hash or ""
        u["hashing_algorithm"] = hashing_algorithm

    def clear_password(self, name: str) -> None:
        self.change_password(name, None)

    def set_user_tags(self, name: str, tags: Iterable[str] | None) -> None:
        self._user(name)["tags"] = _tags(tags)

    def user_exists(self, name: str) -> bool:
        return name in self.users

    def user_tags(self, name: str) -> list[str] | None:
        u = self.users.get(name)
        return None if u is None else list(u["tags"])

    def list_users(self) -> list[dict]:
        """``[{"name", "tags"}]`` as rabbitmqctl list_users."""
        return [{"name": n, "tags": list(u["tags"])} for n, u in self.users.items()]

    # --- authentication --------------------------------------------------------------------
    def check_password(self, name: str, password: str | bytes) -> bool:
        """rabbit_auth_backend_internal:user_login_authentication/2 with a password."""
        return self.check_login(name, password) is None

    def check_login(self, name: str, password: str | bytes) -> str | None:
        """None when the login succeeds, else RabbitMQ's refusal explanation:
        ``user 'u' - invalid credentials`` or the blank-password text. Build the AMQP error
        with ``login_refused(mechanism, explanation)``."""
        if password in ("", b""):
            return BLANK_PASSWORD_TEXT.format(name)
        u = self.users.get(name)
        if u is None or not check_hash(u["password_hash"], password, u["hashing_algorithm"]):
            return f"user '{name}' - invalid credentials"
        return None

    # --- vhosts ----------------------------------------------------------------------------
    def add_vhost(self, name: str, description: str = "", tags: Iterable[str] | None = None) -> None:
        if name in self.vhosts:
            raise ValueError(f'Virtual host "{name}" already exists')
        self.vhosts[name] = {"description": description or "", "tags": _tags(tags)}

    def delete_vhost(self, name: str) -> None:
        if name not in self.vhosts:
            raise KeyError(f'Virtual host "{name}" does not exist')
        del self.vhosts[name]
        for key in [k for k in self.permissions if k[1] == name]:
            del self.permissions[key]
        for key in [k for k in self.topic_permissions if k[1] == name]:
            del self.topic_permissions[key]

    def vhost_exists(self, name: str) -> bool:
        return name in self.vhosts

    def list_vhosts(self) -> list[str]:
        return list(self.vhosts)

    # --- permissions -----------------------------------------------------------------------
    def _compile(self, pattern: str) -> re.Pattern:
        p = self._re_cache.get(pattern)
        if p is None:
            # re:run on a binary without the unicode option works on bytes
            p = re.compile(_b(pattern or "^$"))
            if len(self._re_cache) > 4096:
                self._re_cache.clear()
            self._re_cache[pattern] = p
        return p

    def set_permissions(self, user: str, vhost: str, configure: str, write: str,
                        read: str) -> None:
        """KeyError for a missing user or vhost; ValueError for a regex that does not compile
        (RabbitMQ: ``{invalid_regexp, Regexp, Reason}``)."""
        self._check_grant(user, vhost, (configure, write, read))
        self.permissions[(user, vhost)] = (configure, write, read)

    def clear_permissions(self, user: str, vhost: str) -> None:
        self._user(user)
        if vhost not in self.vhosts:
            raise KeyError(f'Virtual host "{vhost}" does not exist')
        self.permissions.pop((user, vhost), None)

    def get_permissions(self, user: str, vhost: str) -> tuple[str, str, str] | None:
        return self.permissions.get((user, vhost))

    def list_permissions(self, vhost: str | None = None) -> list[dict]:
        """``[{"user", "vhost", "configure", "write", "read"}]``."""
        return [{"user": u, "vhost": v, "configure": c, "write": w, "read": r}
                for (u, v), (c, w, r) in self.permissions.items() if vhost in (None, v)]

    def check_vhost(self, user: str, vhost: str) -> bool:
        """rabbit_access_control:check_vhost_access/4: the vhost exists and the user has a
        permission entry in it (whatever its patterns)."""
        return vhost in self.vhosts and (user, vhost) in self.permissions

    def check_resource(self, user: str, vhost: str, perm: str, name: str,
                       kind: str = "queue") -> bool:
        """Whether ``user`` has ``perm`` (configure | write | read) on the resource ``name``
        in ``vhost``: an unanchored regex search of the name (``re:run(Name, Regex)``), an
        empty pattern meaning ``^$``. Pass ``kind="exchange"`` for exchanges: the default
        exchange "" is checked under the name ``amq.default``."""
        p = self.permissions.get((user, vhost))
        if p is None:
            return False
        if kind == "exchange" and name == "":
            name = "amq.default"
        try:
            regex = self._compile(p[PERMS.index(perm)])
        except re.error:
            return False
        return regex.search(_b(name)) is not None

    def require(self, user: str, vhost: str, perm: str, kind: str, name: str) -> None:
        """rabbit_access_control:check_resource_access/4: ``check_resource`` or the 403."""
        if not self.check_resource(user, vhost, perm, name, kind):
            raise resource_access_refused(kind, name, vhost, user)

    def check_new_queue(self, user: str, vhost: str, name: str, arguments) -> None:
        """rabbit_channel's checks when a queue.declare creates a queue with an
        ``x-dead-letter-exchange``: its type (406), then read on the queue and write on the
        DLX (403), since the queue's messages will be published to it."""
        check_dlx_arg_type(arguments, name, vhost)
        if arguments and "x-dead-letter-exchange" in arguments:
            self.require(user, vhost, "read", "queue", name)
            self.require(user, vhost, "write", "exchange", arguments["x-dead-letter-exchange"])

    def check_new_exchange(self, user: str, vhost: str, name: str, arguments) -> None:
        """rabbit_channel's checks when an exchange.declare creates an exchange with an
        ``alternate-exchange``: its type (406), then read on the new exchange and write on the
        alternate exchange (403), since what is published to it may go on to the AE."""
        check_alternate_exchange_arg(arguments, name, vhost)
        if arguments and "alternate-exchange" in arguments:
            self.require(user, vhost, "read", "exchange", name)
            self.require(user, vhost, "write", "exchange", arguments["alternate-exchange"])

    # --- topic permissions (rabbitmqctl set_topic_permissions) ------------------------------
    def set_topic_permissions(self, user: str, vhost: str, exchange: str, write: str,
                              read: str) -> None:
        """KeyError for a missing user or vhost; ValueError for a regex that does not compile.
        The patterns are stored as given: ``{username}`` and ``{vhost}`` are expanded when a
        routing key is checked."""
        self._check_grant(user, vhost, (write, read))
        self.topic_permissions[(user, vhost, exchange)] = (write, read)

    def _check_grant(self, user: str, vhost: str, patterns) -> None:
        """What set_permissions and set_topic_permissions refuse: a pattern that does not
        compile (ValueError), a missing user or vhost (KeyError)."""
        for p in patterns:
            error = pattern_error(p)
            if error:
                raise ValueError(error)
        self._user(user)
        if vhost not in self.vhosts:
            raise KeyError(f'Virtual host "{vhost}" does not exist')

    def clear_topic_permissions(self, user: str, vhost: str, exchange: str | None = None) -> None:
        """Those of one exchange, or (``exchange`` None) every one of the user in the vhost."""
        self._user(user)
        if vhost not in self.vhosts:
            raise KeyError(f'Virtual host "{vhost}" does not exist')
        if exchange is not None:
            self.topic_permissions.pop((user, vhost, exchange), None)
            return
        for key in [k for k in self.topic_permissions if k[:2] == (user, vhost)]:
            del self.topic_permissions[key]

    def list_topic_permissions(self, vhost: str | None = None,
                               user: str | None = None) -> list[dict]:
        """``[{"user", "vhost", "exchange", "write", "read"}]`` (definitions export's shape)."""
        return [{"user": u, "vhost": v, "exchange": x, "write": w, "read": r}
                for (u, v, x), (w, r) in self.topic_permissions.items()
                if vhost in (None, v) and user in (None, u)]

    def check_topic(self, user: str, vhost: str, exchange: str, perm: str,
                    routing_key: str) -> bool:
        """rabbit_auth_backend_internal:check_topic_access/4: no entry for (user, vhost,
        exchange) allows everything; else the write or read pattern (empty means ``^$``), with
        ``{username}`` and ``{vhost}`` replaced by the user's and vhost's names, is searched in
        the routing key (``re:run``, unanchored)."""
        p = self.topic_permissions.get((user, vhost, exchange))
        if p is None:
            return True
        pattern = p[0] if perm == "write" else p[1]
        if pattern:
            pattern = pattern.replace("{vhost}", vhost).replace("{username}", user)
        try:
            regex = self._compile(pattern)
        except re.error:
            return False
        return regex.search(_b(routing_key)) is not None

    # --- state -----------------------------------------------------------------------------
    def to_state(self) -> dict:
        """Plain msgpack-able data, shaped like RabbitMQ's definitions export::

            {"v": 1,
             "users": [{"name", "password_hash", "hashing_algorithm", "tags": [...]}],
             "vhosts": [{"name", "description", "tags": [...]}],
             "permissions": [{"user", "vhost", "configure", "write", "read"}],
             "topic_permissions": [{"user", "vhost", "exchange", "write", "read"}]}
        """
        return {
            "v": 1,
            "users": [{"name": n, "password_hash": u["password_hash"],
                       "hashing_algorithm": u["hashing_algorithm"], "tags": list(u["tags"])}
                      for n, u in self.users.items()],
            "vhosts": [{"name": n, "description": v["description"], "tags": list(v["tags"])}
                       for n, v in self.vhosts.items()],
            "permissions": self.list_permissions(),
            "topic_permissions": self.list_topic_permissions(),
        }

    @classmethod
    def from_state(cls, state: Mapping) -> "AuthDB":
        db = cls()
        for u in state.get("users", []):
            db.users[u["name"]] = {"password_hash": u.get("password_hash") or "",
                                   "hashing_algorithm": u.get("hashing_algorithm") or MD5,
                                   "tags": _tags(u.get("tags"))}
        for v in state.get("vhosts", []):
            v = {"name": v} if isinstance(v, str) else v
            db.vhosts[v["name"]] = {"description": v.get("description") or "",
                                    "tags": _tags(v.get("tags"))}
        for p in state.get("permissions", []):
            db.permissions[(p["user"], p["vhost"])] = (p["configure"], p["write"], p["read"])
        for p in state.get("topic_permissions", []):
            db.topic_permissions[(p["user"], p["vhost"], p["exchange"])] = (p["write"], p["read"])
        return db


def _tags(tags) -> list[str]:
    if tags is None:
        return []
    if isinstance(tags, str):  # "administrator,monitoring" as rabbitmqctl/definitions give
        tags = tags.replace(",", " ").split()
    return [str(t) for t in tags]


# ------------------------------------------------------------------------ SASL responses


def _str(b: bytes) -> str:
    return b.decode("utf-8", "surrogateescape")


def parse_plain(response: bytes) -> tuple[str, str]:
    """rabbit_auth_mechanism_plain: ``\\0user\\0password``. RabbitMQ takes no authorisation
    id (the response must start with NUL) and no NUL inside the password. Otherwise a
    connection error ``SYNTAX_ERROR - response <<...>> invalid`` (502)."""
    response = bytes(response)
    parts = response.split(b"\x00")
    if len(parts) != 3 or parts[0] != b"":
        raise ConnectionError_(502, f"response {erl_p(response)} invalid")
    return _str(parts[1]), _str(parts[2])


def _decode_table(body: bytes) -> dict:
    from protocol.fields import decode_table
    table, _ = decode_table(struct.pack(">I", len(body)) + body, 0)
    return table


def parse_amqplain(response: bytes) -> tuple[str, str]:
    """rabbit_auth_mechanism_amqplain: the response is a field table without its 4-byte length
    holding ``LOGIN`` and ``PASSWORD`` strings. Connection errors (502 SYNTAX_ERROR) as
    RabbitMQ words them: ``AMQPLAIN auth info [...] is missing LOGIN or PASSWORD field`` /
    ``... uses unsupported type for LOGIN or PASSWORD field``."""
    response = bytes(response)
    try:
        table = _decode_table(response)
    except Exception:
        raise ConnectionError_(502, f"response {erl_p(response)} invalid") from None
    if "LOGIN" not in table or "PASSWORD" not in table:
        raise ConnectionError_(502, f"AMQPLAIN auth info {_erl_table_w(table)} is missing "
                                    "LOGIN or PASSWORD field")
    login, password = table["LOGIN"], table["PASSWORD"]
    if not isinstance(login, (str, bytes)) or not isinstance(password, (str, bytes)):
        raise ConnectionError_(502, f"AMQPLAIN auth info {_erl_table_w(table)} uses "
                                    "unsupported type for LOGIN or PASSWORD field")
    return (login if isinstance(login, str) else _str(login),
            password if isinstance(password, str) else _str(password))


def _erl_table_w(table: Mapping) -> str:
    terms = []
    for k, v in table.items():
        t = "longstr" if isinstance(v, (bytes, bytearray)) else amqp_type_name(v)
        terms.append((_b(k), Atom(t), field_term(v, t)))
    return erl_w(terms)


# ----------------------------------------------------------------------------- loopback users


def is_loopback(host: str) -> bool:
    """rabbit_net:is_loopback/1: 127.0.0.0/8, ::1, and 127.x mapped into IPv6 (::ffff:127.x,
    which a dual-stack listener sees for an IPv4 loopback client)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def loopback_refused(user: str, host: str, loopback_users) -> bool:
    """rabbit_access_control:check_user_loopback/2, for every listener (AMQP, AMQPS, the
    management API): a user of ``loopback_users`` may log in only from a loopback address."""
    return user in loopback_users and not is_loopback(host)


# ----------------------------------------------------------------------------- refusals


def login_refused(mechanism: str, explanation: str, safe: bool = False) -> ConnectionError_:
    """rabbit_reader:auth_fail/5: ``ACCESS_REFUSED - PLAIN login refused: <explanation>``, or
    with ``safe`` ``Login was refused using authentication mechanism PLAIN. For details see
    the broker logfile.``

    RabbitMQ sends connection.close (with the safe text) only to a client whose
    client-properties capabilities have ``authentication_failure_close: true``; any other
    client just sees the socket closed (the unsafe text goes to the log). Errors while parsing
    the start-ok response (``parse_plain`` / ``parse_amqplain``) also end in a plain socket
    close in RabbitMQ 3.10, since the connection is still in the ``starting`` state."""
    if safe:
        return ConnectionError_(403, f"Login was refused using authentication mechanism "
                                     f"{mechanism}. For details see the broker logfile.")
    return ConnectionError_(403, f"{mechanism} login refused: {explanation}")


def resource_access_refused(kind: str, name: str, vhost: str, user: str) -> ChannelError:
    """``ACCESS_REFUSED - access to exchange 'amq.default' in vhost '/' refused for user
    'u'`` (the default exchange is named amq.default here too)."""
    if kind == "exchange" and name == "":
        name = "amq.default"
    return ChannelError(403, f"access to {rs(kind, name, vhost)} refused for user '{user}'")


def topic_access_refused(routing_key: str, exchange: str, vhost: str,
                         user: str) -> ChannelError:
    """rabbit_access_control:check_topic_access/4: ``ACCESS_REFUSED - access to topic 'rk' in
    exchange 'amq.topic' in vhost '/' refused for user 'u'`` (403)."""
    return ChannelError(403, f"access to topic '{routing_key}' in exchange "
                             f"{rs('topic', exchange, vhost)} refused for user '{user}'")


def vhost_access_refused(vhost: str, user: str) -> ConnectionError_:
    """connection.open to a vhost without access: ``NOT_ALLOWED - access to vhost '/'
    refused for user 'u'`` (530)."""
    return ConnectionError_(530, f"access to vhost '{vhost}' refused for user '{user}'")
