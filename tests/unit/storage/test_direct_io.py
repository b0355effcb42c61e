"""Large shares bypass the page cache (storage/direct.py): exact bytes, exact
sizes, unaligned ranges, full disk, and the fallback where O_DIRECT is refused."""

from __future__ import annotations

import errno
import os

import pytest

import storage.disk as disk
from storage import direct
from storage.disk import ShareStore
from storage.errors import NoSpace

from .helpers import ALICE, CAPACITY, key_of, read_all


def _has_o_direct(path) -> bool:
    probe = os.path.join(path, "probe")
    open(probe, "wb").close()
    try:
        fd = direct.open_direct(probe, os.O_RDONLY)
    finally:
        os.unlink(probe)
    if fd is None:
        return False
    os.close(fd)
    return True


@pytest.fixture
def direct_store(tmp_path, monkeypatch):
    if not _has_o_direct(tmp_path):
        pytest.skip("this filesystem has no O_DIRECT")
    opened = []
    real_open = disk.open_direct

    def spy(path, flags):
        fd = real_open(path, flags)
        opened.append((flags & (os.O_WRONLY | os.O_RDONLY | os.O_RDWR), fd is not None))
        return fd

    monkeypatch.setattr(disk, "open_direct", spy)
    store = ShareStore(tmp_path / "store", CAPACITY)
    store.opened_direct = opened
    yield store
    store.close()


def _upload_in_pieces(store, data: bytes, piece: int) -> None:
    with store.open_upload(key_of(data), ALICE, len(data)) as upload:
        for start in range(0, len(data), piece):
            upload.write(data[start:start + piece])
        upload.commit()


@pytest.mark.parametrize("size", [direct.DIRECT_MIN, 512 * 1024, 3 * direct.STAGING_SIZE + 12345])
def test_a_large_share_is_written_directly_and_reads_back_exactly(direct_store, size):
    data = os.urandom(size)
    _upload_in_pieces(direct_store, data, 100_003)  # pieces that straddle the staging buffer
    assert (os.O_WRONLY, True) in direct_store.opened_direct
    path = direct_store._layout.share_path(key_of(data))
    assert os.path.getsize(path) == size  # the padded tail was cut back
    assert read_all(direct_store, key_of(data), ALICE) == data
    assert (os.O_RDONLY, True) in direct_store.opened_direct
    assert os.listdir(os.path.join(direct_store.root, "incoming")) == []


def test_unaligned_ranges_of_a_direct_share(direct_store):
    data = os.urandom(2 * direct.STAGING_SIZE + 777)
    direct_store.put(key_of(data), ALICE, data)
    for offset, length in [(1, 200_000), (4095, direct.STAGING_SIZE + 2), (direct.STAGING_SIZE - 3, 131_072),
                           (len(data) - 140_000, 140_000), (0, len(data))]:
        with direct_store.open_reader(key_of(data), ALICE, offset, length) as reader:
            got = b"".join(iter(lambda: reader.read(300_001), b""))
        assert got == data[offset:offset + length], (offset, length)


def test_small_shares_and_small_reads_stay_in_the_page_cache(direct_store):
    small = os.urandom(direct.DIRECT_MIN - 1)
    direct_store.put(key_of(small), ALICE, small)
    assert direct_store.opened_direct == []
    big = os.urandom(direct.DIRECT_MIN * 2)
    direct_store.put(key_of(big), ALICE, big)
    direct_store.opened_direct.clear()
    with direct_store.open_reader(key_of(big), ALICE, 10, 1024) as reader:
        assert reader.read() == big[10:1034]
    assert direct_store.opened_direct == []


def test_a_direct_share_cut_short_behind_the_store_is_an_error(direct_store):
    data = os.urandom(direct.DIRECT_MIN * 3)
    direct_store.put(key_of(data), ALICE, data)
    os.truncate(direct_store._layout.share_path(key_of(data)), len(data) - 5000)
    with direct_store.open_reader(key_of(data), ALICE) as reader:
        with pytest.raises(OSError, match="ends early"):
            while reader.read(1 << 20):
                pass


def test_full_disk_during_a_direct_upload_loses_nothing(direct_store, monkeypatch):
    data = os.urandom(3 * direct.STAGING_SIZE)
    upload = direct_store.open_upload(key_of(data), ALICE, len(data))
    upload.write(data[:direct.STAGING_SIZE // 2])

    def full(fd, view):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(NoSpace, match="disk is full"):
        upload.write(data[direct.STAGING_SIZE // 2:])
    monkeypatch.undo()
    assert os.listdir(os.path.join(direct_store.root, "incoming")) == []
    assert direct_store.stats()["free"] == CAPACITY
    direct_store.put(key_of(data), ALICE, data)  # still usable
    assert read_all(direct_store, key_of(data), ALICE) == data


def test_without_o_direct_the_store_falls_back_to_the_page_cache(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(disk, "open_direct", lambda path, flags: calls.append(flags))  # refuses: None
    store = ShareStore(tmp_path / "store", CAPACITY)
    first, second = os.urandom(direct.DIRECT_MIN * 2), os.urandom(direct.DIRECT_MIN * 3)
    store.put(key_of(first), ALICE, first)
    store.put(key_of(second), ALICE, second)
    assert len(calls) == 1  # refused once: not asked again
    assert read_all(store, key_of(first), ALICE) == first
    assert read_all(store, key_of(second), ALICE) == second
    store.close()


def test_pread_direct_reads_short_at_the_end_of_the_file(tmp_path):
    if not _has_o_direct(tmp_path):
        pytest.skip("this filesystem has no O_DIRECT")
    data = os.urandom(direct.STAGING_SIZE + 5000)
    path = tmp_path / "f"
    path.write_bytes(data)
    fd = direct.open_direct(str(path), os.O_RDONLY)
    try:
        assert direct.pread_direct(fd, 10_000, len(data) - 3000) == data[-3000:]
        assert direct.pread_direct(fd, len(data), 0) == data
        assert direct.pread_direct(fd, 10, len(data) + 4096) == b""
    finally:
        os.close(fd)


def test_staging_buffers_are_reused_and_bounded():
    pool = direct._StagingPool()
    buffers = [pool.take() for _ in range(direct.KEEP_SPARE + 2)]
    for b in buffers:
        pool.give(b)
    assert len(pool._spare) == direct.KEEP_SPARE
    assert sum(b.closed for b in buffers) == 2
    assert pool.take() is buffers[direct.KEEP_SPARE - 1]


@pytest.mark.parametrize("direct_io", [True, False])
def test_sequential_writer_and_reader_round_trip(tmp_path, monkeypatch, direct_io):
    if direct_io and not _has_o_direct(tmp_path):
        pytest.skip("this filesystem has no O_DIRECT")
    if not direct_io:
        monkeypatch.setattr(direct, "open_direct", lambda path, flags: None)
    data = os.urandom(2 * direct.STAGING_SIZE + 4097)
    path = str(tmp_path / "file")
    with direct.SequentialWriter(path) as out:
        for start in range(0, len(data), 300_007):
            out.write(memoryview(data)[start:start + 300_007])
        out.finish()
    assert os.path.getsize(path) == len(data)
    with open(path, "rb") as f:
        assert f.read() == data
    got = []
    with direct.SequentialReader(path) as f:
        while True:
            buffer = bytearray(2 * 1024 * 1024)  # a segment, as the backup reads it
            n = f.readinto(buffer)
            if not n:
                break
            del buffer[n:]  # the reader left no view of the buffer behind
            got.append(bytes(buffer))
    assert [len(g) for g in got] == [2 * 1024 * 1024, 4097]
    assert b"".join(got) == data
