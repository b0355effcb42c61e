"""A restored file's blocks are written in order on the writer's own thread;
a write error is seen, stops later writes, still hands every buffer back
(no fetch waits forever) and fails finish()."""
import errno
import os
import threading

import pytest

from flud.client.directio import SequentialWriter
from flud.client.writer import BackgroundWriter
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


def _drain(writer, calls):
    done = []
    writer.finish().addBoth(done.append)
    writer._thread.join(10)
    assert not writer._thread.is_alive()
    calls.run()
    return done[0]


def test_pieces_are_written_in_order_and_handed_back(tmp_path):
    calls, back = ThreadCalls(), []
    path = str(tmp_path / "f")
    pieces = [os.urandom(n) for n in (4096, 8192, 100, 5000)]
    with SequentialWriter(path) as out:
        writer = BackgroundWriter(calls, out, back.append)
        for piece in pieces:
            writer.write(piece)
        assert _drain(writer, calls) is None
    assert back == pieces
    with open(path, "rb") as f:
        assert f.read() == b"".join(pieces)


def test_a_failed_write_stops_the_rest_and_fails_finish(tmp_path, monkeypatch):
    calls, back = ThreadCalls(), []
    tried = []

    def full(self, pieces):
        tried.append(pieces)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(SequentialWriter, "write_pieces", full)
    with SequentialWriter(str(tmp_path / "f")) as out:
        writer = BackgroundWriter(calls, out, back.append)
        for piece in (b"a", b"b", b"c"):
            writer.write(piece)
        outcome = _drain(writer, calls)
    assert len(tried) == 1  # nothing written after the first failure
    assert back == [b"a", b"b", b"c"]  # every buffer came back all the same
    assert isinstance(writer.error, OSError) and writer.error.errno == errno.ENOSPC
    assert outcome.check(OSError)


def test_stop_returns_once_the_thread_has_stopped(tmp_path):
    calls = ThreadCalls()
    with SequentialWriter(str(tmp_path / "f")) as out:
        writer = BackgroundWriter(calls, out, lambda piece: None)
        writer.write(b"x" * 4096)
        writer.stop()
        assert not writer._thread.is_alive()


def test_a_restore_onto_a_full_disk_fails_the_file_and_leaves_nothing(world, tmp_path,
                                                                      monkeypatch):
    clock, home, network = world
    src, _ = _large_tree(tmp_path, extents_count=1.5)
    summary, _, _ = run_backup(world, [src])
    manifest, _ = _large_record(home, summary)

    def full(self, pieces):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(SequentialWriter, "write_pieces", full)
    restored, _ = run_restore(world, str(tmp_path / "out"), manifest)
    assert restored["failed"] == 1
    assert os.listdir(tmp_path / "out" / "src") == []  # no partial file left behind
