"""Large files read for a backup and written by a restore go around the page
cache (flud/client/directio.py): exact bytes, exact sizes, unaligned tails,
a full disk, and plain I/O where O_DIRECT is refused."""

from __future__ import annotations

import errno
import os

import pytest

from flud.client import directio


def _has_o_direct(path) -> bool:
    probe = os.path.join(path, "probe")
    open(probe, "wb").close()
    try:
        fd = directio.open_direct(probe, os.O_RDONLY)
    finally:
        os.unlink(probe)
    if fd is None:
        return False
    os.close(fd)
    return True


@pytest.fixture(params=[True, False], ids=["o_direct", "plain"])
def direct_io(request, tmp_path, monkeypatch):
    """Runs a test with O_DIRECT and again as on a filesystem that refuses it."""
    if request.param and not _has_o_direct(tmp_path):
        pytest.skip("this filesystem has no O_DIRECT")
    opened = []
    real = directio.open_direct

    def spy(path, flags):
        fd = real(path, flags) if request.param else None
        opened.append(fd is not None)
        return fd

    monkeypatch.setattr(directio, "open_direct", spy)
    return opened


def _write(path, data, piece=4096 * 73):
    """As a restore writes: page-aligned whole blocks at their offsets, out of
    order, and the tail last."""
    import mmap

    with directio.PositionalWriter(path) as out:
        starts = list(range(0, len(data), piece))
        for start in reversed(starts):
            chunk = data[start:start + piece]
            block = mmap.mmap(-1, len(chunk)) if chunk else b""
            if chunk:
                block.write(chunk)
            out.write_at(start, memoryview(block))
        out.finish(len(data))


@pytest.mark.parametrize("size", [0, 1, 4096, directio.STAGING_SIZE, 2 * directio.STAGING_SIZE + 4097])
def test_positional_writer_and_sequential_reader_round_trip(tmp_path, direct_io, size):
    data = os.urandom(size)
    path = str(tmp_path / "file")
    _write(path, data)
    assert len(direct_io) == 1  # O_DIRECT asked for once per file
    assert os.path.getsize(path) == size
    with open(path, "rb") as f:
        assert f.read() == data
    got = []
    with directio.SequentialReader(path) as f:
        while True:
            buffer = bytearray(2 * 1024 * 1024)  # a segment, as the backup reads it
            n = f.readinto(buffer)
            if not n:
                break
            del buffer[n:]  # the reader left no view of the buffer behind
            got.append(bytes(buffer))
    assert b"".join(got) == data
    assert all(len(g) == 2 * 1024 * 1024 for g in got[:-1])


def test_readinto_direct_at_unaligned_offsets_and_past_the_end(tmp_path):
    if not _has_o_direct(tmp_path):
        pytest.skip("this filesystem has no O_DIRECT")
    data = os.urandom(directio.STAGING_SIZE + 5000)
    path = tmp_path / "f"
    path.write_bytes(data)
    fd = directio.open_direct(str(path), os.O_RDONLY)
    try:
        for offset, length in [(1, 200_000), (4095, directio.STAGING_SIZE + 2), (len(data) - 3000, 10_000),
                               (len(data) + 4096, 10)]:
            target = bytearray(length)
            n = directio.readinto_direct(fd, memoryview(target), offset)
            assert bytes(target[:n]) == data[offset:offset + length], (offset, length)
    finally:
        os.close(fd)


def test_an_aligned_buffer_is_read_into_directly(tmp_path, monkeypatch):
    """A page-aligned segment buffer (as a large file's backup uses) is filled
    by the device itself, with no staging copy, up to the end of the file."""
    import mmap

    if not _has_o_direct(tmp_path):
        pytest.skip("this filesystem has no O_DIRECT")
    data = os.urandom(3 * directio.STAGING_SIZE + 5000)
    path = tmp_path / "f"
    path.write_bytes(data)
    staged = []
    real = directio._direct_pieces
    monkeypatch.setattr(directio, "_direct_pieces",
                        lambda *a: staged.append(a) or real(*a))
    buffer = mmap.mmap(-1, 2 * directio.STAGING_SIZE)
    with directio.SequentialReader(str(path)) as f:
        assert f.readinto(memoryview(buffer)) == len(buffer)
        assert buffer[:] == data[:len(buffer)]
        rest = len(data) - len(buffer)
        assert f.readinto(memoryview(buffer)) == rest  # short: the end of the file
        assert buffer[:rest] == data[len(buffer):]
        assert staged == []
        assert f.readinto(memoryview(buffer)) == 0
    # not aligned (an odd length): staged, the same bytes
    with directio.SequentialReader(str(path)) as f:
        target = memoryview(buffer)[:4097]
        staged.clear()
        assert f.readinto(target) == 4097 and buffer[:4097] == data[:4097]
    assert len(staged) == 1


def test_a_full_disk_fails_the_write_loudly(tmp_path, direct_io, monkeypatch):
    path = str(tmp_path / "file")
    writer = directio.PositionalWriter(path)

    def full(fd, views, offset):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "pwritev", full)
    with pytest.raises(OSError) as failure:
        writer.write_at(0, os.urandom(directio.STAGING_SIZE))
        writer.finish(directio.STAGING_SIZE)
    assert failure.value.errno == errno.ENOSPC
    monkeypatch.undo()
    writer.close()
    writer.close()  # twice: a no-op


def test_staging_buffers_are_reused_and_bounded():
    pool = directio._StagingPool()
    buffers = [pool.take() for _ in range(directio.KEEP_SPARE + 2)]
    for b in buffers:
        pool.give(b)
    assert len(pool._spare) == directio.KEEP_SPARE
    assert sum(b.closed for b in buffers) == 2
    assert pool.take() is buffers[directio.KEEP_SPARE - 1]


def test_a_reader_refused_at_the_read_goes_on_with_plain_reads(tmp_path, monkeypatch):
    if not _has_o_direct(tmp_path):
        pytest.skip("this filesystem has no O_DIRECT")
    data = os.urandom(3 * 1024 * 1024 + 10)
    path = tmp_path / "f"
    path.write_bytes(data)
    calls = []
    real = directio.readinto_direct

    def refuse_the_second(fd, target, offset):
        calls.append(offset)
        if len(calls) == 2:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        return real(fd, target, offset)

    monkeypatch.setattr(directio, "readinto_direct", refuse_the_second)
    got = []
    with directio.SequentialReader(str(path)) as f:
        while True:
            buffer = bytearray(2 * 1024 * 1024)
            n = f.readinto(buffer)
            if not n:
                break
            got.append(bytes(buffer[:n]))
    assert b"".join(got) == data and calls == [0, 2 * 1024 * 1024]
