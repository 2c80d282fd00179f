"""The connection's logic without IO: protocol header, handshake, channel 0, frame dispatch.

Mirrors rabbit_reader.erl's handshake (`handle_input`, `handle_method0`, `auth_phase`,
`validate_negotiated_integer_value`) and its error handling: a channel-level error is the
channel's business, anything else closes the connection with RabbitMQ's reply code and text.
The core acts only through its `ConnectionPort` (the callables the Reader gives it: `write`,
`opened`, `open_channel`, `channel_commands`, `channel_open`, `close_after`, `throttle` for
resource alarms, `terminate`, ...) and takes the messages it decides alone through `handle`.

Authentication: PLAIN and AMQPLAIN check the password; EXTERNAL (rabbitmq_auth_mechanism_ssl
with `ssl_cert_login_from = common_name`) takes the user name from the client certificate's
subject CN and checks only that the user exists. What the socket was (`TlsInfo`, from netio)
decides which mechanisms connection.start offers (`mechanisms`).

Limits before and after login, as rabbit_reader: frames are at most 4096 bytes until tune-ok
(`initial_frame_max`; a larger one before tune-ok gets no connection.close: the socket closes
after ?SILENT_CLOSE_DELAY, as RabbitMQ's handshake errors do), then the negotiated frame_max; a
command for a channel that is not open is refused at its method frame (504 "expected
'channel.open'", so a publish's content is never buffered for it); a content header announcing
more than `max_message_size` closes the channel with 406 at the header and its body is dropped
as it comes (protocol/frames.py CommandAssembler).
"""

from __future__ import annotations

import dataclasses
import logging
import platform
from typing import Callable

from actors import messages as m
from actors.core.channel import ConnInfo, RefusedPublish
from actors.core.errors import AMQPError, ChannelError, ConnectionError_, amqp_text
from actors.core.permissions import login_refused, loopback_refused, parse_amqplain, \
    parse_plain
from protocol import methods as am
from protocol.constants import PROTOCOL_HEADER
from protocol.codec_errors import AMQPError as CodecError
from protocol.codec_errors import BadProtocolHeader
from protocol.frames import (BodyFrame, Command, CommandAssembler, FrameDecoder, HeaderFrame,
                             HeartbeatFrame, MethodFrame, ProtocolHeader, encode_method)

log = logging.getLogger("leveret.connection")

VERSION = "0.1.0"
CAPABILITIES = {
    "publisher_confirms": True,
    "exchange_exchange_bindings": True,
    "basic.nack": True,
    "consumer_cancel_notify": True,
    "connection.blocked": True,
    "consumer_priorities": True,
    "authentication_failure_close": True,
    "per_consumer_qos": True,
    "direct_reply_to": True,
}
FRAME_MIN = 4096  # ?FRAME_MIN_SIZE: tune-ok may not go below it; the frame_max until tune-ok
SILENT_CLOSE_DELAY = 3  # rabbit_reader's ?SILENT_CLOSE_DELAY: seconds before a silent close
CLOSING_TIMEOUT = 30  # rabbit_reader's ?CLOSING_TIMEOUT: longest wait for the client to close
PASSWORD_MECHANISMS = ("AMQPLAIN", "PLAIN")  # offered on every connection
KNOWN_MECHANISMS = PASSWORD_MECHANISMS + ("EXTERNAL",)


@dataclasses.dataclass(frozen=True, slots=True)
class TlsInfo:
    """A TLS connection's facts once its handshake is done (actors/connection/tls.py: info)."""

    version: str  # "TLSv1.3", "TLSv1.2"
    cipher: str  # the negotiated cipher suite's name
    peer_subject: tuple | None  # the verified client certificate's subject, as
    # ssl.getpeercert() gives it: ((("commonName", "alice"),), ...); None without one
    # what the management API shows of the session, in RabbitMQ's forms (tls.py): the
    # suite's parts as Erlang's ssl names them, and the client certificate's subject, issuer
    # and validity as rabbit_ssl prints them ("" without a certificate)
    key_exchange: str = ""  # "ecdhe_rsa"; "any" under TLS 1.3
    cipher_name: str = ""  # "aes_256_gcm"
    hash: str = ""  # "aead", "sha384"
    cert_subject: str = ""  # "CN=alice,O=Example"
    cert_issuer: str = ""
    cert_validity: str = ""  # "2026-11-29T07:00:00Z - 2026-12-01T07:00:00Z"


