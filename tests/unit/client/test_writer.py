"""A restored file's blocks are opened and written at their offsets on the
writer's threads; a refused block is not written; a write error is seen,
stops later writes, still hands every buffer back (no fetch waits forever)
and fails finish()."""
import errno
import mmap
import os
import threading

import pytest

from flud.client.directio import PositionalWriter
from flud.client.restore.block_writer import BlockWriter
from tests.unit.client.test_extents import _large_record, _large_tree, world  # noqa: F401
from tests.unit.client.test_pipeline import run_backup, run_restore


class ThreadCalls:
    """A reactor stand-in: callFromThread queues; run() runs them here."""

    def __init__(self):
        self.calls, self.lock = [], threading.Lock()

    def callFromThread(self, fn, *args):
        with self.lock:
            self.calls.append((fn, args))

    def run(self):
        with self.lock:
            calls, self.calls = self.calls, []
        for fn, args in calls:
            fn(*args)


def _drain(writer, calls, length=0):
    done = []
    writer.finish(length).addBoth(done.append)
    for thread in writer._threads:
        thread.join(10)
        assert not thread.is_alive()
    calls.run()
    return done[0]


@pytest.mark.parametrize("direct", [True, False], ids=["o_direct", "no_o_direct"])
def test_blocks_are_opened_and_written_at_their_offsets(tmp_path, monkeypatch, direct):
    from flud.client import directio

    if not direct:  # as on a filesystem without O_DIRECT (tmpfs)
        monkeypatch.setattr(directio, "open_direct", lambda path, flags: None)
    calls, back = ThreadCalls(), []
    path = str(tmp_path / "f")
    blocks = [mmap.mmap(-1, 8192) for _ in range(4)]  # O_DIRECT where it can
    for block in blocks:
        block.write(os.urandom(8192))
    tail = os.urandom(5000)  # not a whole block: through the cache
    flip = lambda piece: bytes(b ^ 0xFF for b in bytes(piece))  # noqa: E731
    refuse = lambda piece: None  # noqa: E731
    # out of order, as blocks arrive
    jobs = [(8192, blocks[1], None), (4 * 8192, tail, None), (0, blocks[0], flip),
            (3 * 8192, blocks[3], refuse), (2 * 8192, blocks[2], None)]
    with PositionalWriter(path) as out:
        writer = BlockWriter(calls, out)
        for offset, piece, opener in jobs:
            writer.write(offset, memoryview(piece),
                         lambda written, piece: back.append((written, bytes(piece))), opener)
        length = 4 * 8192 + len(tail)
        assert _drain(writer, calls, length) is None
    assert sorted(piece for _, piece in back) == sorted(bytes(p) for _, p, _ in jobs)
    refused = [piece for written, piece in back if written is None]
    assert refused == [bytes(blocks[3])]
    with open(path, "rb") as f:
        data = f.read()
    assert data == (flip(blocks[0]) + bytes(blocks[1]) + bytes(blocks[2]) + bytes(8192)
                    + tail)


def test_a_failed_write_stops_the_rest_and_fails_finish(tmp_path, monkeypatch):
    calls, back = ThreadCalls(), []
    tried = []

    def full(self, offset, piece):
        tried.append(piece)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(PositionalWriter, "write_at", full)
    with PositionalWriter(str(tmp_path / "f")) as out:
        writer = BlockWriter(calls, out, threads=1)
        for offset, piece in enumerate((b"a", b"b", b"c")):
            writer.write(offset, piece, lambda written, piece: back.append((written, piece)))
        outcome = _drain(writer, calls)
    assert len(tried) == 1  # nothing written after the first failure
    assert back == [(None, b"a"), (None, b"b"), (None, b"c")]  # every buffer came back
    assert isinstance(writer.error, OSError) and writer.error.errno == errno.ENOSPC
    assert outcome.check(OSError)


def test_stop_returns_once_the_threads_have_stopped(tmp_path):
    calls, back = ThreadCalls(), []
    with PositionalWriter(str(tmp_path / "f")) as out:
        writer = BlockWriter(calls, out)
        writer.write(0, b"x" * 4096, lambda written, piece: back.append(piece))
        writer.stop()
        assert not any(t.is_alive() for t in writer._threads)
        writer.write(4096, b"late", lambda written, piece: back.append(piece))  # its file failed
    calls.run()
    assert back in ([], [b"x" * 4096])  # written before the stop, or dropped


def test_a_restore_onto_a_full_disk_fails_the_file_and_leaves_nothing(world, tmp_path,
                                                                      monkeypatch):
    clock, home, network = world
    src, _ = _large_tree(tmp_path, extents_count=1.5)
    summary, _, _ = run_backup(world, [src])
    manifest, _ = _large_record(world, summary)

    def full(self, offset, piece):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(PositionalWriter, "write_at", full)
    restored, _ = run_restore(world, str(tmp_path / "out"), manifest)
    assert restored["failed"] == 1
    assert os.listdir(tmp_path / "out" / "src") == []  # no partial file left behind
