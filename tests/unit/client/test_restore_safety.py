"""Restore over an in-memory network: nothing lands outside DEST, and only a
share that is really bad is named."""
import os
import random
import shutil

import pytest

from flud.client.backup.backup_job import Backup
from flud.client.progress import Progress
from flud.client.restore.restore_job import Restore
from flud.client.restore.block_writer import InlineBlockWriter
from flud.coding import locate
from flud.memory import MemoryMonitor
from flud.workers import CPUPool
from tests.conftest import everything_under
from tests.unit.client.fakes import make_world, run_until, snapshot_manifest
from tools.treecmp import compare_trees

MIB = 1024 * 1024


@pytest.fixture
def world(tmp_path):
    return make_world(tmp_path, nodes=10)


def backup(world, paths):
    clock, home, network = world
    monitor = MemoryMonitor(clock=clock.seconds, rss_reader=lambda: 0)
    job = Backup(clock, home, network, CPUPool(clock, inline=True), monitor,
                 Progress("backup", quiet=True), clock=clock.seconds)
    summary = run_until(clock, job.run(paths))
    return snapshot_manifest(world, summary["snapshot"])


def restore(world, dest, manifest, paths=()):
    clock, home, network = world
    monitor = MemoryMonitor(clock=clock.seconds, rss_reader=lambda: 0)
    job = Restore(clock, home, network, CPUPool(clock, inline=True), monitor,
                  Progress("restore", quiet=True), manifest,
                  block_writer=InlineBlockWriter)
    return run_until(clock, job.run(str(dest), paths)), job


def write(path, size, seed):
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    with open(path, "wb") as f:
        f.write(random.Random(seed).randbytes(size))


def make_tree(root, seed):
    """A large file (block by block, PositionalWriter) and small ones, in a
    subdirectory `d` and beside it."""
    write(os.path.join(root, "d", "big.bin"), 2 * MIB + 4097, seed)
    write(os.path.join(root, "d", "small.txt"), 3000, seed + 1)
    write(os.path.join(root, "d", "deeper", "s2.txt"), 100, seed + 2)
    write(os.path.join(root, "keep.txt"), 5000, seed + 3)
    write(os.path.join(root, "sub", "big2.bin"), MIB + 77, seed + 4)


def test_a_symlinked_directory_in_dest_is_refused_and_the_rest_restored(world, tmp_path,
                                                                        outside):
    tree, other = tmp_path / "src" / "tree", tmp_path / "src" / "other"
    make_tree(str(tree), 1)
    make_tree(str(other), 10)
    manifest = backup(world, [str(tree), str(other)])
    dest = tmp_path / "dest"
    dest.mkdir()
    os.symlink(str(outside), dest / "tree")

    summary, job = restore(world, dest, manifest)

    assert everything_under(outside) == ["precious"]
    assert compare_trees(str(other), str(dest / "other")) == []
    under_tree = [e[0] for e in manifest["entries"] if e[0].split("/")[0] == "tree"]
    assert summary["refused"] == len(under_tree) and summary["failed"] == 0
    assert sorted(rel for rel, _ in job.refused) == sorted(under_tree)
    assert all("symlink" in why for _, why in job.refused)


def test_two_snapshots_a_dir_then_a_symlink_to_outside_restored_into_one_dest(
        world, tmp_path, outside):
    src = tmp_path / "src" / "tree"
    make_tree(str(src), 2)
    first = backup(world, [str(src)])
    shutil.rmtree(src / "d")
    os.symlink(str(outside), src / "d")
    second = backup(world, [str(src)])
    dest = tmp_path / "dest"

    summary2, _ = restore(world, dest, second)
    assert summary2["refused"] == 0 and os.readlink(dest / "tree" / "d") == str(outside)
    summary1, job = restore(world, dest, first)

    assert everything_under(outside) == ["precious"]
    refused = sorted(rel for rel, _ in job.refused)
    assert refused == sorted(e[0] for e in first["entries"] if e[0].startswith("tree/d"))
    assert summary1["refused"] == len(refused) and summary1["failed"] == 0
    # the rest of snapshot 1 is there, beside what snapshot 2 restored
    for rel in ("keep.txt", "sub/big2.bin"):
        with open(src / rel, "rb") as f:
            assert (dest / "tree" / (rel + ".flud-restored")).read_bytes() == f.read()


