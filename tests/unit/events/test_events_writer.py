"""actors/events.py: the per-process event writer (buffering, rotation, sampling, schema, threads,
sequence numbers, run ids, heartbeats, the bound and its drop counter)."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import threading
import time
import types
import zlib

import pytest

from actors import events, hlc
from spark_analysis import log_reader


def _cfg(tmp_path, level, **extra):
    return types.SimpleNamespace(data_dir=str(tmp_path), events=level, **extra)


def _read_dir(directory):
    """[(header, [event, ...]), ...] of every file in directory, in (pid, file_no) order."""
    out = []
    for path in glob.glob(os.path.join(directory, "*.events")):
        header, evs = events.read_file(path)
        out.append((header, list(evs)))
    out.sort(key=lambda he: (he[0]["pid"], he[0]["file_no"]))
    return out


def _all_events(directory, markers=False):
    """Every event of every file; without the log's own markers (LOG_KINDS) unless asked."""
    return [e for _, evs in _read_dir(directory) for e in evs
            if markers or e[0] not in events.LOG_KINDS]


@pytest.fixture(autouse=True)
def _closed():
    yield
    events.close()



def _in_threads(run, n: int) -> None:
    """run(t) in n threads at once, t = 0..n-1; back when every one ended."""
    ts = [threading.Thread(target=run, args=(t,)) for t in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()

def test_level_parsing():
    assert events.parse_level("off") == 0
    assert events.parse_level("full") == 1
    assert events.parse_level("sampled:10") == 10
    for bad in ("sampled:0", "sampled:x", "sometimes", "sampled:"):
        with pytest.raises(ValueError):
            events.parse_level(bad)


def test_off_writes_nothing_and_emit_is_a_no_op(tmp_path):
    events.configure(_cfg(tmp_path, "off"), "conn-0", "n1")
    assert not events.enabled()
    events.emit("acked", b"x" * 16, queue="q")
    events.flush()
    events.close()
    assert not os.path.exists(tmp_path / "events")


def test_module_api_round_trip_and_file_name(tmp_path):
    events.configure(_cfg(tmp_path, "full"), "queue-1", "leveret@h1")
    assert events.enabled()
    mid = os.urandom(16)
    events.emit("enqueued", mid, actor="queue", vhost="/", queue="q1", seq_no=7)
    events.close()
    assert not events.enabled()
    events.emit("acked", mid, queue="q1")  # after close: dropped, no error
    files = glob.glob(str(tmp_path / "events" / "*.events"))
    assert [os.path.basename(f) for f in files] == [f"leveret@h1-queue-1-{os.getpid()}-0.events"]
    header, evs = events.read_file(files[0])
    assert header["schema"] == "leveret-events v3"
    assert (header["node"], header["process"], header["pid"]) == ("leveret@h1", "queue-1",
                                                                   os.getpid())
    assert header["run_id"] == events.run_id() and len(header["run_id"]) == 16
    start, ev, stop = list(evs)
    kind, msg_id, wall, mono, fields, seq, stamp = ev
    assert (start[0], start[5], seq, stop[0], stop[5]) == ("process_start", 0, 1,
                                                           "process_stop", 2)
    assert (kind, msg_id) == ("enqueued", mid)
    assert fields == {"actor": "queue", "vhost": "/", "queue": "q1", "seq_no": 7}
    assert abs(wall - time.time_ns()) < 10 * 10 ** 9
    assert 0 < mono <= time.monotonic_ns()
    # the hybrid clock: this process's monotonic time on the wall clock, unless pushed ahead
    assert start[6] <= stamp <= stop[6] and stamp >= mono + hlc.clock().offset


def test_emit_buffers_until_flush(tmp_path):
    lg = events.EventLog(str(tmp_path), "n", "p", flush_interval=3600)
    for i in range(100):
        lg.emit("delivered", i.to_bytes(16, "big"), {"delivery_tag": i})
    assert _all_events(str(tmp_path)) == []  # nothing written: the writer sleeps, emit never writes
    assert lg.buffered() == 101  # and the process_start marker
    lg.flush()
    got = _all_events(str(tmp_path))
    assert [e[4]["delivery_tag"] for e in got] == list(range(100))
    assert lg.buffered() == 0
    lg.close()


def test_background_thread_flushes_on_its_timer(tmp_path):
    lg = events.EventLog(str(tmp_path), "n", "p", flush_interval=0.05)
    lg.emit("acked", b"a" * 16, {"queue": "q"})
    deadline = time.monotonic() + 5
    while not _all_events(str(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(_all_events(str(tmp_path))) == 1
    lg.close()


def test_rotation_by_size_keeps_every_event_in_order(tmp_path):
    max_bytes = 4096
    events.configure(_cfg(tmp_path, "full", events_max_bytes=max_bytes), "conn-0", "n1")
    for i in range(2000):
        events.emit("delivered", i.to_bytes(16, "big"), queue="q", delivery_tag=i,
                    consumer_tag="ctag")
    events.close()
    files = _read_dir(str(tmp_path / "events"))
    assert len(files) > 10
    assert [h["file_no"] for h, _ in files] == list(range(len(files)))
    for path in glob.glob(str(tmp_path / "events" / "*.events")):
        assert os.path.getsize(path) <= max_bytes
    tags = [e[4]["delivery_tag"] for _, evs in files for e in evs if e[0] == "delivered"]
    assert tags == list(range(2000))


def test_sampling_keeps_whole_messages_and_events_without_msg_id(tmp_path):
    n = 7
    events.configure(_cfg(tmp_path, f"sampled:{n}"), "conn-0", "n1")
    ids = [os.urandom(8) + i.to_bytes(8, "big") for i in range(700)]
    for mid in ids:
        for kind in ("publish_received", "enqueued", "acked"):
            events.emit(kind, mid, queue="q")
    for i in range(5):
        events.emit("channel_closed", None, channel=i, count=0)
    events.close()
    got = _all_events(str(tmp_path / "events"))
    kept = {e[1] for e in got if e[1] is not None}
    expected = {mid for mid in ids if zlib.crc32(mid) % n == 0}
    assert kept == expected
    assert 0 < len(kept) < len(ids)
    per_msg = {}
    for e in got:
        if e[1] is not None:
            per_msg.setdefault(e[1], []).append(e[0])
    assert all(k == ["publish_received", "enqueued", "acked"] for k in per_msg.values())
    assert [e[4]["channel"] for e in got if e[1] is None] == list(range(5))


def test_schema_round_trip_of_every_kind(tmp_path):
    events.configure(_cfg(tmp_path, "full"), "conn-0", "n1")
    sent = []
    for i, kind in enumerate(events.KINDS):
        mid = None if kind in (events.PROCESS_KINDS + events.LOG_KINDS + events.REMOVAL_KINDS
                               + events.TX_KINDS) else os.urandom(16)
        fields = dict(actor="channel", vhost="/v", queue=f"q{i}", connection="127.0.0.1:5000",
                      channel=1, seq_no=i, delivery_tag=i + 1, consumer_tag="c", message_id="m",
                      requeue=bool(i % 2), redelivered=False, reason=None, count=i,
                      queues=("a", "b"), persistent=True, durable=True, store="index",
                      exchange="", routing_key="rk", raw=b"\x00\xff")
        sent.append((kind, mid, fields))
        events.emit(kind, mid, **fields)
    events.close()
    got = _all_events(str(tmp_path / "events"), markers=True)[1:-1]  # start, ..., stop
    assert len(got) == len(sent)
    last_wall = last_mono = 0
    for (kind, mid, fields), ev in zip(sent, got):
        assert ev[0] == kind and ev[1] == mid
        # tuples come back as lists; an absent value (None) is left out
        assert ev[4] == {k: v for k, v in dict(fields, queues=["a", "b"]).items() if v is not None}
        assert ev[2] >= last_wall and ev[3] >= last_mono
        last_wall, last_mono = ev[2], ev[3]
    assert set(events.KINDS) == {s[0] for s in sent}
    assert len(events.KINDS) == 38


def test_values_msgpack_cannot_encode(tmp_path):
    lg = events.EventLog(str(tmp_path), "n", "p", flush_interval=3600)
    loop: list = []
    loop.append(loop)
    lg.emit("acked", b"1" * 16, {"obj": object(), "s": {1}, "huge": 2 ** 70})
    lg.emit("acked", b"2" * 16, {"loop": loop})  # msgpack gives up on it: dropped alone
    lg.emit("acked", b"3" * 16, {"ok": 1})
    lg.close()
    got = _all_events(str(tmp_path))
    assert [e[1] for e in got] == [b"1" * 16, b"3" * 16]
    assert got[0][4]["s"] == [1] and got[0][4]["huge"] == str(2 ** 70)
    assert got[0][4]["obj"].startswith("<object object")


def test_truncated_file_reads_up_to_its_last_whole_chunk(tmp_path):
    lg = events.EventLog(str(tmp_path), "n", "p", flush_interval=3600)
    for i in range(15):
        lg.emit("acked", i.to_bytes(16, "big"), {"delivery_tag": i})
        if i == 9:
            lg.flush()  # one chunk per drain
    lg.flush()  # as kill -9 would leave it: no process_stop marker after the last event
    [path] = lg.paths
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size - 3)
    _, evs = events.read_file(path)
    assert [e[4]["delivery_tag"] for e in evs if e[0] == "acked"] == list(range(10))
    rows = log_reader.read_dir(str(tmp_path)).to_pylist()
    assert [r["delivery_tag"] for r in rows if r["kind"] == "acked"] == list(range(10))
    lg.close()


@pytest.fixture
def tiny_switch_interval():
    """Switch threads every few bytecodes, so drains and appends interleave everywhere."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


def test_emit_from_many_threads_loses_nothing(tmp_path, tiny_switch_interval):
    lg = events.EventLog(str(tmp_path), "n", "p", flush_interval=0)  # drains race the appends
    threads, per = 8, 5000
    start = threading.Barrier(threads)

    def run(t):
        start.wait()
        for i in range(per):
            lg.emit("delivered", t.to_bytes(8, "big") + i.to_bytes(8, "big"),
                    {"thread": t, "i": i})

    _in_threads(run, threads)
    lg.close()
    got = _all_events(str(tmp_path))
    assert len(got) == threads * per
    for t in range(threads):
        assert [e[4]["i"] for e in got if e[4]["thread"] == t] == list(range(per))


def test_module_emit_from_many_threads(tmp_path):
    events.configure(_cfg(tmp_path, "full"), "conn-0", "n1")
    threads, per = 4, 3000

    def run(t):
        for i in range(per):
            events.emit("acked", None, thread=t, i=i)

    _in_threads(run, threads)
    events.close()
    got = _all_events(str(tmp_path / "events"))
    assert sorted((e[4]["thread"], e[4]["i"]) for e in got) == \
        [(t, i) for t in range(threads) for i in range(per)]


# -- completeness: sequence numbers, run ids, heartbeats, the bound ----------------------------
def test_every_event_has_the_next_sequence_number_across_files(tmp_path):
    events.configure(_cfg(tmp_path, "full", events_max_bytes=2048), "conn-0", "n1")
    for i in range(500):
        events.emit("acked", i.to_bytes(16, "big"), delivery_tag=i)
    events.close()
    files = _read_dir(str(tmp_path / "events"))
    assert len(files) > 5 and len({h["run_id"] for h, _ in files}) == 1
    got = sorted((e for _, evs in files for e in evs), key=lambda e: e[5])
    assert [e[5] for e in got] == list(range(len(got)))  # (a drain writes a chunk per kind)
    assert got[0][0] == "process_start" and got[-1][0] == "process_stop"


def test_run_ids_differ_between_logs_and_processes(tmp_path):
    a = events.EventLog(str(tmp_path / "a"), "n", "p", flush_interval=3600)
    b = events.EventLog(str(tmp_path / "b"), "n", "p", flush_interval=3600)
    assert a.run_id != b.run_id
    a.close()
    b.close()
    assert events.run_id() == events.run_id()
    child = os.fork()
    if child == 0:  # a forked child is a run of its own
        os._exit(0 if events.run_id() != _parent_run else 1)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0


_parent_run = events.run_id()


def test_heartbeats_while_idle(tmp_path):
    lg = events.EventLog(str(tmp_path), "n", "p", flush_interval=3600, heartbeat_interval=0.05)
    deadline = time.monotonic() + 10
    beats = []
    while time.monotonic() < deadline:
        try:
            beats = [e for e in _all_events(str(tmp_path), markers=True) if e[0] == "heartbeat"]
        except ValueError:  # read between the file's creation and its header's write
            pass
        if len(beats) >= 3:
            break
        time.sleep(0.05)
    assert len(beats) >= 3  # written by the writer thread itself: no flush() asked for them
    assert [b[5] for b in beats] == sorted(b[5] for b in beats)
    assert all(b[4] == {"dropped": 0} and b[1] is None for b in beats)
    lg.close()


def test_a_full_buffer_drops_counts_and_leaves_a_hole_in_the_numbers(tmp_path):
    lg = events.EventLog(str(tmp_path), "n", "p", flush_interval=3600, heartbeat_interval=0,
                         max_buffered=10)
    for i in range(25):
        lg.emit("acked", i.to_bytes(16, "big"), {"delivery_tag": i})
    assert lg.buffered() == 10 and lg.dropped == 16  # process_start took one place
    lg.flush()
    lg.emit("acked", b"z" * 16, {"delivery_tag": 99})
    lg.close()
    got = _all_events(str(tmp_path), markers=True)
    assert [(e[0], e[5]) for e in got] == [("process_start", 0)] + [
        ("acked", i) for i in range(1, 10)] + [("events_dropped", 26), ("acked", 27),
                                                ("process_stop", 28)]
    assert got[10][4] == {"count": 16, "dropped": 16}
    assert got[-1][4] == {"dropped": 16}


def test_module_bound_and_drop_counter(tmp_path):
    events.configure(_cfg(tmp_path, "full", events_max_buffered=5), "conn-0", "n1")
    events.flush()
    for i in range(1000):  # no writer round can come in between: it sleeps 0.2 s
        events.emit("acked", None, i=i)
    assert 0 < events.dropped() <= 1000 - 5 + 1
    dropped = events.dropped()
    events.close()
    got = _all_events(str(tmp_path / "events"), markers=True)
    assert sum(e[4]["count"] for e in got if e[0] == "events_dropped") == dropped
    kept = [e for e in got if e[0] == "acked"]
    assert len(kept) + dropped == 1000
    assert max(e[5] for e in got) == len(got) - 1 + dropped  # every drop spent a number
    assert events.dropped() == 0  # after close: no log


def test_kill_9_leaves_a_run_without_its_stop_marker(tmp_path):
    code = ("import os, signal, types\n"
            "from actors import events\n"
            f"events.configure(types.SimpleNamespace(data_dir={str(tmp_path)!r}, events='full'),"
            " 'queue-0', 'n1')\n"
            "events.emit('enqueued', b'a' * 16, queue='q')\n"
            "events.flush()\n"
            "events.emit('acked', b'a' * 16, queue='q')  # still in the buffer at the kill\n"
            "os.kill(os.getpid(), signal.SIGKILL)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert out.returncode == -9, out.stderr
    got = _all_events(str(tmp_path / "events"), markers=True)
    assert [(e[0], e[5]) for e in got] == [("process_start", 0), ("enqueued", 1)]


@pytest.mark.parametrize("mode", ["off", "write", "fsync"])
def test_sync_writes_what_was_emitted_before_a_kill_9(tmp_path, mode):
    """events_sync: events.sync() (called where a confirm leaves a process) puts everything
    emitted so far in the file, where a kill -9 right after cannot take it; off, it does
    nothing and the kill takes the buffer."""
    code = ("import os, signal, types\n"
            "from actors import events\n"
            f"events.configure(types.SimpleNamespace(data_dir={str(tmp_path)!r}, events='full',"
            f" events_sync={mode!r}), 'queue-0', 'n1')\n"
            "events._log.flush_interval = 3600  # (the writer thread stays out of it)\n"
            "events.flush()\n"
            "events.emit('enqueued', b'a' * 16, queue='q')\n"
            "events.sync()\n"
            "assert events.syncs() == (0 if events._sync_mode == 0 else 1)\n"
            "events.sync()  # (nothing new: not counted)\n"
            "assert events.syncs() == (0 if events._sync_mode == 0 else 1)\n"
            "os.kill(os.getpid(), signal.SIGKILL)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert out.returncode == -9, out.stderr
    got = [e[0] for e in _all_events(str(tmp_path / "events"))]
    assert got == ([] if mode == "off" else ["enqueued"])


def test_an_unknown_events_sync_is_refused(tmp_path):
    with pytest.raises(ValueError, match="events_sync must be one of off, write, fsync"):
        events.configure(_cfg(tmp_path, "full", events_sync="yes"), "conn-0", "n1")
    from actors.config import Config
    assert Config(events_sync="yes").check() == [
        "events_sync must be one of off, write, fsync, not 'yes'"]
    assert Config().check() == []


def test_written_counts_the_events_the_files_read_back(tmp_path):
    """leveret_events_written_total's source: a `published` record (a publish and its routing)
    is two events in the files, so two in the count; the log's own markers are none."""
    events.configure(_cfg(tmp_path, "full"), "conn-0", "leveret@h1")
    for i in range(3):
        mid = i.to_bytes(16, "big")
        events.put_published(mid, ("/", "c1", 1, i + 1, "", "q", None, False, 1, None, None,
                                   ("q",), ()))
        events.emit("delivered", mid, actor="channel", queue="q", delivery_tag=i + 1)
    events.flush()
    got = _all_events(str(tmp_path / "events"))
    assert sorted({e[0] for e in got}) == ["delivered", "publish_received", "routed"]
    assert events.written() == len(got) == 9


def test_published_from_many_threads_keeps_every_number_once(tmp_path, tiny_switch_interval):
    # a thread switch between the two numbers of a publish writes its parts as records of
    # their own: every number is still taken by exactly one event, each part by its own
    events.configure(_cfg(tmp_path, "full"), "conn-0", "n1")
    threads, per = 6, 2000

    def run(t):
        for i in range(per):
            events.put_published(t.to_bytes(8, "big") + i.to_bytes(8, "big"), (
                "/", f"c{t}", 1, i, "", "q", None, False, 10, None, None, ("q",), None))

    _in_threads(run, threads)
    events.close()
    got = _all_events(str(tmp_path / "events"), markers=True)
    assert sorted(e[5] for e in got) == list(range(len(got)))
    parts: dict = {}
    for e in got:
        if e[1] is not None:
            parts.setdefault(e[1], []).append(e)
    assert len(parts) == threads * per
    for received, routed in parts.values():
        assert (received[0], routed[0]) == ("publish_received", "routed")
        assert received[5] < routed[5] and received[6] < routed[6]
        assert received[4]["seq_no"] == int.from_bytes(received[1][8:], "big")
        assert routed[4]["queues"] == ["q"]
    rows = log_reader.read_dir(str(tmp_path / "events")).to_pylist()
    assert sorted(r["seq"] for r in rows) == list(range(len(got)))


def test_a_composite_whose_numbers_do_not_follow_is_written_as_its_parts(tmp_path):
    lg = events.EventLog(str(tmp_path), "n", "p", flush_interval=3600, heartbeat_interval=0)
    mid = bytes(16)
    values = ("/", "c1", 1, 7, "x", "k", None, True, 10, None, None, ("q",), ("ae",))
    code = events._CODE["published"]
    lg.composite(code, mid, 100, [5, 9], [1_000, 1_001], values)  # (another took 6 to 8)
    lg.composite(code, mid, 100, [10, 11], [1_002, 1_010], values)  # (the clock moved)
    lg.composite(code, mid, 100, [12, 13], [1_011, 1_012], values)  # one record
    assert lg.buffered() == 1 + 2 + 2 + 1  # (process_start)
    lg.close()
    got = [e for e in _all_events(str(tmp_path)) if e[1] == mid]
    assert [(e[0], e[5], e[6]) for e in got] == [
        ("publish_received", 5, 1_000), ("routed", 9, 1_001),
        ("publish_received", 10, 1_002), ("routed", 11, 1_010),
        ("publish_received", 12, 1_011), ("routed", 13, 1_012)]
    assert got[0][4]["routing_key"] == "k" and got[1][4] == {
        "actor": "channel", "vhost": "/", "queues": ["q"], "alternate_exchanges": ["ae"]}
    assert got[0][4] == got[4][4] and got[1][4] == got[5][4]


def test_a_chunk_larger_than_a_file_goes_in_halves(tmp_path):
    lg = events.EventLog(str(tmp_path), "n", "p", flush_interval=3600, heartbeat_interval=0,
                         max_bytes=4096)
    for i in range(300):
        lg.emit("acked", i.to_bytes(16, "big"), {"delivery_tag": i})
    lg.close()
    assert len(lg.paths) > 3
    assert all(os.path.getsize(p) <= 4096 for p in lg.paths)
    got = [e for p in lg.paths for e in events.read_file(p)[1]]
    assert [e[5] for e in got] == list(range(302))
    assert [e[4]["delivery_tag"] for e in got if e[0] == "acked"] == list(range(300))


def test_a_failed_write_does_not_leave_the_bound_full(tmp_path):
    lg = events.EventLog(str(tmp_path), "n", "p", flush_interval=3600, heartbeat_interval=0,
                         max_buffered=10)
    for i in range(8):
        lg.emit("acked", i.to_bytes(16, "big"), {"delivery_tag": i})

    def broken(data):
        raise OSError("disk gone")

    write, lg._write = lg._write, broken
    with pytest.raises(OSError):
        lg.flush()  # (the writer thread logs it: this round's events are lost)
    lg._write = write
    for i in range(8, 16):
        lg.emit("acked", i.to_bytes(16, "big"), {"delivery_tag": i})
    assert lg.dropped == 0 and lg.buffered() == 8
    lg.close()
    got = _all_events(str(tmp_path))
    assert [e[4]["delivery_tag"] for e in got] == list(range(8, 16))
