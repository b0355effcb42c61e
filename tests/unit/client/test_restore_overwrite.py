"""`flud restore --overwrite` (issue 28, item 3) on the in-memory network:
what is in place decides what is fetched, and nothing is left beside.

if-changed checks a file in place against the content the snapshot recorded
(its keyed hash; a large file segment by segment), never by size and mtime
alone, and uses what a killed run left in its fixed temp names."""
import os
import random

import pytest

from flud.client.context import JobContext
from flud.client.progress import Progress
from flud.client.restore.overwrite import resume_temp
from flud.client.restore.restore_job import Restore
from flud.client.restore.tree_restore import TreeRestore
from flud.client.restore.block_writer import InlineBlockWriter
from flud.client.repository.snapshot_lookup import find_snapshot
from flud.coding import SegmentCoder
from flud.memory import MemoryMonitor
from flud.workers import CPUPool
from tests.unit.client.fakes import make_world, run_until
from tests.unit.client.test_pipeline import run_backup
from tools.treecmp import compare_trees

MIB = 1024 * 1024
SEGMENT = 2 * MIB   # the home's segment size


def _tree(root, seed=1):
    rng = random.Random(seed)
    for folder in ("a", "b/c"):
        os.makedirs(os.path.join(root, folder), exist_ok=True)
        for i in range(6):
            with open(os.path.join(root, folder, f"f{i}.txt"), "wb") as f:
                f.write(rng.randbytes(500 + 300 * i))
    with open(os.path.join(root, "a", "big.bin"), "wb") as f:
        f.write(rng.randbytes(5 * MIB + 1234))   # three segments, the last short
    open(os.path.join(root, "b", "empty"), "wb").close()
    os.symlink("a/f1.txt", os.path.join(root, "link"))


@pytest.fixture
def world(tmp_path):
    world = make_world(tmp_path, nodes=8)
    src = str(tmp_path / "src")
    _tree(src)
    run_backup(world, [src])
    return world, src


def _restore(world, dest, overwrite="never", paths=(), **selection):
    clock, home, network = world
    k, n = home.config["k"], home.config["n"]
    pool = CPUPool(clock, inline=True)
    monitor = MemoryMonitor(clock=clock.seconds, rss_reader=lambda: 0)
    ctx = JobContext(clock, home, network, pool, monitor, Progress("restore", quiet=True),
                     SegmentCoder(k, n), clock.seconds)
    found = run_until(clock, find_snapshot(ctx))
    job = Restore(clock, home, network, pool, monitor, Progress("restore", quiet=True),
                  {"k": k, "n": n, "bundles": found.repo.bundles},
                  block_writer=InlineBlockWriter, overwrite=overwrite)
    try:
        tree = TreeRestore(job, found.repo, found.record, **selection)
        return run_until(clock, tree.run(dest, paths)), job
    finally:
        found.close()


def _leftovers(root) -> list:
    return sorted(os.path.relpath(os.path.join(d, name), root)
                  for d, _, names in os.walk(root) for name in names
                  if name.endswith((".flud-restored", ".flud-part")))


def test_a_second_if_changed_restore_fetches_nothing_and_leaves_nothing_beside(world,
                                                                               tmp_path):
    world, src = world
    out = str(tmp_path / "out")
    first, _ = _restore(world, out)
    assert first["failed"] == 0 and first["fetched_bytes"] > 5 * MIB
    second, _ = _restore(world, out, "if-changed")
    assert second["fetched_bytes"] == 0 and second["retrieves"] == 0
    assert second["unchanged"] == 15 and second["files"] == 0 and second["beside"] == 0
    assert compare_trees(src, os.path.join(out, "src")) == []
    assert _leftovers(out) == []


def test_never_restores_beside_and_always_fetches_and_replaces_everything(world, tmp_path):
    world, src = world
    out = str(tmp_path / "out")
    _restore(world, out)
    never, _ = _restore(world, out)
    assert never["beside"] == 15   # 14 files and the symlink
    assert os.path.exists(os.path.join(out, "src", "a", "big.bin.flud-restored"))
    out2 = str(tmp_path / "out2")
    first, _ = _restore(world, out2)
    again, _ = _restore(world, out2, "always")
    assert again["replaced"] == 14 and again["beside"] == 0
    assert again["fetched_bytes"] >= first["fetched_bytes"] * 0.9
    assert compare_trees(src, os.path.join(out2, "src")) == [] and _leftovers(out2) == []


def test_if_changed_fetches_only_the_segment_that_differs(world, tmp_path):
    world, src = world
    out = str(tmp_path / "out")
    _restore(world, out)
    big = os.path.join(out, "src", "a", "big.bin")
    with open(big, "r+b") as f:   # one byte of the middle segment, same size
        f.seek(SEGMENT + 77)
        byte = f.read(1)
        f.seek(SEGMENT + 77)
        f.write(bytes([byte[0] ^ 0xFF]))
    stat = os.stat(os.path.join(src, "a", "big.bin"))
    os.utime(big, ns=(stat.st_mtime_ns, stat.st_mtime_ns))   # size and mtime say "same"
    second, _ = _restore(world, out, "if-changed")
    assert second["replaced"] == 1 and second["resumed"] == 1
    assert second["reused_bytes"] == 5 * MIB + 1234 - SEGMENT
    assert 0 < second["fetched_bytes"] <= SEGMENT * 1.05
    assert compare_trees(src, os.path.join(out, "src")) == [] and _leftovers(out) == []