def test_names_with_dot_dot_in_a_manifest_are_refused_and_the_rest_restored(
        world, tmp_path, outside):
    src = tmp_path / "src" / "tree"
    make_tree(str(src), 3)
    manifest = backup(world, [str(src)])
    small = next(e for e in manifest["entries"] if e[0] == "tree/keep.txt")
    big = next(e for e in manifest["entries"] if e[0] == "tree/d/big.bin")
    bad = ["tree/../../outside/evil", "../escape", "tree/d/../../../x"]
    manifest = dict(manifest, entries=manifest["entries"] + [
        [bad[0], "file", 0o644, small[3], small[4], small[5]],
        [bad[1], "dir", 0o755, small[3], 0, None],
        [bad[2], "file", 0o644, big[3], big[4], big[5]]])
    dest = tmp_path / "dest"

    summary, job = restore(world, dest, manifest)

    assert everything_under(outside) == ["precious"]
    assert sorted(os.listdir(tmp_path)) == sorted(["dest", "home", "outside", "src"])
    assert sorted(rel for rel, _ in job.refused) == sorted(bad)
    assert summary["refused"] == 3 and summary["failed"] == 0
    assert compare_trees(str(src), str(dest / "tree")) == []


def test_an_existing_file_and_symlink_are_restored_beside_never_through(world, tmp_path,
                                                                        outside):
    src = tmp_path / "src" / "tree"
    make_tree(str(src), 4)
    manifest = backup(world, [str(src)])
    dest = tmp_path / "dest" / "tree"
    os.makedirs(dest / "d")
    os.symlink(str(outside / "precious"), dest / "keep.txt")
    os.symlink(str(outside / "new"), dest / "d" / "big.bin")  # dangling

    summary, _ = restore(world, tmp_path / "dest", manifest)

    assert everything_under(outside) == ["precious"]
    assert (outside / "precious").read_bytes() == b"not yours"
    assert summary["beside"] == 2 and summary["refused"] == 0
    with open(src / "keep.txt", "rb") as f:
        assert (dest / "keep.txt.flud-restored").read_bytes() == f.read()
    with open(src / "d" / "big.bin", "rb") as f:
        assert (dest / "d" / "big.bin.flud-restored").read_bytes() == f.read()


# ---- a small file whose two parts fail the content check -----------------------------

def straddling_file(manifest):
    """(entry, bundle, pieces) of a small file that spans two blocks."""
    for entry in manifest["entries"]:
        record = manifest["contents"].get(entry[5]) if entry[1] == "file" else None
        if record and record["t"] == "S":
            bundle = manifest["bundles"][record["b"]]
            pieces = locate(record["o"], record["l"], bundle["bl"])
            if len(pieces) == 2:
                return entry, bundle, pieces
    raise AssertionError("no small file spans two blocks")


def test_only_the_corrupt_part_of_a_two_block_small_file_is_blamed(world, tmp_path):
    src = tmp_path / "src" / "tree"
    rng = random.Random(5)
    for i in range(40):
        write(src / f"s{i}.bin", rng.randint(20_000, 60_000), 100 + i)
    manifest = backup(world, [str(src)])
    entry, bundle, pieces = straddling_file(manifest)
    holders = {s[0]: s for s in bundle["shares"]}
    for which in (0, 1):
        clock, home, network = world
        bad = holders[pieces[which][0]]
        good = holders[pieces[1 - which][0]]
        for node in network.nodes.values():
            node.corrupt.clear()
        network.nodes[bytes.fromhex(bad[2])].corrupt.add(bytes.fromhex(bad[1]))
        dest = tmp_path / f"dest{which}"

        summary, job = restore(world, dest, manifest, [entry[0]])

        assert summary["failed"] == 0 and summary["files"] == 1
        with open(tmp_path / "src" / entry[0], "rb") as f:
            assert (dest / entry[0]).read_bytes() == f.read()
        named = [key for _, key, _ in job.bad_shares]
        assert named == [bad[1]], job.bad_shares
        assert good[1] not in named


def test_a_dest_that_is_a_file_is_a_clear_error(world, tmp_path):
    from flud.client.restore.restore_job import RestoreError

    src = tmp_path / "src" / "tree"
    write(src / "a.txt", 10, 1)
    manifest = backup(world, [str(src)])
    (tmp_path / "dest").write_bytes(b"a file")
    with pytest.raises(RestoreError, match="cannot restore into"):
        restore(world, tmp_path / "dest", manifest)


# ---- honest outcomes: a failing subtree, a PATH that matches nothing, a name that appears ----

def restore_with(world, dest, manifest, paths=(), **options):
    clock, home, network = world
    monitor = MemoryMonitor(clock=clock.seconds, rss_reader=lambda: 0)
    job = Restore(clock, home, network, CPUPool(clock, inline=True), monitor,
                  Progress("restore", quiet=True), manifest,
                  block_writer=InlineBlockWriter, **options)
    return run_until(clock, job.run(str(dest), paths)), job


