"""actors/core/connection.py's part for AMQPS and pre-login limits, without IO: which
mechanisms connection.start offers (`mechanisms`), the user name taken from a certificate
subject (`common_name`), EXTERNAL logins (E3), the node connection limit at connection.open
(R3) and handshake_timeout."""

import pytest

from actors.core.connection import ConnectionCore, TlsInfo, common_name, mechanisms
from core_fakes import FakeShell, config, frame, make_replica
from protocol import methods as am
from protocol.constants import PROTOCOL_HEADER
from test_core_connection import CAPS, LOCAL, conn_close, start_ok, tune_ok

ALICE = ((("countryName", "FR"),), (("organizationName", "Leveret"),),
         (("commonName", "alice"),))
SECURED = TlsInfo("TLSv1.3", "TLS_AES_256_GCM_SHA384", ALICE)
NO_CERT = TlsInfo("TLSv1.3", "TLS_AES_256_GCM_SHA384", None)


def mk(tls=None, over_limit=False, replica=None, peer=LOCAL, **cfg):
    shell = FakeShell()
    core = ConnectionCore(config(**cfg), replica or make_replica(), peer, "w1/7", shell.port(),
                          tls=tls, over_limit=over_limit)
    return core, shell


def with_alice(perms=True):
    r = make_replica()
    r.auth.add_user("alice", "irrelevant")
    if perms:
        r.auth.set_permissions("alice", "/", ".*", ".*", ".*")
    return r


def external(caps=CAPS):
    return start_ok("EXTERNAL", b"", caps=caps)


def offered(shell) -> str:
    starts = [x for x in shell.methods() if isinstance(x, am.ConnectionStart)]
    assert len(starts) == 1, shell.events
    return starts[0].mechanisms


# --- pure helpers ---------------------------------------------------------------------------
def test_common_name_of_a_subject():
    assert common_name(ALICE) == "alice"


def test_several_common_names_are_joined_with_commas():
    subject = ((("commonName", "a"),), (("commonName", "b"),))
    assert common_name(subject) == "a,b"


@pytest.mark.parametrize("subject", [None, (), ((("organizationName", "Leveret"),),)])
def test_no_common_name(subject):
    assert common_name(subject) is None


def test_external_is_offered_only_with_a_verified_client_certificate():
    assert mechanisms(None) == ("AMQPLAIN", "PLAIN")
    assert mechanisms(NO_CERT) == ("AMQPLAIN", "PLAIN")
    assert mechanisms(SECURED) == ("AMQPLAIN", "PLAIN", "EXTERNAL")


# --- connection.start -----------------------------------------------------------------------
@pytest.mark.parametrize("tls, expected", [(None, "AMQPLAIN PLAIN"),
                                           (NO_CERT, "AMQPLAIN PLAIN"),
                                           (SECURED, "AMQPLAIN PLAIN EXTERNAL")])
def test_connection_start_lists_the_mechanisms(tls, expected):
    core, shell = mk(tls=tls)
    core.receive(PROTOCOL_HEADER)
    assert offered(shell) == expected


# --- EXTERNAL -------------------------------------------------------------------------------
def test_external_login_takes_the_user_from_the_certificate_cn():
    core, shell = mk(tls=SECURED, replica=with_alice())
    core.receive(PROTOCOL_HEADER + external() + tune_ok() +
                 frame(0, am.ConnectionOpen(virtual_host="/")))
    assert core.state == "running", shell.events
    assert core.user == "alice"
    assert core.mechanism == "EXTERNAL"


def test_external_needs_no_password_whatever_the_response():
    core, shell = mk(tls=SECURED, replica=with_alice())
    core.receive(PROTOCOL_HEADER + start_ok("EXTERNAL", b"\x00bob\x00wrong"))
    assert core.state == "tune" and core.user == "alice"


def test_external_unknown_user_is_access_refused__E3(caplog):
    core, shell = mk(tls=SECURED)
    core.receive(PROTOCOL_HEADER + external())
    assert conn_close(shell) == (403, "ACCESS_REFUSED - Login was refused using "
                                 "authentication mechanism EXTERNAL. For details see the "
                                 "broker logfile.", 10, 11)
    assert "EXTERNAL login refused: user 'alice' - invalid credentials" in caplog.text


