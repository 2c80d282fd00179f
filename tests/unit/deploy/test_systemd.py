"""deploy/systemd: the units pass `systemd-analyze verify`, and the node speaks sd_notify
(Type=notify: READY=1 once it listens, WATCHDOG=1 keep-alives, STOPPING=1)."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from conftest import free_port

REPO = Path(__file__).resolve().parents[3]
UNITS = REPO / "deploy" / "systemd"
SERVER = REPO / ".venv" / "bin" / "leveret-server"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                    reason="systemd-analyze is not installed (apt-get install systemd)")
def test_units_pass_systemd_analyze_verify(tmp_path):
    # an instance of the template, with ExecStart pointing at this checkout's server
    unit = (UNITS / "leveret@.service").read_text()
    assert "Type=notify" in unit and "WatchdogSec=" in unit and "NoNewPrivileges=yes" in unit
    (tmp_path / "leveret@node1.service").write_text(
        unit.replace("/opt/leveret/.venv/bin/leveret-server", str(SERVER)))
    shutil.copy(UNITS / "leveret.target", tmp_path / "leveret.target")
    out = subprocess.run(["systemd-analyze", "verify", "--man=no", "./leveret@node1.service",
                          "./leveret.target"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "leveret@node1.service" not in out.stderr, out.stderr   # no warnings about it


def test_node_notifies_ready_watchdog_and_stopping(tmp_path):
    path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(0.5)
    env = dict(os.environ, NOTIFY_SOCKET=path, WATCHDOG_USEC="1000000")
    env.pop("WATCHDOG_PID", None)
    proc = subprocess.Popen([str(SERVER), "--port", str(free_port()), "--data-dir",
                             str(tmp_path / "data"), "--management-port", "0", "--prometheus-port", "0"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    got = []

    def read_until(word, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                got.append(sock.recv(4096).decode())
            except socket.timeout:
                continue
            if word in got[-1]:
                return True
        return False

    try:
        assert read_until("READY=1", 60), got
        assert read_until("WATCHDOG=1", 10), got           # every WatchdogSec/2
        assert got.index(next(g for g in got if "READY=1" in g)) < \
            got.index(next(g for g in got if "WATCHDOG=1" in g))
        proc.send_signal(signal.SIGTERM)
        assert read_until("STOPPING=1", 30), got
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        sock.close()


def test_the_unit_and_install_script_keep_the_data_dir_private():
    """issue 11: the data dir 0700 (StateDirectoryMode), nothing world-readable made by the
    service (UMask), install.sh's folders 0700 and node configs (they may hold cluster_secret)
    0640 root:leveret."""
    unit = (UNITS / "leveret@.service").read_text().splitlines()
    assert "UMask=0027" in unit and "StateDirectoryMode=0700" in unit
    script = (UNITS / "install.sh").read_text()
    assert 'install -d -o leveret -g leveret -m 0700 "/var/lib/leveret/$name"' in script
    assert 'chmod 0640 "$conf"' in script and "(umask 027; sed" in script
    assert subprocess.run(["bash", "-n", str(UNITS / "install.sh")]).returncode == 0
