"""A lone node's files are its user's only whatever umask it was started with (issue 11,
docs/security.md): data dir and run folder (its ipc:// sockets) 0700, every file 0600."""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from pathlib import Path

import pika
import pytest

from conftest import Broker


@pytest.mark.parametrize("long_dir", [False, True], ids=["run-in-data-dir", "run-in-tmp"])
def test_a_lone_node_keeps_its_files_private_under_umask_000(tmp_path, long_dir):
    # a long data dir has its run folder in /tmp; a short one (a folder of our own in /tmp,
    # removed at the end: pytest's tmp_path may be long already) in <data_dir>/run
    short = Path(tempfile.mkdtemp(prefix="lv"))
    where = tmp_path / ("d" * 60) if long_dir else short / "n"
    where.mkdir()
    old = os.umask(0)  # the node inherits it
    try:
        broker = Broker.start_leveret(where, "--events", "full")
    finally:
        os.umask(old)
    try:
        with broker.connection() as c:
            ch = c.channel()
            ch.queue_declare("kept", durable=True)
            ch.confirm_delivery()
            ch.basic_publish("", "kept", b"x" * 10000, pika.BasicProperties(delivery_mode=2))
        broker.ctl("add_user", "modes", "modes-password")
        run_dir = json.loads((broker.data_dir / "node.json").read_text())["run_dir"]
        assert (os.path.dirname(run_dir) != str(broker.data_dir)) == long_dir, run_dir
        assert stat.S_IMODE(os.stat(run_dir).st_mode) == 0o700
        assert any(name.endswith(".sock") for name in os.listdir(run_dir))
        seen = set()
        for root, dirs, files in os.walk(broker.data_dir):
            assert stat.S_IMODE(os.stat(root).st_mode) == 0o700, root
            for name in files:
                st = os.lstat(os.path.join(root, name))
                seen.add(name)
                if not stat.S_ISSOCK(st.st_mode):
                    assert stat.S_IMODE(st.st_mode) == 0o600, (root, name, oct(st.st_mode))
        assert {"data.mdb", "node.json"} <= seen and any(n.endswith(".events") for n in seen)
    finally:
        broker.stop()
        shutil.rmtree(short, ignore_errors=True)
