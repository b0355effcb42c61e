"""Restoring a version-2 snapshot's tree when part of it cannot be read:
the damaged directory is named and skipped, the rest is restored, and the
summary says something failed."""
import os

from flud.client.context import JobContext
from flud.client.progress import Progress
from flud.client.restore.restore_job import Restore
from flud.client.restore.tree_restore import TreeRestore
from flud.client.restore.block_writer import InlineBlockWriter
from flud.client.repository.snapshot_lookup import find_snapshot
from flud.client.repository.tree_records import DIRECTORY
from flud.client.repository.tree_walk import TreeReader
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


def _restore(world, dest, damage_dir=None, paths=()):
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
        fetch_many = repo.fetch_sealed_many

        def altered_many(blob_ids):   # records fetched ahead come this way
            found = fetch_many(blob_ids)
            if target in found:
                found[target].addCallback(lambda data: bytes([data[0] ^ 1]) + data[1:])
            return found
        repo.fetch_sealed_many = altered_many
    job = Restore(clock, home, network, pool, monitor, Progress("restore", quiet=True),
                  {"k": k, "n": n, "bundles": repo.bundles}, block_writer=InlineBlockWriter)
    try:
        return run_until(clock, TreeRestore(job, repo, found.record).run(dest, paths)), job
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


def test_each_path_that_matches_nothing_is_reported_and_the_rest_restored(tmp_path):
    """`restore a b` where b matches nothing: a is restored, b is named (the
    directory above b made it look matched, and the exit was 0)."""
    world = make_world(tmp_path, nodes=12)
    src = str(tmp_path / "src")
    _tree(src)
    run_backup(world, [src])
    summary, job = _restore(world, str(tmp_path / "out"),
                            paths=["src/keep", "src/nope", "src/lose/f9.txt"])
    assert job.unmatched == ["src/nope", "src/lose/f9.txt"]
    assert summary["unmatched"] == 2 and summary["failed"] == 0 and summary["files"] == 6
    assert compare_trees(os.path.join(src, "keep"), str(tmp_path / "out" / "src" / "keep")) == []
    assert os.listdir(tmp_path / "out" / "src" / "lose") == []  # only the way to f9.txt


def test_when_no_path_matches_nothing_is_restored(tmp_path):
    import pytest

    from flud.client.restore.restore_job import RestoreError

    world = make_world(tmp_path, nodes=12)
    src = str(tmp_path / "src")
    _tree(src)
    run_backup(world, [src])
    with pytest.raises(RestoreError, match="matches src/nope, src/keep/nada"):
        _restore(world, str(tmp_path / "out"), paths=["src/nope", "src/keep/nada"])
    assert not os.path.exists(tmp_path / "out" / "src")


def test_a_path_in_an_unreadable_directory_is_failed_not_unmatched(tmp_path):
    world = make_world(tmp_path, nodes=12)
    src = str(tmp_path / "src")
    _tree(src)
    run_backup(world, [src])
    summary, job = _restore(world, str(tmp_path / "out"), damage_dir="lose",
                            paths=["src/keep/f0.txt", "src/lose/f0.txt"])
    assert job.unmatched == [] and [rel for rel, _ in job.failed] == ["src/lose"]
    assert summary["files"] == 1


def test_a_directory_that_cannot_be_made_fails_alone(tmp_path, monkeypatch):
    world = make_world(tmp_path, nodes=12)
    src = str(tmp_path / "src")
    _tree(src)
    run_backup(world, [src])
    mkdir = os.mkdir

    def refusing(name, *args, **kwargs):
        if name == "lose":
            raise OSError(30, "Read-only file system", name)
        return mkdir(name, *args, **kwargs)
    monkeypatch.setattr(os, "mkdir", refusing)

    summary, job = _restore(world, str(tmp_path / "out"))

    assert sorted(rel for rel, _ in job.failed) == ["src/lose", "src/lose/f0.txt",
                                                     "src/lose/f1.txt", "src/lose/f2.txt"]
    assert summary["failed"] == 4 and summary["files"] == 6
    assert compare_trees(os.path.join(src, "keep"), str(tmp_path / "out" / "src" / "keep")) == []