def common_name(subject) -> str | None:
    """rabbit_ssl:peer_cert_auth_name(common_name, Cert): the subject's CN; several CNs are
    joined with "," as RabbitMQ does; None when the subject has none ("no name found")."""
    names = [value for rdn in subject or () for key, value in rdn if key == "commonName"]
    return ",".join(names) if names else None


def mechanisms(tls: TlsInfo | None) -> tuple[str, ...]:
    """The mechanisms connection.start offers (rabbit_reader:auth_mechanisms/1): the password
    ones always, EXTERNAL only on a TLS connection whose client sent a certificate that was
    verified (ssl_verify = verify_peer). RabbitMQ's rabbit_auth_mechanism_ssl offers it on
    every TLS connection and refuses at login when there is no certificate; offering it only
    when it can succeed keeps a client from choosing a mechanism that cannot work."""
    if tls is not None and tls.peer_subject:
        return PASSWORD_MECHANISMS + ("EXTERNAL",)
    return PASSWORD_MECHANISMS


def server_properties() -> dict:
    return {
        "product": "Leveret",
        "version": VERSION,
        "platform": f"Python {platform.python_version()}",
        "copyright": "Leveret contributors",
        "information": "AMQP 0-9-1 broker with RabbitMQ's process layout",
        "capabilities": CAPABILITIES,
        "cluster_name": "leveret@" + platform.node(),
    }


class HandshakeTimeout:
    """timers -> Reader: handshake_timeout has passed since the socket was accepted."""

    __slots__ = ()


@dataclasses.dataclass(frozen=True, slots=True)
class ConnectionPort:
    """What ConnectionCore may do outside itself: the Reader's callables, named one by one
    (as ChannelPort and QueuePort), so the core never reaches into its actor."""

    node: str  # the node's metadata address, for the channels' ConnInfo
    write: Callable[[bytes], None]  # frames to the Writer
    opened: Callable[[int], None]  # connection.open-ok sent: heartbeat seconds
    open_channel: Callable[[int, ConnInfo], None]  # start a channel actor
    channel_commands: Callable[[int, list], None]  # whole commands for one channel
    forget_channel: Callable[[int], None]  # channel.close(-ok) passed on: its number is free
    channel_open: Callable[[int], bool]  # has this number a channel actor
    channel_count: Callable[[], int]  # channels open now
    track_connection: Callable[[str, str, bool], None]  # (vhost, user, wait) to the node
    track_channel: Callable[[int, bool], None]  # (number, wait) to the node
    close_after: Callable[[float], None]  # tear down after that many seconds at the latest
    throttle: Callable[[bool], None]  # stop / resume reading the socket (resource alarms)
    terminate: Callable[..., None]  # (why, linger=0.0): tear the connection down now

    @classmethod
    def of(cls, shell, node: str) -> ConnectionPort:
        """The port of an object that has every callable by its name (the Reader)."""
        return cls(node, **{f.name: getattr(shell, f.name) for f in dataclasses.fields(cls)
                            if f.name != "node"})


def _frames_of(cmd: Command) -> list:
    """The method, header and body frames a whole publish was decoded from."""
    channel, method, props_raw, body = cmd
    cache = cmd[4]  # the properties decoded once (Command iterates its public fields only)
    frames = [MethodFrame(channel, method),
              tuple.__new__(HeaderFrame, (channel, method.CLASS_ID, len(body), props_raw, 0, cache))]
    if body:
        frames.append(BodyFrame(channel, body))
    return frames