def test_a_directory_that_cannot_be_made_fails_its_subtree_alone(world, tmp_path, monkeypatch):
    """mkdir fails (EACCES, EROFS, ENOSPC...) for one directory: it and what
    it holds are named as failed, the rest is restored (one mkdir error
    ended the whole restore with a traceback)."""
    src = tmp_path / "src" / "tree"
    make_tree(str(src), 7)
    manifest = backup(world, [str(src)])
    mkdir = os.mkdir

    def refusing(name, *args, **kwargs):
        if name == "d":
            raise PermissionError(13, "Permission denied", name)
        return mkdir(name, *args, **kwargs)
    monkeypatch.setattr(os, "mkdir", refusing)

    summary, job = restore(world, tmp_path / "dest", manifest)

    failed = dict(job.failed)
    assert {"tree/d", "tree/d/big.bin", "tree/d/small.txt", "tree/d/deeper",
            "tree/d/deeper/s2.txt"} == set(failed), job.failed
    assert "Permission denied" in failed["tree/d"]
    assert "tree/d could not be made" in failed["tree/d/deeper/s2.txt"]
    assert summary["failed"] == 5 and summary["files"] == 2
    shutil.rmtree(src / "d")
    assert compare_trees(str(src), str(tmp_path / "dest" / "tree")) == []


def test_each_path_that_matches_nothing_is_reported(world, tmp_path):
    src = tmp_path / "src" / "tree"
    make_tree(str(src), 8)
    manifest = backup(world, [str(src)])

    summary, job = restore(world, tmp_path / "dest", manifest,
                           ["tree/keep.txt", "tree/nope", str(src / "sub" / "gone")])

    assert job.unmatched == ["tree/nope", str(src / "sub" / "gone")]
    assert summary["unmatched"] == 2 and summary["files"] == 1
    with open(src / "keep.txt", "rb") as f:
        assert (tmp_path / "dest" / "tree" / "keep.txt").read_bytes() == f.read()


def test_when_no_path_matches_nothing_is_restored_and_each_is_named(world, tmp_path):
    from flud.client.restore.restore_job import RestoreError

    src = tmp_path / "src" / "tree"
    make_tree(str(src), 9)
    manifest = backup(world, [str(src)])
    with pytest.raises(RestoreError, match="tree/nope, tree/nada"):
        restore(world, tmp_path / "dest", manifest, ["tree/nope", "tree/nada"])


def test_a_small_file_that_appears_before_the_rename_is_never_replaced(world, tmp_path):
    """The name was free when the file was written to its temp name, and is
    taken when its batch is renamed into place (another program, a second
    restore): the restored file goes beside it (the rename replaced it)."""
    src = tmp_path / "src" / "tree"
    make_tree(str(src), 10)
    manifest = backup(world, [str(src)])
    dest = tmp_path / "dest"
    appeared = dest / "tree" / "keep.txt"

    def sync_and_race(fd):
        if not os.path.lexists(appeared):
            appeared.write_bytes(b"theirs")

    summary, _ = restore_with(world, dest, manifest, ["tree/keep.txt"], sync=sync_and_race)

    assert appeared.read_bytes() == b"theirs"
    with open(src / "keep.txt", "rb") as f:
        assert (dest / "tree" / "keep.txt.flud-restored").read_bytes() == f.read()
    assert summary["beside"] == 1 and summary["failed"] == 0


def test_a_large_file_that_appears_while_it_downloads_is_never_replaced(world, tmp_path,
                                                                        monkeypatch):
    from flud.client.restore import restore_job as run_module
    src = tmp_path / "src" / "tree"
    make_tree(str(src), 11)
    manifest = backup(world, [str(src)])
    dest = tmp_path / "dest"
    appeared = dest / "tree" / "d" / "big.bin"
    set_meta = run_module.set_meta

    def race(fd, entry):   # the last step before the rename into place
        appeared.write_bytes(b"theirs")
        set_meta(fd, entry)
    monkeypatch.setattr(run_module, "set_meta", race)

    summary, _ = restore(world, dest, manifest, ["tree/d/big.bin"])

    assert appeared.read_bytes() == b"theirs"
    with open(src / "d" / "big.bin", "rb") as f:
        assert (dest / "tree" / "d" / "big.bin.flud-restored").read_bytes() == f.read()
    assert summary["beside"] == 1 and summary["failed"] == 0 and summary["files"] == 1