def test_if_changed_replaces_a_small_file_with_the_same_size_and_mtime(world, tmp_path):
    world, src = world
    out = str(tmp_path / "out")
    _restore(world, out)
    path = os.path.join(out, "src", "b", "c", "f3.txt")
    stat = os.stat(path)
    with open(path, "r+b") as f:
        f.write(b"X")
    os.utime(path, ns=(stat.st_mtime_ns, stat.st_mtime_ns))
    second, _ = _restore(world, out, "if-changed")
    assert second["replaced"] == 1 and second["unchanged"] == 14
    assert compare_trees(src, os.path.join(out, "src")) == []


def test_if_changed_resumes_from_what_a_killed_run_left(world, tmp_path):
    """As a run killed midway leaves it: some files in place, a small file
    whole in its temp (written, not yet renamed), the large file's temp with
    its first segment only, other files missing."""
    world, src = world
    out = str(tmp_path / "out")
    first, _ = _restore(world, out)
    a = os.path.join(out, "src", "a")
    ids = _content_ids(world, ["src/a/big.bin", "src/a/f2.txt"])
    big_temp = os.path.join(a, resume_temp("big.bin", ids["src/a/big.bin"]))
    os.rename(os.path.join(a, "big.bin"), big_temp)
    with open(big_temp, "r+b") as f:   # the second segment half written, the third not
        f.truncate(SEGMENT + SEGMENT // 2)
    os.rename(os.path.join(a, "f2.txt"), os.path.join(a, resume_temp("f2.txt",
                                                                     ids["src/a/f2.txt"])))
    for name in ("f4.txt", "f5.txt"):
        os.unlink(os.path.join(out, "src", "b", "c", name))
    second, _ = _restore(world, out, "if-changed")
    assert second["failed"] == 0 and second["beside"] == 0
    assert second["resumed"] == 2 and second["unchanged"] == 11 and second["files"] == 4
    # what was missing: two small files and 3 MiB of the large one
    missing = 5 * MIB + 1234 - SEGMENT + 500 + 300 * 4 + 500 + 300 * 5
    assert second["fetched_bytes"] <= missing * 1.1 + 64 * 1024
    assert second["fetched_bytes"] < first["fetched_bytes"] * 0.7
    assert compare_trees(src, os.path.join(out, "src")) == [] and _leftovers(out) == []


def _content_ids(world, paths) -> dict:
    """The content id of each path, as the restore names its temp after."""
    from flud.client.restore.tree_restore import TreeContents
    from flud.client.repository.tree_walk import TreeReader
    clock, home, network = world
    k, n = home.config["k"], home.config["n"]
    ctx = JobContext(clock, home, network, CPUPool(clock, inline=True),
                     MemoryMonitor(clock=clock.seconds, rss_reader=lambda: 0),
                     Progress("read", quiet=True), SegmentCoder(k, n), clock.seconds)
    found = run_until(clock, find_snapshot(ctx))
    ids, contents = {}, TreeContents(found.repo)

    def visit(path, dir_entry):
        if path in paths:
            return contents.entry(path, dir_entry).addCallback(
                lambda made: ids.__setitem__(path, made[0].last))
    try:
        run_until(clock, TreeReader(found.repo.fetch_sealed, found.repo.sealer).walk(
            found.record.tree, visit, lambda damaged: None))
    finally:
        found.close()
    return ids


def test_if_newer_keeps_a_newer_file_and_replaces_an_older_one(world, tmp_path):
    world, src = world
    out = str(tmp_path / "out")
    _restore(world, out)
    newer = os.path.join(out, "src", "a", "f0.txt")
    older = os.path.join(out, "src", "a", "f1.txt")
    for path, data in ((newer, b"mine, edited later"), (older, b"stale")):
        with open(path, "wb") as f:
            f.write(data)
    mtime = os.stat(os.path.join(src, "a", "f0.txt")).st_mtime_ns
    os.utime(newer, ns=(mtime + 10**9, mtime + 10**9))
    os.utime(older, ns=(mtime - 10**9, mtime - 10**9))
    second, _ = _restore(world, out, "if-newer")
    assert second["replaced"] == 1 and second["unchanged"] == 14   # 13 files, the link
    with open(newer, "rb") as f:
        assert f.read() == b"mine, edited later"
    with open(older, "rb") as f, open(os.path.join(src, "a", "f1.txt"), "rb") as g:
        assert f.read() == g.read()


def test_a_directory_in_a_files_place_fails_that_file_alone(world, tmp_path):
    world, src = world
    out = str(tmp_path / "out")
    os.makedirs(os.path.join(out, "src", "a", "f0.txt", "inside"))
    summary, job = _restore(world, out, "always")
    assert summary["failed"] == 1 and job.failed[0][0] == "src/a/f0.txt"
    assert "directory" in job.failed[0][1]
    assert os.path.isdir(os.path.join(out, "src", "a", "f0.txt", "inside"))
    assert summary["files"] == 13