class ConnectionCore:
    def __init__(self, config, replica, peer, conn_id, out: ConnectionPort,
                 tls: TlsInfo | None = None, over_limit: bool = False):
        self.config = config  # node configuration (tune values, loopback users)
        self.replica = replica  # users, vhosts, permissions
        self.peer = peer  # (host, port)
        self.conn_id = conn_id  # connection id
        self.out = out  # what the core may do: the Reader's callables
        self.decoder = FrameDecoder(FRAME_MIN)  # sans-IO frame decoder; frame_max set at tune-ok
        self.decoder.pause_on_channel0 = True  # until tune-ok: see receive
        self.decoder.fuse_publish = True  # a publish in one piece comes as a Command: _frame
        # content of every channel, reassembled; refuses a header above max_message_size
        self.assembler = CommandAssembler(max_body_size=config.max_message_size)
        self.state = "header"  # header|start|tune|open|running|closing|closed
        # why the broker closed it (its connection.close's code and text), the event log's
        # reason once the client answers: a client's close crossing it is not the client's
        self.closed_why = ""
        self.user = None  # authenticated user
        self.vhost = None  # opened vhost
        self.client_properties: dict = {}  # from start-ok
        self.capabilities: dict = {}  # client capabilities
        self.frame_max = config.frame_max  # negotiated
        self.channel_max = config.channel_max  # negotiated
        self.heartbeat = 0  # negotiated seconds
        self.mechanism = "PLAIN"  # chosen authentication mechanism
        self.closing_channels: set = set()  # closed by the client, close-ok not yet seen by it
        self.alarms: tuple = ()  # the node's resource alarms on ("memory", "disk")
        # rabbit_reader's throttle: with an alarm on, the connection is "blocking" until it
        # publishes, then "blocked" (its socket not read) until every alarm clears
        self.alarm_blocked = False
        self.tls = tls  # the TLS handshake's facts; None on plain TCP
        self.over_limit = over_limit  # the node had max_connections open when this one came
        self.admitting = False  # connection.open waits for the node's count (vhost/user limits)
        self.unconfirmed: set = set()  # channels whose open-ok waits for the user's count

    # --- input --------------------------------------------------------------------------------
    def handle(self, msg) -> None:
        """The one entry for the messages the core decides alone (`HANDLES`)."""
        _HANDLERS[type(msg)](self, msg)

    def receive(self, data: bytes) -> None:
        if self.state == "closed":
            return
        self.decoder.feed(data)
        # until tune-ok the decoder stops after each connection method, so that what a client
        # sends after tune-ok in the same read is measured against the frame_max it sets
        while True:
            paused = self.decoder.pause_on_channel0
            if not self._decode() or not paused:
                return

    def _decode(self) -> bool:
        """Handle the frames now decodable; False when there were none or the connection
        ended."""
        batches: dict[int, list] = {}
        try:
            try:
                frames = self.decoder.frames()
            except (CodecError, AMQPError) as e:
                # RabbitMQ handles the frames before the bad one, then fails
                for frame in getattr(e, "frames", ()):
                    if self.state == "closed":
                        break
                    self._frame(frame, batches)
                raise
            for frame in frames:
                if self.state == "closed":
                    break
                self._frame(frame, batches)
        except BadProtocolHeader:
            self.out.write(PROTOCOL_HEADER)
            self._flush(batches)
            self.state = "closed"
            self.out.terminate("bad protocol header")
            return False
        except (CodecError, AMQPError) as e:
            self._flush(batches)
            if self.state in ("start", "tune") and e.reply_code == 501:
                self._silent_close(e.text)
                return False
            self.close(e.reply_code, e.text if " - " in e.text else amqp_text(
                e.reply_code, e.text), getattr(e, "class_id", 0), getattr(e, "method_id", 0))
            return False
        self._flush(batches)
        return bool(frames) and self.state not in ("closing", "closed")

    def _flush(self, batches) -> None:
        for number, commands in batches.items():
            self.out.channel_commands(number, commands)
            if self.alarms and not self.alarm_blocked and \
                    any(getattr(c, "body", None) is not None for c in commands):
                self._block_for_alarm()

    # --- resource alarms ------------------------------------------------------------------------
    def set_alarms(self, alarms) -> None:
        """The node's alarms changed: a connection blocked by them is read again once none is
        on (connection.unblocked); one that has not published stays free until it does."""
        self.alarms = tuple(alarms)
        if self.alarm_blocked and not self.alarms:
            self.alarm_blocked = False
            if self.capabilities.get("connection.blocked"):
                self.out.write(encode_method(0, am.ConnectionUnblocked()))
            self.out.throttle(False)

    def _block_for_alarm(self) -> None:
        self.alarm_blocked = True
        if self.capabilities.get("connection.blocked"):
            # rabbit_reader: "low on memory", "low on disk", "low on memory & disk"
            reason = "low on " + " & ".join(a for a in ("memory", "disk") if a in self.alarms)
            self.out.write(encode_method(0, am.ConnectionBlocked(reason=reason)))
        self.out.throttle(True)

    def _frame(self, frame, batches) -> None:
        if type(frame) is Command:
            # a basic.publish the decoder found whole, with its header and body (the hot path);
            # anything that is not plain goes frame by frame through the checks below
            channel = frame[0]
            assembler = self.assembler
            size = len(frame[3])
            if self.state == "running" and channel not in self.closing_channels and \
                    not assembler.in_progress(channel) and size <= assembler.max_msg_size and \
                    (assembler.max_body_size is None or size <= assembler.max_body_size) and \
                    self.out.channel_open(channel):
                cmds = batches.get(channel)
                if cmds is None:
                    batches[channel] = [frame]
                else:
                    cmds.append(frame)
                return
            for part in _frames_of(frame):
                self._frame(part, batches)
            return
        if isinstance(frame, ProtocolHeader):
            if self.state != "header":
                raise ConnectionError_(501, "unexpected protocol header")
            if not frame.is_amqp_0_9_1:
                raise BadProtocolHeader(501, "bad protocol header")
            self._start()
            return
        if isinstance(frame, HeartbeatFrame):
            return
        channel = frame.channel
        if channel == 0:
            if not isinstance(frame, MethodFrame):
                raise ConnectionError_(504, "unexpected content frame on channel 0")
            self._method0(frame.method)
            return
        if self.state == "closing":
            return
        if self.state != "running":
            raise ConnectionError_(504, f"frame on channel {channel} before connection.open")
        if channel in self.closing_channels:
            # the client closed this channel and waits for close-ok: what it sent meanwhile is
            # dropped unread, as RabbitMQ does, until it opens the number again
            if type(frame) is not MethodFrame or not isinstance(frame.method, am.ChannelOpen):
                return
            self.closing_channels.discard(channel)
        if type(frame) is MethodFrame and not self.out.channel_open(channel):
            self._unopened(channel, frame.method, batches)
            return
        try:
            # a content frame on a channel that is not open has no method before it: 505
            cmd = self.assembler.process(frame)
        except CodecError as e:
            if e.hard:
                raise
            # max_message_size, decided at the content header: the channel closes with 406 in
            # order with the commands before it (rabbit_channel:check_msg_size)
            batches.setdefault(channel, []).append(Command(channel, RefusedPublish(
                ChannelError(e.reply_code, e.text, e.class_id, e.method_id))))
            return
        if cmd is None:
            return
        method = cmd.method
        if isinstance(method, am.ChannelOpen):
            raise ConnectionError_(504, "second 'channel.open' seen", method.CLASS_ID,
                                   method.METHOD_ID)
        batches.setdefault(channel, []).append(cmd)
        if isinstance(method, am.ChannelClose):
            self.closing_channels.add(channel)
        if isinstance(method, (am.ChannelClose, am.ChannelCloseOk)):
            # the number is free for the client as soon as it sees close-ok: forget it now
            self._flush(batches)
            batches.clear()
            self.out.forget_channel(channel)

    def _unopened(self, channel: int, method, batches) -> None:
        """A method on a channel that is not open: channel.open, a close to answer, or 504."""
        if isinstance(method, am.ChannelOpen):
            # rabbit_reader:create_channel/2 counts the open channels; the number itself may
            # be above channel_max (RabbitMQ 3.10 takes any number up to 65535)
            count = self.out.channel_count()
            if self.channel_max and count >= self.channel_max:
                raise ConnectionError_(530, f"number of channels opened ({count}) has reached "
                                            f"the negotiated channel_max ({self.channel_max})")
            self._flush(batches)
            batches.clear()
            self.assembler.reset(channel)
            self.out.open_channel(channel, ConnInfo(
                self.conn_id, self.user, self.vhost, self.frame_max, self.capabilities,
                self.out.node))
            # counted by the node for user limits; with max-channels set the open-ok waits
            # for its answer (channel_admitted)
            wait = self._limits("user", self.user) is not None and \
                "max-channels" in self._limits("user", self.user)
            self.out.track_channel(channel, wait)
            if wait:
                self.unconfirmed.add(channel)
            else:
                self.out.write(encode_method(channel, am.ChannelOpenOk()))
            return
        if isinstance(method, am.ChannelCloseOk):
            return
        if isinstance(method, am.ChannelClose):
            self.out.write(encode_method(channel, am.ChannelCloseOk()))
            return
        # rabbit_channel's answer to a first method other than channel.open; given here, at
        # the method frame, a publish's content is not read at all (RabbitMQ reassembles it
        # first: 200 MB of body frames on a channel never opened were buffered)
        raise ConnectionError_(504, "expected 'channel.open'", method.CLASS_ID,
                               method.METHOD_ID)

    # --- handshake ----------------------------------------------------------------------------
    def _start(self) -> None:
        self.state = "start"
        self.out.write(encode_method(0, am.ConnectionStart(
            version_major=0, version_minor=9, server_properties=server_properties(),
            mechanisms=" ".join(mechanisms(self.tls)), locales="en_US")))

    def _method0(self, method) -> None:
        state = self.state
        if isinstance(method, am.ConnectionClose):
            self.out.write(encode_method(0, am.ConnectionCloseOk()))
            self.state = "closed"
            # rabbit_reader:close_connection: after close-ok the socket is the client's to
            # close; it is closed by the broker only after the heartbeat timeout, at most
            # ?CLOSING_TIMEOUT. What the client's other threads still send meanwhile is dropped.
            hb = self.heartbeat
            self.out.terminate(self.closed_why or "closed by client",
                               linger=hb if 0 < hb < CLOSING_TIMEOUT else CLOSING_TIMEOUT)
            return
        if isinstance(method, am.ConnectionCloseOk):
            if state == "closing":
                self.state = "closed"
                self.out.terminate(self.closed_why)
            return
        if state == "closing":
            return
        if state == "start" and isinstance(method, am.ConnectionStartOk):
            self._start_ok(method)
        elif state == "tune" and isinstance(method, am.ConnectionTuneOk):
            self._tune_ok(method)
        elif state == "open" and isinstance(method, am.ConnectionOpen):
            self._open(method)
        elif state == "running" and isinstance(method, am.ConnectionUpdateSecret):
            self.out.write(encode_method(0, am.ConnectionUpdateSecretOk()))
        elif state == "running" and isinstance(method, (am.ConnectionBlocked,
                                                        am.ConnectionUnblocked)):
            raise ConnectionError_(540, f"{method.NAME} from a client", method.CLASS_ID,
                                   method.METHOD_ID)
        elif state == "running":
            # rabbit_reader:handle_method0's fallback, for any method out of place
            raise ConnectionError_(504, "unexpected method in connection state running",
                                   method.CLASS_ID, method.METHOD_ID)
        else:
            raise ConnectionError_(503, f"unexpected method {method.NAME} in state {state}",
                                   method.CLASS_ID, method.METHOD_ID)

    def _start_ok(self, method) -> None:
        self.client_properties = method.client_properties or {}
        caps = self.client_properties.get("capabilities")
        self.capabilities = caps if isinstance(caps, dict) else {}
        mech = method.mechanism
        self.mechanism = mech
        response = method.response
        if isinstance(response, str):
            response = response.encode("utf-8", "surrogateescape")
        if mech not in KNOWN_MECHANISMS:
            raise ConnectionError_(503, f"unknown authentication mechanism '{mech}'",
                                   method.CLASS_ID, method.METHOD_ID)
        if mech not in mechanisms(self.tls):
            raise ConnectionError_(503, f"invalid authentication mechanism '{mech}'",
                                   method.CLASS_ID, method.METHOD_ID)
        if mech == "EXTERNAL":
            user, why = self._external()
            ok = why is None
        else:
            creds = parse_plain(response) if mech == "PLAIN" else parse_amqplain(response)
            user, password = creds if creds else (None, None)
            ok = user is not None and self.replica.auth.check_password(user, password)
            why = None
        if ok and loopback_refused(user, self.peer[0], self.config.loopback_users):
            log.warning("user '%s' can only connect via localhost", user)
            ok = False
        if not ok:
            if why is not None:
                log.warning("login refused from %s: %s", self.peer[0],
                            login_refused(mech, why).text)
            else:
                log.warning("login refused for user '%s' from %s: mechanism %s", user,
                            self.peer[0], mech)
            text = amqp_text(403, f"Login was refused using authentication mechanism {mech}. "
                                  "For details see the broker logfile.")
            if self.capabilities.get("authentication_failure_close"):
                self.close(403, text, method.CLASS_ID, method.METHOD_ID)
            else:
                self.state = "closed"
                self.out.terminate("authentication failed")
            return
        self.user = user
        self.state = "tune"
        self.out.write(encode_method(0, am.ConnectionTune(
            channel_max=self.config.channel_max, frame_max=self.config.frame_max,
            heartbeat=self.config.heartbeat)))

    def _external(self) -> tuple[str | None, str | None]:
        """rabbit_auth_mechanism_ssl: (user, None) when the certificate's CN names a user that
        exists (no password: the certificate is the credential), else (user, explanation)."""
        user = common_name(self.tls.peer_subject)
        if user is None:
            return None, "no name found"
        if not self.replica.auth.user_exists(user):
            return user, f"user '{user}' - invalid credentials"
        return user, None

    @staticmethod
    def _negotiation_failure(field: str, minimum: int, server: int, client: int) -> str | None:
        """rabbit_reader:validate_negotiated_integer_value/3: a value under the minimum, or
        above the server's (0, "no limit", is above any limit the server sets)."""
        detail = " (no limit)" if field == "channel_max" and client == 0 else ""
        if client != 0 and client < minimum:
            return (f"negotiated {field} = {client}{detail} is lower than the minimum allowed "
                    f"value ({minimum})")
        if server != 0 and (client == 0 or client > server):
            return (f"negotiated {field} = {client}{detail} is higher than the maximum allowed "
                    f"value ({server})")
        return None

    def _tune_ok(self, method) -> None:
        fm, cm = method.frame_max, method.channel_max
        why = self._negotiation_failure("frame_max", FRAME_MIN, self.config.frame_max, fm) or \
            self._negotiation_failure("channel_max", 1, self.config.channel_max, cm)
        if why is not None:
            # RabbitMQ 3.10 logs "failed to negotiate connection parameters: ..." and closes
            # the socket without connection.close, as for the other failures before open
            self._silent_close(f"failed to negotiate connection parameters: {why}")
            return
        self.frame_max = fm or self.config.frame_max
        self.channel_max = cm or self.config.channel_max
        self.heartbeat = method.heartbeat
        self.decoder.set_frame_max(self.frame_max)
        self.decoder.pause_on_channel0 = False
        self.state = "open"

    def _open(self, method) -> None:
        vhost = method.virtual_host
        auth = self.replica.auth
        if self.over_limit:  # rabbit_reader:is_over_node_connection_limit (RabbitMQ 3.11+)
            raise ConnectionError_(530, "connection refused: node connection limit "
                                        f"({self.config.max_connections}) is reached",
                                   method.CLASS_ID, method.METHOD_ID)
        if vhost not in auth.list_vhosts():
            raise ConnectionError_(530, f"vhost {vhost} not found", method.CLASS_ID,
                                   method.METHOD_ID)
        if not auth.check_vhost(self.user, vhost):
            raise ConnectionError_(530, f"access to vhost '{vhost}' refused for user "
                                        f"'{self.user}'", method.CLASS_ID, method.METHOD_ID)
        self.vhost = vhost
        # counted by the node (vhost and user limits): with a limit set, open-ok waits for its
        # answer (admitted)
        wait = self._limits("vhost", vhost) is not None or \
            self._limits("user", self.user) is not None
        self.out.track_connection(vhost, self.user, wait)
        if wait:
            self.admitting = True
            return
        self._opened()

    def _limits(self, scope: str, name) -> dict | None:
        lim = getattr(self.replica, "limits", {}).get((scope, name))
        return lim or None

    def _opened(self) -> None:
        self.state = "running"
        self.out.write(encode_method(0, am.ConnectionOpenOk()))
        self.out.opened(self.heartbeat)

    def admitted(self, ok: bool, code: int = 0, text: str = "") -> None:
        """The node's answer to a connection that waited for its count."""
        if not self.admitting or self.state != "open":
            return
        self.admitting = False
        if ok:
            self._opened()
        else:
            self.close(code, text, am.ConnectionOpen.CLASS_ID, am.ConnectionOpen.METHOD_ID)

    def channel_admitted(self, channel: int, ok: bool, code: int = 0, text: str = "") -> None:
        """The node's answer to a channel.open that waited for the user's channel count."""
        if channel not in self.unconfirmed or self.state != "running":
            return
        self.unconfirmed.discard(channel)
        if ok:
            self.out.write(encode_method(channel, am.ChannelOpenOk()))
        else:
            self.close(code, text, am.ChannelOpen.CLASS_ID, am.ChannelOpen.METHOD_ID)

    # --- time limits --------------------------------------------------------------------------
    def handshake_timeout(self) -> None:
        """handshake_timeout seconds after the socket was accepted (rabbit_reader's
        handshake_timeout): a connection not yet past connection.open-ok is dropped, with no
        connection.close (the peer may not speak AMQP at all)."""
        if self.state in ("running", "closing", "closed"):
            return
        waiting = "handshake" if self.state == "header" else "frame_header"
        log.warning("closing AMQP connection %s (%s:%s): {handshake_timeout,%s} (%s s)",
                    self.conn_id, self.peer[0], self.peer[1], waiting,
                    self.config.handshake_timeout)
        self.state = "closed"
        self.out.terminate("handshake_timeout")

    # --- closing ------------------------------------------------------------------------------
    def _silent_close(self, why: str) -> None:
        """rabbit_reader:handle_exception/3 before tune-ok: no connection.close to a client not
        yet trusted; nothing more is read and the socket closes after SILENT_CLOSE_DELAY."""
        log.warning("closing connection %s from %s before tune-ok: %s", self.conn_id,
                    self.peer[0], why)
        self.state = "closed"
        self.out.close_after(SILENT_CLOSE_DELAY)

    def close(self, code: int, text: str, class_id: int = 0, method_id: int = 0) -> None:
        """Server-initiated connection.close; the socket closes on close-ok or after 1 s."""
        if self.state in ("closing", "closed"):
            return
        if self.state == "header":
            self.state = "closed"
            self.out.terminate(text)
            return
        log.warning("closing connection %s: %s", self.conn_id, text)
        self.state = "closing"
        self.closed_why = f"closed by the broker: {code} {text}"
        self.out.write(encode_method(0, am.ConnectionClose(
            reply_code=code, reply_text=text, class_id=class_id, method_id=method_id)))
        self.out.close_after(1.0)


def _admitted(core: ConnectionCore, msg: m.Admitted) -> None:
    if msg.channel:
        core.channel_admitted(msg.channel, msg.ok, msg.code, msg.text)
    else:
        core.admitted(msg.ok, msg.code, msg.text)


# message type -> what the core does with it (the Reader routes `HANDLES` here)
_HANDLERS: dict[type, Callable] = {
    m.Admitted: _admitted,
    m.ResourceAlarm: lambda core, msg: core.set_alarms(msg.alarms),
    m.CloseConnection: lambda core, msg: core.close(msg.code, msg.text, msg.class_id,
                                                    msg.method_id),
    m.Shutdown: lambda core, msg: core.close(
        320, "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'"),
    HandshakeTimeout: lambda core, msg: core.handshake_timeout(),
}
HANDLES = frozenset(_HANDLERS)
