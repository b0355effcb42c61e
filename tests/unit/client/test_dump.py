"""`flud dump` (issue 28, item 3) on the in-memory network: a file comes out
as its bytes, a directory as a tar stream that unpacks to the tree, and a
path that matches nothing is an error."""
import hashlib
import io
import os
import queue
import random
import tarfile

import pytest

from flud.client.context import JobContext
from flud.client.progress import Progress
from flud.client.restore.dump_job import DumpError, StreamWriter, dump_snapshot
from flud.client.repository.snapshot_lookup import find_snapshot
from flud.coding import SegmentCoder
from flud.memory import MemoryMonitor
from flud.workers import CPUPool
from tests.unit.client.fakes import FakeNetwork, FakeReactor, run_until
from tests.unit.client.test_pipeline import run_backup

MIB = 1024 * 1024


class ThreadedClock(FakeReactor):
    """A fake reactor whose callFromThread runs on the test's thread, as a
    real reactor's does (the dump's writer is a thread of its own)."""

    def __init__(self):
        super().__init__()
        self.from_threads = queue.SimpleQueue()

    def callFromThread(self, fn, *args, **kwargs):
        self.from_threads.put((fn, args, kwargs))

    def advance(self, amount):
        while True:
            try:
                fn, args, kwargs = self.from_threads.get_nowait()
            except queue.Empty:
                break
            fn(*args, **kwargs)
        super().advance(amount)


def _world(tmp_path):
    from flud.client.home import create_home
    clock = ThreadedClock()
    home = create_home(str(tmp_path / "home"), join=("127.0.0.1", 1))
    network = FakeNetwork(clock, nodes=8)
    network.client_id = home.identity.node_id
    return clock, home, network


@pytest.fixture
def world(tmp_path):
    world = _world(tmp_path)
    src = tmp_path / "src"
    rng = random.Random(5)
    (src / "docs" / "deep").mkdir(parents=True)
    (src / "docs" / "a.txt").write_bytes(rng.randbytes(3000))
    (src / "docs" / "deep" / "b.txt").write_bytes(rng.randbytes(10))
    (src / "docs" / "empty").write_bytes(b"")
    (src / "big.bin").write_bytes(rng.randbytes(5 * MIB + 77))
    os.symlink("docs/a.txt", src / "docs" / "link")
    os.chmod(src / "docs" / "a.txt", 0o640)
    run_backup(world, [str(src)])
    return world, src


def _dump(world, path, out):
    clock, home, network = world
    k, n = home.config["k"], home.config["n"]
    ctx = JobContext(clock, home, network, CPUPool(clock, inline=True),
                     MemoryMonitor(clock=clock.seconds, rss_reader=lambda: 0),
                     Progress("dump", quiet=True), SegmentCoder(k, n), clock.seconds)
    found = run_until(clock, find_snapshot(ctx))
    try:
        return run_until(clock, dump_snapshot(ctx, found, path, out), step=0.001)
    finally:
        found.close()


def test_a_large_file_comes_out_as_its_bytes(world):
    world, src = world
    out = io.BytesIO()
    dump = _dump(world, str(src / "big.bin"), out)   # its original absolute path
    assert not dump.as_tar and dump.summary["bytes"] == 5 * MIB + 77
    assert hashlib.sha256(out.getvalue()).digest() == \
        hashlib.sha256((src / "big.bin").read_bytes()).digest()


def test_a_directory_comes_out_as_a_tar_stream_of_its_tree(world):
    world, src = world
    out = io.BytesIO()
    dump = _dump(world, "src/docs", out)
    assert dump.as_tar and dump.summary["files"] == 3 and dump.summary["symlinks"] == 1
    out.seek(0)
    with tarfile.open(fileobj=out, mode="r|") as tar:
        members = {}
        for member in tar:
            data = tar.extractfile(member).read() if member.isreg() else None
            members[member.name] = (member, data)
    assert sorted(members) == ["docs", "docs/a.txt", "docs/deep", "docs/deep/b.txt",
                               "docs/empty", "docs/link"]
    member, data = members["docs/a.txt"]
    assert data == (src / "docs" / "a.txt").read_bytes() and member.mode == 0o640
    assert member.mtime == pytest.approx(os.stat(src / "docs" / "a.txt").st_mtime, abs=1e-3)
    assert members["docs/link"][0].issym() and members["docs/link"][0].linkname == "docs/a.txt"
    assert members["docs/empty"][1] == b"" and members["docs"][0].isdir()


def test_a_path_that_matches_nothing_is_an_error_and_writes_nothing(world):
    world, _ = world
    out = io.BytesIO()
    with pytest.raises(DumpError, match="nothing in the snapshot matches src/nope"):
        _dump(world, "src/nope", out)
    assert out.getvalue() == b""


def test_the_writer_holds_at_most_its_bound_before_it_waits():
    """Nothing is taken from the queue while the stream does not drain: the
    third segment's write waits (backpressure reaches the fetches)."""
    clock = ThreadedClock()

    class Stuck(io.RawIOBase):
        def __init__(self):
            import threading
            self.go = threading.Event()
            self.got = 0

        def writable(self):
            return True

        def write(self, data):
            self.go.wait(10)
            self.got += len(data)
            return len(data)

    out = Stuck()
    writer = StreamWriter(clock, out, as_tar=False, limit=4 * MIB)
    first = writer.write(bytes(2 * MIB))
    second = writer.write(bytes(2 * MIB))
    assert first.called and not second.called
    out.go.set()
    run_until(clock, second)
    run_until(clock, writer.close())
    assert out.got == 4 * MIB and writer.written == 4 * MIB