def test_external_refusal_without_the_capability_drops_the_connection__E3():
    core, shell = mk(tls=SECURED)
    core.receive(PROTOCOL_HEADER + external(caps={}))
    assert ("terminate", "authentication failed") in shell.events
    assert not [x for x in shell.methods() if isinstance(x, am.ConnectionClose)]


def test_external_certificate_without_cn_is_refused__E3(caplog):
    core, shell = mk(tls=TlsInfo("TLSv1.2", "x", ((("organizationName", "L"),),)))
    core.receive(PROTOCOL_HEADER + external())
    assert conn_close(shell)[0] == 403
    assert "EXTERNAL login refused: no name found" in caplog.text


def test_external_user_still_needs_vhost_access__E3():
    core, shell = mk(tls=SECURED, replica=with_alice(perms=False))
    core.receive(PROTOCOL_HEADER + external() + tune_ok() +
                 frame(0, am.ConnectionOpen(virtual_host="/")))
    assert conn_close(shell) == (530, "NOT_ALLOWED - access to vhost '/' refused for user "
                                      "'alice'", 10, 40)


def test_external_loopback_user_from_a_remote_host_is_refused__E3():
    r = make_replica()
    core, shell = mk(tls=TlsInfo("TLSv1.3", "x", ((("commonName", "guest"),),)), replica=r,
                     peer=("10.1.2.3", 5000))
    core.receive(PROTOCOL_HEADER + external())
    assert conn_close(shell)[0] == 403


@pytest.mark.parametrize("tls", [None, NO_CERT])
def test_external_not_offered_is_an_invalid_mechanism(tls):
    core, shell = mk(tls=tls, replica=with_alice())
    core.receive(PROTOCOL_HEADER + external())
    assert conn_close(shell) == (503, "COMMAND_INVALID - invalid authentication mechanism "
                                      "'EXTERNAL'", 10, 11)
    assert core.user is None


def test_password_logins_still_work_over_tls():
    core, shell = mk(tls=SECURED)
    core.receive(PROTOCOL_HEADER + start_ok() + tune_ok() +
                 frame(0, am.ConnectionOpen(virtual_host="/")))
    assert core.state == "running" and core.user == "guest"


# --- node connection limit (R3) -------------------------------------------------------------
def test_over_the_node_connection_limit_is_refused_at_open__R3():
    core, shell = mk(over_limit=True, max_connections=2)
    core.receive(PROTOCOL_HEADER + start_ok() + tune_ok() +
                 frame(0, am.ConnectionOpen(virtual_host="/")))
    assert conn_close(shell) == (530, "NOT_ALLOWED - connection refused: node connection "
                                      "limit (2) is reached", 10, 40)
    assert core.state == "closing"
    assert not [x for x in shell.methods() if isinstance(x, am.ConnectionOpenOk)]


def test_under_the_limit_opens__R3():
    core, shell = mk(over_limit=False, max_connections=2)
    core.receive(PROTOCOL_HEADER + start_ok() + tune_ok() +
                 frame(0, am.ConnectionOpen(virtual_host="/")))
    assert core.state == "running"


# --- handshake_timeout ----------------------------------------------------------------------
@pytest.mark.parametrize("sent, waiting", [
    (b"", "handshake"),
    (PROTOCOL_HEADER, "frame_header"),
    (PROTOCOL_HEADER + start_ok(), "frame_header"),
    (PROTOCOL_HEADER + start_ok() + tune_ok(), "frame_header"),
])
def test_handshake_timeout_before_open_ok_drops_the_connection(sent, waiting, caplog):
    core, shell = mk()
    core.receive(sent)
    shell.clear()
    core.handshake_timeout()
    assert shell.events == [("terminate", "handshake_timeout")]  # no connection.close
    assert core.state == "closed"
    assert f"{{handshake_timeout,{waiting}}}" in caplog.text


def test_handshake_timeout_after_open_ok_does_nothing():
    core, shell = mk()
    core.receive(PROTOCOL_HEADER + start_ok() + tune_ok() +
                 frame(0, am.ConnectionOpen(virtual_host="/")))
    shell.clear()
    core.handshake_timeout()
    assert shell.events == [] and core.state == "running"


def test_handshake_timeout_while_closing_leaves_the_close_to_its_own_timer():
    core, shell = mk()
    core.receive(PROTOCOL_HEADER + start_ok(response=b"\x00guest\x00wrong"))
    assert core.state == "closing"
    shell.clear()
    core.handshake_timeout()
    assert shell.events == []
