"""bench/procio.py: bytes written by a process tree, from /proc/PID/io, and the CPU it spent."""
import os
import subprocess
import sys
import time

from bench.procio import IoWindow, delta, tree_write_bytes, write_bytes
from bench.result_tables import single_table


def test_delta_counts_new_processes_from_zero_and_drops_ended_ones():
    assert delta({1: 100, 2: 50}, {1: 400, 3: 70}) == 300 + 70


def test_a_child_that_writes_and_fsyncs_is_counted(tmp_path):
    path = tmp_path / "f"
    code = ("import os,sys,time\n"
            f"fd=os.open({str(path)!r}, os.O_WRONLY|os.O_CREAT)\n"
            "sys.stdout.write('r\\n'); sys.stdout.flush(); sys.stdin.readline()\n"
            "os.write(fd, b'x'*(1<<20)); os.fsync(fd)\n"
            "sys.stdout.write('w\\n'); sys.stdout.flush(); sys.stdin.readline()\n")
    parent = subprocess.Popen([sys.executable, "-c",
                               "import subprocess,sys;"
                               f"subprocess.run([sys.executable,'-c',{code!r}])"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout.readline() == "r\n"
        before = tree_write_bytes(parent.pid)
        assert len(before) == 2 and parent.pid in before
        parent.stdin.write("\n")
        parent.stdin.flush()
        assert parent.stdout.readline() == "w\n"
        after = tree_write_bytes(parent.pid)
        assert delta(before, after) >= 1 << 20
        w = IoWindow(parent.pid, time.monotonic(), time.monotonic()).start()
        assert w.result()["processes"] == 2
        parent.stdin.write("\n")
        parent.stdin.flush()
    finally:
        parent.wait(10)
    assert write_bytes(parent.pid) is None


def test_bytes_per_message_shown_for_persistent_scenarios_only():
    rows = [{"title": "p", "settings": {"persistent": True}, "publish_rate": 1.0,
             "consume_rate": 1.0, "bytes_per_msg": 1234},
            {"title": "t", "settings": {"persistent": False}, "publish_rate": 1.0,
             "consume_rate": 1.0, "bytes_per_msg": 99}]
    table = single_table(rows).splitlines()
    assert "bytes written / msg" in table[0]
    assert "| 1,234 |" in table[2] and table[3].endswith("| – | – |")


def test_disk_bytes_of_the_temp_directory_s_device(tmp_path):
    from bench.procio import disk_bytes
    before = disk_bytes(str(tmp_path))
    assert before is not None and before >= 0
    assert disk_bytes(str(tmp_path)) >= before


def test_a_child_s_cpu_is_counted_in_its_parent_s_tree():
    from bench.procio import cpu_seconds, tree_cpu_seconds
    spin = ("import sys,time\n"
            "sys.stdout.write('r\\n'); sys.stdout.flush(); sys.stdin.readline()\n"
            "t=time.process_time()\n"
            "while time.process_time()-t < 0.3: pass\n"
            "sys.stdout.write('s\\n'); sys.stdout.flush(); sys.stdin.readline()\n")
    parent = subprocess.Popen([sys.executable, "-c",
                               "import subprocess,sys;"
                               f"subprocess.run([sys.executable,'-c',{spin!r}])"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout.readline() == "r\n"
        before = tree_cpu_seconds(parent.pid)
        assert len(before) == 2
        parent.stdin.write("\n")
        parent.stdin.flush()
        assert parent.stdout.readline() == "s\n"
        spent = delta(before, tree_cpu_seconds(parent.pid))
        assert 0.25 <= spent < 5.0
        parent.stdin.write("\n")
        parent.stdin.flush()
    finally:
        parent.wait(10)
    assert cpu_seconds(parent.pid) is None


def test_broker_cpu_per_message_shown_when_measured():
    rows = [{"title": "m", "settings": {}, "publish_rate": 1.0, "consume_rate": 1.0,
             "broker_cpu_us_per_msg": 303.0, "broker_cpu_cores": 1.5},
            {"title": "n", "settings": {}, "publish_rate": 1.0, "consume_rate": 1.0}]
    table = single_table(rows).splitlines()
    assert "broker CPU µs / msg" in table[0]
    assert "| 303 | 1.50 |" in table[2] and table[3].endswith("| – | – |")
