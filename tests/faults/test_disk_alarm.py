"""The disk alarm on a real small file system (issue 12): a node whose data dir lives on an
80 MB tmpfs blocks its publishers (connection.blocked "low on disk") once a file eats the space
below `disk_free_limit` (50 MB, RabbitMQ's default), and unblocks them once it is removed;
everything published arrives. Behaviour: R2.

Mounting a tmpfs needs root (CAP_SYS_ADMIN); without it the test is skipped and says so."""

from __future__ import annotations

import os
import subprocess

import pytest

from amqp_helpers import wait_until
from conftest import Broker

FS_MB = 80


@pytest.fixture
def small_fs(tmp_path):
    mount = tmp_path / "fs"
    mount.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={FS_MB}m", "tmpfs", str(mount)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {res.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_a_filling_file_system_blocks_publishers_until_space_returns__R2(small_fs):
    broker = Broker.start_leveret(small_fs / "node", port=None)
    try:
        setup = broker.connection()
        sch = setup.channel()
        sch.queue_declare("work", durable=True)
        pub = broker.connection()
        events: list = []
        pub.add_on_connection_blocked_callback(
            lambda _c, frame: events.append(("blocked", frame.method.reason)))
        pub.add_on_connection_unblocked_callback(lambda _c, _f: events.append(("unblocked",)))
        ch = pub.channel()
        ch.basic_publish("", "work", b"before")
        filler = small_fs / "filler"
        with open(filler, "wb") as f:  # leaves well under 50 MB free
            f.write(b"\0" * (40 * 1024 * 1024))
            f.flush()
            os.fsync(f.fileno())
        wait_until(lambda: "disk resource limit alarm" in broker.ctl("status").stdout,
                   timeout=15, interval=0.2)
        ch.basic_publish("", "work", b"during")
        wait_until(lambda: (pub.process_data_events(0.05), events)[1] ==
                   [("blocked", "low on disk")], timeout=15)
        filler.unlink()
        wait_until(lambda: (pub.process_data_events(0.05), events)[1][-1:] == [("unblocked",)],
                   timeout=15)
        ch.basic_publish("", "work", b"after")
        wait_until(lambda: sch.queue_declare("work", passive=True).method.message_count == 3,
                   timeout=10)
        pub.close()
        setup.close()
    finally:
        broker.stop()
