"""Small files restored by runs of a share block, over an in-memory network:
few RETRIEVEs, the same fallbacks as file by file, bounded memory, and one
sync per batch of files before they are renamed into place."""
import os
import random
import threading

import pytest

from flud.client.backup.backup_job import Backup
from flud.client.progress import Progress
from flud.client.records import Bundle, SmallContent, content_from_wire, entries_from_wire
from flud.client.restore.destdir import SafeDest
from flud.client.restore.file_writer import BATCH_FILES, TEMP_SUFFIX, FileWriter
from flud.client.restore.restore_job import Restore
from flud.client.restore.small_runs import RUN_CAP, RUNS_IN_FLIGHT, plan_runs
from flud.client.restore.block_writer import InlineBlockWriter
from flud.coding import locate
from flud.memory import MemoryMonitor
from flud.workers import CPUPool
from tests.unit.client.fakes import make_world, run_until, snapshot_manifest
from tools.treecmp import compare_trees

KIB = 1024


@pytest.fixture
def world(tmp_path):
    return make_world(tmp_path, nodes=12)


def small_tree(root, count, seed, empty=0, size=(1, 3 * KIB)):
    rng = random.Random(seed)
    for i in range(count):
        folder = os.path.join(root, f"d{i % 3}")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"f{i}"), "wb") as f:
            f.write(rng.randbytes(rng.randint(*size)))
    for i in range(empty):
        with open(os.path.join(root, f"empty-{i}"), "wb"):
            pass
    os.chmod(os.path.join(root, "d1", "f1"), 0o600)


def backup(world, src):
    clock, home, network = world
    monitor = MemoryMonitor(clock=clock.seconds, rss_reader=lambda: 0)
    job = Backup(clock, home, network, CPUPool(clock, inline=True), monitor,
                 Progress("backup", quiet=True), clock=clock.seconds)
    summary = run_until(clock, job.run([src]))
    return snapshot_manifest(world, summary["snapshot"])


class Syncs:
    """The injected sync: counts calls, and what DEST held at each."""

    def __init__(self, dest):
        self.dest = dest
        self.calls = 0
        self.temps_seen = []

    def __call__(self, fd):
        self.calls += 1
        temps = sum(1 for _, _, names in os.walk(self.dest)
                    for name in names if name.endswith(TEMP_SUFFIX))
        self.temps_seen.append(temps)


def restore(world, dest, manifest, budget=64 * 1024 * KIB, paths=()):
    clock, home, network = world
    monitor = MemoryMonitor(clock=clock.seconds, rss_reader=lambda: 0, budget_bytes=budget)
    peaks = {}
    make_transfer = monitor.transfer

    def transfer(kind, name):
        made = make_transfer(kind, name)
        peaks[kind] = made
        return made

    monitor.transfer = transfer
    syncs = Syncs(dest)
    job = Restore(clock, home, network, CPUPool(clock, inline=True), monitor,
                  Progress("restore", quiet=True), manifest,
                  block_writer=InlineBlockWriter, sync=syncs)
    summary = run_until(clock, job.run(dest, paths))
    return summary, job, syncs, monitor, peaks


def small_items(manifest):
    contents = manifest["contents"]
    return [(e, content_from_wire(contents[e.last])) for e in entries_from_wire(manifest["entries"])
            if e.is_file and contents[e.last]["t"] == "S"]


def bundle_of(manifest):
    return lambda bundle_id: Bundle.from_wire(manifest["bundles"][bundle_id])


def test_small_files_come_by_runs_with_far_fewer_retrieves(world, tmp_path):
    src, out = str(tmp_path / "src"), str(tmp_path / "out")
    small_tree(src, 300, seed=1, empty=3)
    manifest = backup(world, src)
    items = small_items(manifest)
    runs, splits, alone = plan_runs(items, bundle_of(manifest))
    assert len(items) == 300 and not alone
    assert sum(len(r.members) for r in runs) == 300 + len(splits)
    network = world[2]
    before = network.calls.get("retrieve", 0)
    summary, job, syncs, _, _ = restore(world, out, manifest)
    assert summary["failed"] == summary["bad_shares"] == 0
    assert summary["files"] == 303
    assert compare_trees(src, os.path.join(out, "src")) == []
    # one RETRIEVE per run, nothing else
    assert summary["retrieves"] == network.calls["retrieve"] - before == len(runs) < 10


