"""The backup's buffers and the memory budget: every one of them is counted
(the open bundle, each tar from its first member to its node's answer, each
large-file segment), reserved before it exists, and the budget bounds them."""
import os
import random

import pytest

from flud.client.repository.extents import ExtentUpload
from flud.client.backup.large_files import LargeFiles
from flud.client.backup.backup_job import Backup
from flud.client.backup.small_files import SmallFiles
from flud.client.home import create_home
from flud.client.progress import Progress
from flud.client.restore.restore_job import Restore
from flud.client.restore.block_writer import InlineBlockWriter
from flud.memory import MemoryMonitor
from flud.workers import CPUPool
from tests.unit.client.fakes import FakeNetwork, FakeReactor, make_world, run_until, snapshot_manifest
from tools.treecmp import compare_trees

MIB = 1024 * 1024


def small_tree(root, rng, count=300, largest=200_000):
    os.makedirs(root)
    for i in range(count):
        size = rng.choice([1, 700, 5000, 40_000, rng.randint(1, largest)])
        with open(os.path.join(root, f"f{i:04d}"), "wb") as f:
            f.write(rng.randbytes(size))


@pytest.fixture
def world(tmp_path):
    return make_world(tmp_path, nodes=20)


class CheckedSmallFiles(SmallFiles):
    """Checks, every time the backup settles its accounts, that the monitor
    counts exactly what the aggregator holds."""

    checks = 0

    def _account_small(self):
        super()._account_small()
        if self._bundle_memory is None or self._bundle_memory.closed:
            return
        with self._aggregator_lock:
            tars = self.aggregator.pending_tars()
            bundle = self.aggregator.bundle_bytes
        assert self._bundle_memory.reserved("building") + \
            self._bundle_memory.held("building") == bundle
        assert set(self._tar_memory) == set(tars)
        for serial, (node, size, sealed) in tars.items():
            memory = self._tar_memory[serial]
            assert memory.kind == "tar" and memory.name == node[:16]
            assert memory.current_bytes == size
            label = "sealed" if sealed else "building"
            assert memory.reserved(label) + memory.held(label) == size
        if not self._small_calls:
            assert self._credit == 0 and self._bundle_memory.reserved("work") == 0
        CheckedSmallFiles.checks += 1


def run_backup(world, paths, budget, large_files=LargeFiles):
    clock, home, network = world
    monitor = MemoryMonitor(clock=clock.seconds, rss_reader=lambda: 0, budget_bytes=budget)
    kinds = {}
    transfer = monitor.transfer

    def counting(kind, name):
        kinds[kind] = kinds.get(kind, 0) + 1
        return transfer(kind, name)

    monitor.transfer = counting
    CheckedSmallFiles.checks = 0
    job = Backup(clock, home, network, CPUPool(clock, inline=True), monitor,
                 Progress("backup", quiet=True), clock=clock.seconds,
                 small_files=CheckedSmallFiles, large_files=large_files)
    summary = run_until(clock, job.run(paths))
    return summary, monitor, job, kinds


def restore_matches(world, src, snapshot, dest):
    clock, home, network = world
    job = Restore(clock, home, network, CPUPool(clock, inline=True),
                  MemoryMonitor(clock=clock.seconds, rss_reader=lambda: 0),
                  Progress("restore", quiet=True), snapshot_manifest(world, snapshot),
                  block_writer=InlineBlockWriter)
    run_until(clock, job.run(dest, ()))
    return compare_trees(src, os.path.join(dest, os.path.basename(src))) == []


def test_every_tar_and_the_open_bundle_are_transfers_counted_to_the_byte(world, tmp_path):
    src = str(tmp_path / "src")
    small_tree(src, random.Random(1))
    summary, monitor, job, kinds = run_backup(world, [src], budget=64 * MIB)
    assert summary["new"] == 300 and summary["tars"] > 0
    assert CheckedSmallFiles.checks > summary["tars"]  # after every call and every answer
    assert kinds["tar"] >= summary["tars"] and kinds["bundle"] == 1
    # everything was given back
    assert monitor.buffered_bytes == 0 and monitor.active_transfers == 0
    assert 0 < monitor.peak_buffered_bytes <= 64 * MIB
    assert restore_matches(world, src, summary["snapshot"], str(tmp_path / "out"))


