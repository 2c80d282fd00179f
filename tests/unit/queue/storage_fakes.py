"""What the storage tests share: a node's Storage in a temp dir (the process's, as
Storage.of gives it), and an actor reference that keeps what it is told."""

from __future__ import annotations

from actors.config import Config
from actors.store.storage import Storage


class Ref:
    """An actor reference (a queue's, a mirror's) that keeps what it is told."""

    def __init__(self):
        self.got = []

    def tell(self, msg):
        self.got.append(msg)

    def of(self, kind):
        return [m for m in self.got if isinstance(m, kind)]


def storage(tmp_path, monkeypatch):
    """(config, Storage) with its data in tmp_path, the one Storage.of returns."""
    config = Config(data_dir=str(tmp_path), storage_map_size=1 << 26)
    s = Storage(config)
    monkeypatch.setattr(Storage, "of", classmethod(lambda cls, c: s))
    return config, s