def test_a_file_spanning_two_blocks_is_restored(world, tmp_path):
    src, out = str(tmp_path / "src"), str(tmp_path / "out")
    small_tree(src, 60, seed=2, size=(5 * KIB, 40 * KIB))
    manifest = backup(world, src)
    bundles = bundle_of(manifest)
    spanning = [c for _, c in small_items(manifest)
                if len(locate(c.offset, c.length, bundles(c.bundle).block_length)) == 2]
    assert spanning
    runs, splits, alone = plan_runs(small_items(manifest), bundle_of(manifest))
    assert len(splits) == len(spanning) and not alone
    summary, _, _, _, transfers = restore(world, out, manifest)
    assert summary["failed"] == 0
    assert compare_trees(src, os.path.join(out, "src")) == []
    assert summary["retrieves"] == len(runs)  # a split file's parts come with its runs
    assert transfers["small"].closed


def test_a_split_file_whose_other_run_failed_is_rebuilt(world, tmp_path):
    src, out = str(tmp_path / "src"), str(tmp_path / "out")
    small_tree(src, 60, seed=2, size=(5 * KIB, 40 * KIB))
    manifest = backup(world, src)
    runs, splits, _ = plan_runs(small_items(manifest), bundle_of(manifest))
    split = splits[0]
    down = next(r for r in runs if any(m[4] is split for m in r.members)
                and r.holder.index == split.blocks[1])
    world[2].nodes[bytes.fromhex(down.holder.node)].up = False
    summary, job, _, _, _ = restore(world, out, manifest)
    assert summary["failed"] == 0
    assert compare_trees(src, os.path.join(out, "src")) == []
    assert down.holder.key in [key for _, key, _ in job.bad_shares]
    assert not [why for _, _, why in job.bad_shares if "corrupt" in why]


def _primary_of_first_run(manifest):
    runs, _, _ = plan_runs(small_items(manifest), bundle_of(manifest))
    run = max(runs, key=lambda r: len(r.members))
    return run


def test_a_run_whose_node_is_down_falls_back_file_by_file(world, tmp_path):
    src, out = str(tmp_path / "src"), str(tmp_path / "out")
    small_tree(src, 300, seed=3)
    manifest = backup(world, src)
    run = _primary_of_first_run(manifest)
    assert len(run.members) > 10
    world[2].nodes[bytes.fromhex(run.holder.node)].up = False
    summary, job, _, _, _ = restore(world, out, manifest)
    assert summary["failed"] == 0 and summary["files"] == 300
    assert compare_trees(src, os.path.join(out, "src")) == []
    assert [key for _, key, _ in job.bad_shares].count(run.holder.key) == 1


def test_a_corrupt_share_inside_a_run_is_reported_and_repaired(world, tmp_path):
    src, out = str(tmp_path / "src"), str(tmp_path / "out")
    small_tree(src, 300, seed=4)
    manifest = backup(world, src)
    run = _primary_of_first_run(manifest)
    # the node flips the first byte of what it answers: the run's first file
    world[2].nodes[bytes.fromhex(run.holder.node)].corrupt.add(bytes.fromhex(run.holder.key))
    summary, job, _, _, _ = restore(world, out, manifest)
    assert summary["failed"] == 0
    assert compare_trees(src, os.path.join(out, "src")) == []
    assert [(key, "corrupt" in why) for _, key, why in job.bad_shares] == \
        [(run.holder.key, True)]


def test_memory_of_the_runs_is_reserved_and_bounded(world, tmp_path):
    src, out = str(tmp_path / "src"), str(tmp_path / "out")
    small_tree(src, 600, seed=5, size=(1 * KIB, 6 * KIB))
    manifest = backup(world, src)
    runs, _, _ = plan_runs(small_items(manifest), bundle_of(manifest))
    budget = 3 * max(r.length for r in runs)
    summary, _, _, monitor, transfers = restore(world, out, manifest, budget=budget)
    assert summary["failed"] == 0
    assert compare_trees(src, os.path.join(out, "src")) == []
    small = transfers["small"]
    assert small.closed and 0 < small.peak_bytes <= budget
    assert monitor.peak_buffered_bytes <= budget
    assert monitor.buffered_bytes == 0


def test_runs_are_capped_and_joined_across_small_gaps():
    class Holder:
        index, node, key = 0, "aa", "bb"

    bundle = Bundle(length=8 * RUN_CAP, k=1, n=2, block_length=8 * RUN_CAP, holders=(Holder,))
    # 100 files of 30 KiB side by side, then one past a 1 MiB gap
    items = [(i, SmallContent(1, "00", "b", i * 30 * KIB, 30 * KIB)) for i in range(100)]
    items.append((100, SmallContent(1, "00", "b", 5 * RUN_CAP, KIB)))
    runs, splits, alone = plan_runs(items, lambda _: bundle)
    assert not alone and not splits
    assert all(r.length <= RUN_CAP for r in runs)
    assert sum(len(r.members) for r in runs) == 101
    assert len(runs) == 4  # 3000 KiB in runs of at most 1 MiB, and the far one alone
    assert RUNS_IN_FLIGHT * RUN_CAP <= 16 * 1024 * KIB