@pytest.mark.parametrize("budget_mib", [12, 20])
def test_the_budget_bounds_small_and_large_files_together(world, tmp_path, budget_mib):
    """Small files fill tars for many nodes while large files send segments:
    the budget, not the aggregator's default bound (32 MiB), is the limit."""
    src = str(tmp_path / "src")
    rng = random.Random(2)
    small_tree(src, rng, count=600, largest=900_000)
    for i in range(3):
        with open(os.path.join(src, f"large-{i}"), "wb") as f:
            f.write(rng.randbytes(5 * MIB + i))
    budget = budget_mib * MIB
    summary, monitor, job, _ = run_backup(world, [src], budget=budget)
    assert summary["new"] == 603 and summary["skipped"] == 0
    assert job.policy.max_pending_bytes < 32 * MIB
    # held bytes (shares moved off a failed node) are the only way past it
    assert monitor.peak_buffered_bytes <= budget
    assert monitor.peak_transfer_bytes <= 4 * MIB
    assert monitor.buffered_bytes == 0 and monitor.active_transfers == 0
    assert restore_matches(world, src, summary["snapshot"], str(tmp_path / "out"))


def test_a_tiny_budget_is_slow_but_does_not_deadlock(world, tmp_path):
    """Below one segment plus one bundle's coding nothing fits twice: open
    tars and the open bundle are sealed and sent to make room, and requests
    larger than the budget go in alone."""
    src = str(tmp_path / "src")
    rng = random.Random(3)
    small_tree(src, rng, count=120, largest=600_000)
    with open(os.path.join(src, "large"), "wb") as f:
        f.write(rng.randbytes(3 * MIB))
    summary, monitor, _, _ = run_backup(world, [src], budget=2 * MIB)
    assert summary["new"] == 121
    assert monitor.buffered_bytes == 0 and monitor.active_transfers == 0
    assert restore_matches(world, src, summary["snapshot"], str(tmp_path / "out"))


def test_a_failed_tar_moves_its_shares_and_every_byte_is_still_counted(world, tmp_path):
    clock, home, network = world
    src = str(tmp_path / "src")
    small_tree(src, random.Random(4), count=200)
    failed = []
    call = network.call

    def first_tar_fails(node_id, method, *args):
        if method == "store" and len(args) > 2 and args[2] == 1 and not failed:
            failed.append(node_id)
            network.nodes[node_id].up = False  # that node is gone for good
        return call(node_id, method, *args)

    network.call = first_tar_fails
    summary, monitor, job, _ = run_backup(world, [src], budget=24 * MIB)
    assert summary["new"] == 200
    assert failed and failed[0] in network.failed
    assert monitor.buffered_bytes == 0 and monitor.active_transfers == 0
    assert restore_matches(world, src, summary["snapshot"], str(tmp_path / "out"))


def _watch_segment_reads(k):
    """Before each segment is read: how many earlier segments' primary shares
    and parity sets are still alive. Returns (weakrefs to the segments, that
    log, the LargeFiles part that keeps them)."""
    import gc
    import weakref

    made, seen = [], []

    class WatchedLargeFiles(LargeFiles):
        def read_segment(self, entry, f, buffer, length, hashes, *plan):
            gc.collect()
            alive = [ref() for ref in made if ref() is not None]
            seen.append((sum(1 for p in alive for s in p.shares[:k] if s is not None),
                         sum(1 for p in alive if any(s is not None for s in p.shares[k:])),
                         id(buffer)))
            prep = super().read_segment(entry, f, buffer, length, hashes, *plan)
            made.append(weakref.ref(prep))
            return prep

    return made, seen, WatchedLargeFiles


