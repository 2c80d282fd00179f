"""actors/store/stream_log.py: a stream's log in the node's LMDB environment."""
from __future__ import annotations

from actors.core.stream import LogView
from actors.store.storage import queue_id
from actors.store.stream_log import Entry, StreamLog

from storage_fakes import storage


def _log(s, name="s", segment_bytes=1000):
    return StreamLog(s.env, s.stream_dbs, queue_id("/", name), s.begin, segment_bytes)


def _entries(n, size=10, start=0, fv=None):
    return [Entry("", "rk", b"\x00\x00", f"m{start + i}".encode().ljust(size, b"."), None, fv)
            for i in range(n)]


def test_append_read_and_reopen(tmp_path, monkeypatch):
    _, s = storage(tmp_path, monkeypatch)
    lg = _log(s)
    assert (lg.first, lg.next, lg.count) == (0, 0, 0)
    lg.append(_entries(3), 1000, 16)
    lg.append(_entries(2, start=3), 2000, 16)
    msgs, pos = lg.read(1, 100, 1 << 20)
    assert [m.offset for m in msgs] == [1, 2, 3, 4] and pos == 5
    again = _log(s)  # what a restart reads back: the end and the segments, no message
    assert (again.next, again.last_chunk, again.segments) == (5, 3, lg.segments)
    assert again.view() == LogView(0, 5, 3, ())


def test_reads_are_bounded_batches(tmp_path, monkeypatch):
    _, s = storage(tmp_path, monkeypatch)
    lg = _log(s, segment_bytes=10_000)
    for i in range(10):
        lg.append(_entries(100, start=i * 100), 1000 + i, 16)
    got, pos = [], 0
    while pos < lg.next:
        msgs, pos = lg.read(pos, 64, 1 << 20)
        assert 0 < len(msgs) <= 64
        got += [m.offset for m in msgs]
    assert got == list(range(1000))
    msgs, _ = lg.read(0, 1000, 95)  # about 95 bytes: 10 ten-byte messages
    assert len(msgs) == 10


def test_segments_roll_and_retention_drops_the_oldest(tmp_path, monkeypatch):
    _, s = storage(tmp_path, monkeypatch)
    lg = _log(s, segment_bytes=100)
    for i in range(10):
        lg.append(_entries(5, size=10, start=i * 5), 1000 + i, 16)  # 50 bytes a chunk
    assert [(x.first, x.last) for x in lg.segments] == [(0, 9), (10, 19), (20, 29), (30, 39),
                                                        (40, 49)]
    gone = lg.retain(250, None, 0)  # 500 bytes -> at most 250: three segments go
    assert [g.number for g in gone] == [0, 1, 2]
    assert lg.first == 30
    msgs, _ = lg.read(0, 100, 1 << 20)  # below the first: reads from the first
    assert msgs[0].offset == 30 and len(msgs) == 20
    assert _log(s, segment_bytes=100).first == 30  # the deletion is on disk


def test_filters_skip_chunks(tmp_path, monkeypatch):
    _, s = storage(tmp_path, monkeypatch)
    lg = _log(s)
    lg.append(_entries(2, fv="red"), 1, 16)
    lg.append(_entries(2, start=2, fv="blue"), 2, 16)
    lg.append(_entries(1, start=4), 3, 16)
    msgs, pos = lg.read(0, 100, 1 << 20, ("blue",), False)
    assert [m.offset for m in msgs] == [2, 3] and pos == 5
    msgs, _ = lg.read(0, 100, 1 << 20, ("blue",), True)
    assert [m.offset for m in msgs] == [2, 3, 4]


def test_streams_do_not_see_each_other_and_delete_is_complete(tmp_path, monkeypatch):
    _, s = storage(tmp_path, monkeypatch)
    a, b = _log(s, "a"), _log(s, "b")
    a.append(_entries(3), 1, 16)
    b.append(_entries(2), 1, 16)
    a.delete()
    assert _log(s, "a").count == 0
    assert [m.offset for m in b.read(0, 10, 1 << 20)[0]] == [0, 1]
    assert s.drop_stale(set()) == [queue_id("/", "b")]
    assert _log(s, "b").count == 0


def test_a_member_copies_chunks_at_the_leaders_offsets_and_epochs(tmp_path, monkeypatch):
    _, s = storage(tmp_path, monkeypatch)
    leader, member = _log(s, "leader"), _log(s, "member")
    leader.append(_entries(3), 1000, 16, epoch=0)
    leader.append(_entries(2, start=3, fv="x"), 2000, 16, epoch=0)
    leader.append(_entries(4, start=5), 3000, 16, epoch=2)
    assert leader.overview() == [[0, 4], [2, 8]]
    for c, entries in leader.read_chunks(0, 1 << 20):
        member.append_chunk(c.first, c.ts, c.epoch, c.bloom, entries)
    assert member.overview() == leader.overview()
    assert (member.next, member.last_chunk) == (9, 5)
    got, _ = member.read(0, 100, 1 << 20)
    want, _ = leader.read(0, 100, 1 << 20)
    assert got == want
    assert [m.offset for m in member.read(0, 100, 1 << 20, ("x",))[0]] == [3, 4]
    # a chunk that does not follow the end is refused (the member joins again)
    try:
        member.append_chunk(20, 4000, 2, None, _entries(1))
        raise AssertionError("a gap was accepted")
    except ValueError:
        pass


def test_truncate_keeps_a_prefix_and_reopens_there(tmp_path, monkeypatch):
    _, s = storage(tmp_path, monkeypatch)
    lg = _log(s, segment_bytes=25)
    for i in range(5):
        lg.append(_entries(2, start=2 * i), 1000 + i, 16, epoch=i // 3)
    assert len(lg.segments) > 1
    lg.truncate(6)
    assert (lg.next, lg.last_chunk) == (6, 4)
    assert lg.overview() == [[0, 5]]
    assert [m.offset for m in lg.read(0, 100, 1 << 20)[0]] == list(range(6))
    again = _log(s, segment_bytes=25)
    assert (again.next, again.last_chunk, again.segments) == (6, 4, lg.segments)
    lg.append(_entries(1, start=6), 2000, 16, epoch=5)
    assert lg.overview() == [[0, 5], [5, 6]]
    lg.truncate(0)  # nothing matches: an empty log that takes a chunk anywhere
    assert (lg.first, lg.next, lg.segments) == (0, 0, [])
    lg.append_chunk(40, 3000, 5, None, _entries(2))
    assert (lg.first, lg.next) == (40, 42)
