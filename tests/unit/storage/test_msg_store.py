"""MsgStore: refcounted bodies in the caller's LMDB transactions."""

from __future__ import annotations

import pytest

from msg_store import MsgStore
from storage_helpers import body_for, mid, open_env


@pytest.fixture
def env(tmp_path):
    env = open_env(tmp_path / "node")
    yield env
    env.close()


@pytest.fixture
def ms(env):
    return MsgStore(env)


def test_put_get_refcount_stats(env, ms):
    with env.begin(write=True) as txn:
        ms.put(txn, mid(1), b"a" * 5000)
        ms.put(txn, mid(2), b"b" * 7000)
    with env.begin() as txn:
        assert ms.get(txn, mid(1)) == b"a" * 5000
        assert ms.get(txn, mid(3)) is None
        assert ms.refcount(txn, mid(2)) == 1
        assert ms.refcount(txn, mid(3)) == 0
        st = ms.stats(txn)
        assert (st["bodies"], st["bytes"], st["unknown_releases"]) == (2, 12000, 0)


def test_fanned_out_body_stored_once_removed_after_third_release(env, ms):
    body = body_for(7, 9000)
    with env.begin(write=True) as txn:
        for _ in range(3):  # routed to three durable queues
            ms.put(txn, mid(7), body)
    with env.begin() as txn:
        assert ms.refcount(txn, mid(7)) == 3
        assert ms.stats(txn)["bodies"] == 1
        assert ms.stats(txn)["bytes"] == 9000
    for left in (2, 1):
        with env.begin(write=True) as txn:
            ms.release(txn, [mid(7)])
            assert ms.refcount(txn, mid(7)) == left
            assert ms.get(txn, mid(7)) == body
    with env.begin(write=True) as txn:
        ms.release(txn, [mid(7)])
    with env.begin() as txn:
        assert ms.get(txn, mid(7)) is None
        assert ms.refcount(txn, mid(7)) == 0
        assert ms.stats(txn) == {"bodies": 0, "bytes": 0, "unknown_releases": 0, "pages": 0}


def test_put_many_same_as_put(env, ms):
    with env.begin(write=True) as txn:
        ms.put_many(txn, [(mid(1), b"x" * 10), (mid(2), b"y" * 20), (mid(1), b"x" * 10)])
    with env.begin() as txn:
        assert (ms.refcount(txn, mid(1)), ms.refcount(txn, mid(2))) == (2, 1)
        assert ms.stats(txn)["bytes"] == 30


def test_release_unknown_is_counted_noop(env, ms):
    with env.begin(write=True) as txn:
        ms.put(txn, mid(1), b"x")
        ms.release(txn, [mid(9), mid(1), mid(1)])  # unknown, last ref, now unknown
    with env.begin() as txn:
        st = ms.stats(txn)
        assert (st["bodies"], st["bytes"], st["unknown_releases"]) == (0, 0, 2)


def test_aborted_transaction_leaves_nothing(env, ms):
    with env.begin(write=True) as txn:
        ms.put(txn, mid(1), b"keep")
    txn = env.begin(write=True)
    ms.put(txn, mid(1), b"keep")
    ms.put(txn, mid(2), b"gone")
    ms.release(txn, [mid(1), mid(1)])
    txn.abort()
    with env.begin() as txn:
        assert ms.refcount(txn, mid(1)) == 1
        assert ms.get(txn, mid(2)) is None
        assert ms.stats(txn)["bytes"] == 4


def test_survives_reopen(tmp_path):
    env = open_env(tmp_path / "node")
    ms = MsgStore(env)
    with env.begin(write=True) as txn:
        ms.put(txn, mid(1), b"z" * 8000)
        ms.put(txn, mid(1), b"z" * 8000)
    env.sync(True)
    env.close()
    env = open_env(tmp_path / "node")
    ms = MsgStore(env)
    with env.begin() as txn:
        assert ms.refcount(txn, mid(1)) == 2
        assert ms.get(txn, mid(1)) == b"z" * 8000
    env.close()


def test_put_release_loop_reuses_space(env, ms):
    """Freed pages are reused: after a warm-up, the file's last page stays put."""
    def cycle(i):
        ids = [mid(i * 10 + j) for j in range(10)]
        with env.begin(write=True) as txn:
            for k in ids:
                ms.put(txn, k, body_for(i, 8000))
        with env.begin(write=True) as txn:
            ms.release(txn, ids)

    for i in range(50):
        cycle(i)
    warm = env.info()["last_pgno"]
    for i in range(50, 550):
        cycle(i)
    assert env.info()["last_pgno"] <= warm + 8
    with env.begin() as txn:
        assert ms.stats(txn)["bodies"] == 0
    # 5000 bodies of 8000 bytes passed through; without reuse that alone is ~10000 pages
    assert warm < 1000


def test_db_names_count_into_max_dbs():
    assert len(MsgStore.db_names()) == 3
    assert all(name.startswith(b"ms.") for name in MsgStore.db_names())