def test_a_large_file_holds_its_window_of_segments_and_one_parity(world, tmp_path):
    """When the next segment is read, at most window-1 earlier segments'
    ciphertexts are alive (their primary shares are views of them; a
    segment's goes once its primaries are taken and its parity coded) and at
    most one parity set: the 4 MiB per transfer in all."""
    clock, home, network = world
    k = home.config["k"]
    home.config["segment_size"] = MIB  # 2 MiB ones (the default) leave room for one
    src = str(tmp_path / "src")
    os.makedirs(src)
    with open(os.path.join(src, "large"), "wb") as f:
        f.write(random.Random(5).randbytes(9 * MIB + 5))
    made, seen, watched = _watch_segment_reads(k)
    summary, monitor, job, _ = run_backup(world, [src], budget=64 * MIB, large_files=watched)
    assert summary["new"] == 1
    assert len(seen) == 10  # ten segments
    window = job.segment_window
    assert window == 3  # 1 MiB segments at 4-of-8: 3 ciphertexts + 1 parity = 4 MiB
    assert all(primaries <= (window - 1) * k and parities <= 1
               for primaries, parities, _ in seen), seen
    assert max(primaries for primaries, _, _ in seen) == (window - 1) * k, seen  # it overlaps
    # the file reads every segment into one of its own `window` buffers
    assert len({buffer for _, _, buffer in seen}) == window
    assert monitor.peak_transfer_bytes <= 4 * MIB


def test_the_next_segment_is_read_while_the_parity_is_still_on_its_way(world, tmp_path,
                                                                       monkeypatch):
    """Parity that its streams take slowly does not hold up the next
    segment's read (only its parity, which waits for it): reading, coding
    and sending overlap within one file, in one segment's footprint."""
    from twisted.internet import task

    clock, home, network = world
    k = home.config["k"]
    src = str(tmp_path / "src")
    os.makedirs(src)
    data = random.Random(6).randbytes(5 * home.config["segment_size"])
    with open(os.path.join(src, "large"), "wb") as f:
        f.write(data)
    made, seen, watched = _watch_segment_reads(k)
    real_feed = ExtentUpload.feed

    def slow_parity(self, shares, indexes):
        d = real_feed(self, shares, indexes)
        if indexes[0] >= k:
            return d.addCallback(lambda result: task.deferLater(clock, 0.1, lambda: result))
        return d

    monkeypatch.setattr(ExtentUpload, "feed", slow_parity)
    summary, monitor, job, _ = run_backup(world, [src], budget=64 * MIB, large_files=watched)
    assert summary["new"] == 1
    window = job.segment_window
    assert all(primaries <= (window - 1) * k and parities <= 1
               for primaries, parities, _ in seen), seen
    assert sum(parities for _, parities, _ in seen) >= 3, seen  # read while a parity was out
    segment, n = home.config["segment_size"], home.config["n"]
    assert monitor.peak_transfer_bytes <= window * segment + -(-segment // k) * (n - k)
    assert restore_matches(world, src, summary["snapshot"], str(tmp_path / "out"))


def test_large_files_at_once_share_a_few_parity_sets(world, tmp_path):
    """Six large files back up at once, but their parity is coded into at
    most MAX_PARITY_SETS shared sets (a file holds one only while its parity
    is coded and taken), and every file restores byte for byte."""
    from flud.client.backup.large_files import MAX_PARITY_SETS, ParitySets

    clock, home, network = world
    src = str(tmp_path / "src")
    os.makedirs(src)
    size = 3 * home.config["segment_size"] + 77
    for i in range(6):
        with open(os.path.join(src, f"large{i}"), "wb") as f:
            f.write(random.Random(i).randbytes(size))
    made = []
    real_get = ParitySets.get

    def get(self):
        d = real_get(self)
        return d.addCallback(lambda parity_set: made.append(id(parity_set)) or parity_set)

    ParitySets.get = get
    try:
        monitor = MemoryMonitor(clock=clock.seconds, rss_reader=lambda: 0, budget_bytes=64 * MIB)
        job = Backup(clock, home, network, CPUPool(clock, inline=True), monitor,
                     Progress("backup", quiet=True), clock=clock.seconds, parallel_files=6)
        summary = run_until(clock, job.run([src]))
    finally:
        ParitySets.get = real_get
    assert summary["new"] == 6
    assert len(made) == 6 * 4  # a parity per segment
    assert len(set(made)) <= MAX_PARITY_SETS < 6
    assert restore_matches(world, src, summary["snapshot"], str(tmp_path / "out"))
