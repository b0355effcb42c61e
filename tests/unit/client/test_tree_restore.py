"""Restoring a version-2 snapshot's tree when part of it cannot be read:
the damaged directory is named and skipped, the rest is restored, and the
summary says something failed."""
import os

from flud.client.context import JobContext
from flud.client.progress import Progress
from flud.client.restore.run import Restore
from flud.client.restore.tree import TreeRestore
from flud.client.restore.writer import InlineBlockWriter
from flud.client.snapshots import find_snapshot
from flud.client.tree import DIRECTORY
from flud.client.treewalk import TreeReader
from flud.coding import SegmentCoder
from flud.memory import MemoryMonitor
from flud.workers import CPUPool
from tests.unit.client.fakes import make_world, run_until
from tests.unit.client.test_pipeline import run_backup
from tools.treecmp import compare_trees


def _tree(root):
    for folder in ("keep", "lose", "keep/deeper"):
        os.makedirs(os.path.join(root, folder), exist_ok=True)
        for i in range(3):
            with open(os.path.join(root, folder, f"f{i}.txt"), "wb") as f:
                f.write(f"{folder} {i}\n".encode() * (i + 1))


def _restore(world, dest, damage_dir=None):
    clock, home, network = world
    k, n = home.config["k"], home.config["n"]
    pool = CPUPool(clock, inline=True)
    monitor = MemoryMonitor(clock=clock.seconds, rss_reader=lambda: 0)
    ctx = JobContext(clock, home, network, pool, monitor, Progress("restore", quiet=True),
                     SegmentCoder(k, n), clock.seconds)
    found = run_until(clock, find_snapshot(ctx))
    repo = found.repo
    if damage_dir is not None:
        # the record of `damage_dir` comes back altered, as from a corrupt bundle
        reader = TreeReader(repo.fetch_sealed, repo.sealer)
        root = run_until(clock, reader.entries(found.record.tree))
        (top,) = [e for e in root if e.kind == DIRECTORY]
        target = next(e.ref for e in run_until(clock, reader.entries(top.ref))
                      if e.name == damage_dir)
        fetch = repo.fetch_sealed

        def altered(blob_id):
            d = fetch(blob_id)
            if blob_id == target:
                d.addCallback(lambda data: bytes([data[0] ^ 1]) + data[1:])
            return d
        repo.fetch_sealed = altered
    job = Restore(clock, home, network, pool, monitor, Progress("restore", quiet=True),
                  {"k": k, "n": n, "bundles": repo.bundles}, block_writer=InlineBlockWriter)
    try:
        return run_until(clock, TreeRestore(job, repo, found.record).run(dest)), job
    finally:
        found.close()


def test_a_tree_restores_identical(tmp_path):
    world = make_world(tmp_path, nodes=12)
    src = str(tmp_path / "src")
    _tree(src)
    run_backup(world, [src])
    summary, _ = _restore(world, str(tmp_path / "out"))
    assert summary["failed"] == 0 and summary["files"] == 9
    assert compare_trees(src, str(tmp_path / "out" / "src")) == []


def test_a_damaged_directory_record_is_named_and_the_rest_restored(tmp_path):
    world = make_world(tmp_path, nodes=12)
    src = str(tmp_path / "src")
    _tree(src)
    run_backup(world, [src])
    summary, job = _restore(world, str(tmp_path / "out"), damage_dir="lose")
    assert summary["failed"] == 1
    assert [rel for rel, _ in job.failed] == ["src/lose"]
    assert "cannot be read" in job.failed[0][1] and "does not match its address" in job.failed[0][1]
    out = tmp_path / "out" / "src"
    assert os.listdir(out / "lose") == []   # its entry was read (in its parent), its contents not
    assert compare_trees(os.path.join(src, "keep"), str(out / "keep")) == []
