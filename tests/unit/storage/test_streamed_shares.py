"""Large shares are streamed past the page cache: their clean pages are given
back once they are durable, and a RETRIEVE stream asks for its next piece
ahead and gives back what it read (storage/fileio.drop_cached)."""

from __future__ import annotations

import os

import flud.storage.disk as disk
import flud.storage.reader as reader_module
from flud.storage.disk import ShareStore
from flud.storage.fileio import STREAMED_MIN
from flud.storage.limits import IO_CHUNK

from .helpers import ALICE, CAPACITY, key_of, read_all


def _spy(monkeypatch, module, name, calls):
    real = getattr(module, name)

    def spy(fd, *args):
        calls.append((name, *args))
        return real(fd, *args)

    monkeypatch.setattr(module, name, spy)


def test_a_durable_large_share_gives_its_pages_back_once_synced(tmp_path, monkeypatch):
    calls = []
    _spy(monkeypatch, disk, "drop_cached", calls)
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(("fsync",)), real_fsync(fd)))
    store = ShareStore(tmp_path / "store", CAPACITY)
    small, large = os.urandom(STREAMED_MIN - 1), os.urandom(STREAMED_MIN)
    store.put(key_of(small), ALICE, small)
    assert ("drop_cached",) not in calls  # small shares stay cached: read again soon
    calls.clear()
    store.put(key_of(large), ALICE, large)
    assert calls.index(("drop_cached",)) > calls.index(("fsync",))  # only clean pages go
    assert read_all(store, key_of(large), ALICE) == large
    store.close()


def test_a_store_that_does_not_sync_keeps_its_pages(tmp_path, monkeypatch):
    calls = []
    _spy(monkeypatch, disk, "drop_cached", calls)
    store = ShareStore(tmp_path / "store", CAPACITY, fsync=False)
    data = os.urandom(STREAMED_MIN * 2)
    store.put(key_of(data), ALICE, data)
    assert calls == []
    store.close()


def test_a_retrieve_stream_reads_ahead_and_gives_back_what_it_read(tmp_path, monkeypatch):
    calls = []
    _spy(monkeypatch, reader_module, "read_soon", calls)
    _spy(monkeypatch, reader_module, "drop_cached", calls)
    store = ShareStore(tmp_path / "store", CAPACITY)
    data = os.urandom(2 * IO_CHUNK + 999)
    store.put(key_of(data), ALICE, data)
    first = 64 * 1024
    with store.open_reader(key_of(data), ALICE) as reader:
        got = [reader.read(first)]  # a RETRIEVE's first piece, then IO_CHUNK pieces
        while piece := reader.read(IO_CHUNK):
            got.append(piece)
    assert b"".join(got) == data
    assert calls == [
        ("read_soon", first, IO_CHUNK), ("drop_cached", 0, first),
        ("read_soon", first + IO_CHUNK, len(data) - first - IO_CHUNK), ("drop_cached", first, IO_CHUNK),
        ("drop_cached", first + IO_CHUNK, len(data) - first - IO_CHUNK),
    ]
    calls.clear()
    with store.open_reader(key_of(data), ALICE, 10, STREAMED_MIN - 1) as reader:
        assert reader.read() == data[10:10 + STREAMED_MIN - 1]
    assert calls == []  # a short range: plain reads, cache kept
    store.close()


def test_pieces_are_hashed_in_order_and_written_in_one_call(tmp_path, monkeypatch):
    store = ShareStore(tmp_path / "store", CAPACITY, fsync=False)
    data = os.urandom(100_000)
    writes = []
    real_writev = os.writev
    monkeypatch.setattr(os, "writev", lambda fd, views: (writes.append(len(views)), real_writev(fd, views))[1])
    with store.open_upload(key_of(data), ALICE, len(data)) as upload:
        upload.write_pieces([data[:10], memoryview(data)[10:50_000], bytearray(data[50_000:])])
        upload.commit()
    assert writes == [3]
    assert read_all(store, key_of(data), ALICE) == data
    store.close()


def test_a_short_writev_is_finished_piece_by_piece(tmp_path, monkeypatch):
    from flud.storage.fileio import write_all_pieces

    real_writev = os.writev
    monkeypatch.setattr(os, "writev", lambda fd, views: real_writev(fd, [views[0], views[1][:7]]))
    pieces = [b"a" * 5, b"b" * 20, b"c" * 9]
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT)
    try:
        write_all_pieces(fd, [memoryview(p) for p in pieces])
    finally:
        os.close(fd)
    assert (tmp_path / "f").read_bytes() == b"".join(pieces)


def test_more_pieces_than_one_writev_takes_are_written_in_groups(tmp_path, monkeypatch):
    """A peer that sends tiny TLS records makes a frame of thousands of pieces:
    the kernel takes at most IOV_MAX buffers per writev."""
    from flud.storage import fileio

    real_writev, groups = os.writev, []

    def bounded_writev(fd, views):
        assert len(views) <= fileio.WRITEV_MAX
        groups.append(len(views))
        return real_writev(fd, views)

    monkeypatch.setattr(os, "writev", bounded_writev)
    pieces = [bytes([i % 251]) * 3 for i in range(2 * fileio.WRITEV_MAX + 5)]
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT)
    try:
        fileio.write_all_pieces(fd, [memoryview(p) for p in pieces])
    finally:
        os.close(fd)
    assert groups == [fileio.WRITEV_MAX, fileio.WRITEV_MAX, 5]
    assert (tmp_path / "f").read_bytes() == b"".join(pieces)
