"""Disk-only behaviour of streamed shares (kind "streamed share"), whose key
follows their data: the key never reaches the file, the share's pieces reach
it uncopied, and large ones leave the page cache like any large share."""

from __future__ import annotations

import os

import pytest

import flud.storage.disk as disk
from flud.storage.disk import ShareStore
from flud.storage.errors import HashMismatch
from flud.storage.fileio import STREAMED_MIN
from flud.storage.limits import KIND_STREAMED_SHARE

from .helpers import ALICE, BOB, CAPACITY, crash, key_of, read_all


@pytest.fixture
def store(tmp_path):
    store = ShareStore(tmp_path / "store", CAPACITY)
    yield store
    store.close()


def incoming(store) -> list[str]:
    return os.listdir(os.path.join(store.root, "incoming"))


def test_the_share_is_written_from_its_pieces_and_the_key_is_not(store, monkeypatch):
    data = os.urandom(100_000)
    blob = data + key_of(data)
    writes = []
    real_writev = os.writev

    def writev(fd, views):
        writes.append([view.obj for view in views])
        return real_writev(fd, views)

    monkeypatch.setattr(os, "writev", writev)
    upload = store.open_upload(None, ALICE, len(data), KIND_STREAMED_SHARE)
    [name] = incoming(store)
    assert name.startswith("streamed.")  # no key to name it by yet
    view = memoryview(blob)
    upload.write_pieces([view[:60_000], view[60_000:len(data) - 10], view[len(data) - 10:len(data) + 7]])
    upload.write_pieces([view[len(data) + 7:]])
    assert writes == [[blob, blob, blob]]  # views of the sender's buffer, not copies
    assert os.path.getsize(os.path.join(store.root, "incoming", name)) == len(data)
    upload.commit()
    assert incoming(store) == []
    assert read_all(store, key_of(data), ALICE) == data


def test_a_large_streamed_share_gives_its_pages_back_once_synced(store, monkeypatch):
    calls = []
    real_drop, real_fsync = disk.drop_cached, os.fsync
    monkeypatch.setattr(disk, "drop_cached", lambda fd: (calls.append("drop_cached"), real_drop(fd)))
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append("fsync"), real_fsync(fd)))
    data = os.urandom(STREAMED_MIN)
    with store.open_upload(None, ALICE, len(data), KIND_STREAMED_SHARE) as upload:
        upload.write(data + key_of(data))
        upload.commit()
    assert calls.index("drop_cached") > calls.index("fsync")


def test_a_mismatch_leaves_no_file(store):
    data = os.urandom(10_000)
    upload = store.open_upload(None, ALICE, len(data), KIND_STREAMED_SHARE)
    upload.write(data + key_of(b"not it"))
    with pytest.raises(HashMismatch):
        upload.commit()
    assert incoming(store) == []
    assert not any(files for _, _, files in os.walk(os.path.join(store.root, "shares")))
    assert store.stats()["free"] == CAPACITY


def test_a_streamed_copy_of_a_held_share_keeps_one_file(store):
    data = os.urandom(10_000)
    store.put(key_of(data), BOB, data)
    with store.open_upload(None, ALICE, len(data), KIND_STREAMED_SHARE) as upload:
        upload.write(data + key_of(data))
        upload.commit()
    assert incoming(store) == []
    assert store.owners(key_of(data)) == {ALICE, BOB}
    assert store.stats()["bytes_stored"] == len(data)


def test_a_crash_mid_stream_leaves_nothing_after_reopening(tmp_path):
    store = ShareStore(tmp_path / "store", CAPACITY)
    data = os.urandom(10_000)
    upload = store.open_upload(None, ALICE, len(data), KIND_STREAMED_SHARE)
    upload.write(data + key_of(data)[:5])
    crash(store)
    store = ShareStore(tmp_path / "store", CAPACITY)
    assert incoming(store) == [] and store.stats()["reserved"] == 0
    assert store.owners(key_of(data)) == set()
    store.close()