def test_a_batch_is_synced_once_before_its_files_are_renamed(world, tmp_path):
    assert BATCH_FILES == 256
    src, out = str(tmp_path / "src"), str(tmp_path / "out")
    small_tree(src, 300, seed=6, empty=2)
    manifest = backup(world, src)
    summary, _, syncs, _, _ = restore(world, out, manifest)
    assert summary["failed"] == 0 and summary["files"] == 302
    assert compare_trees(src, os.path.join(out, "src")) == []
    assert syncs.calls == 2  # 256, and the 46 left at the end
    assert syncs.temps_seen == [256, 46]  # each batch all in temp files at its sync
    leftovers = [n for _, _, names in os.walk(out) for n in names if n.endswith(TEMP_SUFFIX)]
    assert leftovers == []


class _QueueReactor:
    """callFromThread queues; the test runs the calls on its own thread."""

    def __init__(self):
        self.calls = []
        self.lock = threading.Lock()

    def callFromThread(self, fn, *args):
        with self.lock:
            self.calls.append((fn, args))

    def run_calls(self):
        with self.lock:
            calls, self.calls = self.calls, []
        for fn, args in calls:
            fn(*args)


class _Entry:
    def __init__(self, rel, mode=0o644, mtime_ns=10 ** 18):
        self.rel, self.mode, self.mtime_ns = rel, mode, mtime_ns


class _Sink:
    def __init__(self):
        self.done, self.refused, self.failed = [], [], []

    def file_done(self, entry, size, beside):
        self.done.append(entry.rel)

    def file_refused(self, entry, why):
        self.refused.append(entry.rel)

    def file_failed(self, entry, err):
        self.failed.append(entry.rel)


def test_the_writer_threads_write_batches_and_refuse_what_is_not_the_file(tmp_path):
    reactor, sink, synced = _QueueReactor(), _Sink(), []
    dest = SafeDest(str(tmp_path / "out"))
    for i in range(40):
        dest.make_dir(f"d{i}")
    writer = FileWriter(reactor, dest, sink, sync=lambda fd: synced.append(fd),
                        threads=2, batch_files=64)
    os.symlink("/tmp", str(tmp_path / "out" / "d0" / "link"))
    answers = []
    items = [(_Entry(f"d{i % 40}/f{i}"), b"x%d" % i, None) for i in range(300)]
    items.append((_Entry("d1/refused"), b"bad", lambda data: None))
    items.append((_Entry("d0/link/escape"), b"no", None))
    for start in range(0, len(items), 30):
        writer.write(items[start:start + 30], answers.append)
    finished = []
    writer.finish().addCallback(finished.append)
    for _ in range(2000):
        reactor.run_calls()
        if finished:
            break
        threading.Event().wait(0.005)
    dest.close()
    assert finished and len(answers) == 11
    assert sorted(sink.done) == sorted(f"d{i % 40}/f{i}" for i in range(300))
    assert sink.refused == ["d0/link/escape"] and not sink.failed
    assert [entry.rel for a in answers for entry, _ in a] == ["d1/refused"]
    assert len(synced) == 5  # four batches of 64, and 44 at the end
    for i in range(300):
        with open(tmp_path / "out" / f"d{i % 40}" / f"f{i}", "rb") as f:
            assert f.read() == b"x%d" % i
    assert not os.path.exists("/tmp/escape")


def test_compressed_small_files_come_by_runs_too(world, tmp_path):
    src, out = str(tmp_path / "src"), str(tmp_path / "out")
    rng = random.Random(7)
    for i in range(200):
        folder = os.path.join(src, f"d{i % 4}")
        os.makedirs(folder, exist_ok=True)
        words = [rng.choice(["alpha", "beta", "gamma", "delta"]) for _ in range(rng.randint(50, 3000))]
        with open(os.path.join(folder, f"t{i}.txt"), "w") as f:
            f.write(" ".join(words))
    manifest = backup(world, src)
    items = small_items(manifest)
    assert sum(c.length < c.size for _, c in items) > 150  # most were stored compressed
    runs, _, alone = plan_runs(items, bundle_of(manifest))
    summary, _, _, _, _ = restore(world, out, manifest)
    assert summary["failed"] == 0 and summary["files"] == 200
    assert compare_trees(src, os.path.join(out, "src")) == []
    assert summary["retrieves"] == len(runs) and not alone
