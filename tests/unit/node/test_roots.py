"""A node's root records (node/roots.py) survive a power cut once put."""
import os
import stat

from flud.node.roots import RootStore


def test_a_root_put_syncs_the_file_and_then_its_directory(tmp_path, monkeypatch):
    store = RootStore(str(tmp_path / "roots"))
    synced = []
    real = os.fsync

    def fsync(fd):
        synced.append(stat.S_ISDIR(os.fstat(fd).st_mode))
        real(fd)
    monkeypatch.setattr(os, "fsync", fsync)
    store.put(b"o" * 32, b"record one")
    # the file's bytes, then the directory holding the rename
    assert synced == [False, True]
    store.put(b"o" * 32, b"record two")
    assert store.get(b"o" * 32) == b"record two"
    assert store.count() == 1
