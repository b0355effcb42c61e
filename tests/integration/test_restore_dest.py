"""A restore never writes outside DEST, whatever symlinks DEST holds (issue 16,
item 6), with real node processes.

Two ways a directory of DEST can lead elsewhere: a symlink the user had
there before the restore, and flud's own snapshots (a directory `d` in one,
a symlink `d -> /outside` in the next, both restored into one DEST).
"""
import json
import os
import re
import shutil
import subprocess

import pytest

from tests.conftest import everything_under
from tests.integration.helpers import (compare_trees, flud, init_client, output,
                                       write_random)

pytestmark = pytest.mark.integration

MIB = 1024 * 1024
NODES = 6
K, N = 2, 4


@pytest.fixture(scope="module")
def net(module_testnet_factory):
    return module_testnet_factory(NODES, "restore-dest-net")


def make_tree(root, seed):
    """Small files and a large one (block by block) under `d`, more beside it."""
    write_random(os.path.join(root, "d", "big.bin"), 3 * MIB + 123, seed)
    write_random(os.path.join(root, "d", "small.txt"), 2000, seed + 1)
    write_random(os.path.join(root, "d", "deeper", "tiny.txt"), 10, seed + 2)
    write_random(os.path.join(root, "keep.txt"), 4000, seed + 3)
    write_random(os.path.join(root, "sub", "big2.bin"), 2 * MIB + 5, seed + 4)


def backup(home, *paths):
    proc = flud("backup", *paths, "--home", home)
    assert proc.returncode == 0, output(proc)
    return int(re.search(r"snapshot (\d+):", proc.stdout).group(1))


def refused_lines(proc) -> list:
    return re.findall(r"^  refused (\S+): (.*)$", proc.stdout, re.M)


def test_a_symlink_in_dest_is_never_followed(net, tmp_path, outside):
    tree, other = tmp_path / "src" / "tree", tmp_path / "src" / "other"
    make_tree(str(tree), 1)
    make_tree(str(other), 20)
    home = tmp_path / "home"
    init_client(home, net, None, "--k", K, "--n", N)
    backup(home, tree, other)
    dest = tmp_path / "dest"
    dest.mkdir()
    os.symlink(str(outside), dest / "tree")

    proc = flud("restore", "--home", home, "--to", dest)

    assert proc.returncode == 1, output(proc)
    assert everything_under(outside) == ["precious"], output(proc)
    assert compare_trees(other, dest / "other") == [], output(proc)
    refused = refused_lines(proc)
    assert refused and all(rel.split("/")[0] == "tree" and "symlink" in why
                           for rel, why in refused), output(proc)
    assert re.search(r"(\d+) refused", proc.stdout), output(proc)
    assert "warning: " in proc.stderr and "Traceback" not in proc.stderr, output(proc)


def test_a_directory_then_a_symlink_to_outside_in_two_snapshots(net, tmp_path, outside):
    src = tmp_path / "src" / "tree"
    make_tree(str(src), 40)
    kept = tmp_path / "kept"  # snapshot 1's files, as backed up
    shutil.copytree(src, kept)
    home = tmp_path / "home"
    init_client(home, net, None, "--k", K, "--n", N)
    first = backup(home, src)
    shutil.rmtree(src / "d")
    os.symlink(str(outside), src / "d")
    second = backup(home, src)
    assert second > first
    dest = tmp_path / "dest"

    proc = flud("restore", "--home", home, "--to", dest, "--snapshot", second)
    assert proc.returncode == 0, output(proc)
    assert os.readlink(dest / "tree" / "d") == str(outside)
    proc = flud("restore", "--home", home, "--to", dest, "--snapshot", first)

    assert proc.returncode == 1, output(proc)
    assert everything_under(outside) == ["precious"], output(proc)
    refused = dict(refused_lines(proc))
    assert {"tree/d", "tree/d/big.bin", "tree/d/small.txt"} <= set(refused), output(proc)
    assert all(rel == "tree/d" or rel.startswith("tree/d/") for rel in refused), output(proc)
    # the rest of snapshot 1, beside what snapshot 2 put there, byte for byte
    for rel in ("keep.txt", os.path.join("sub", "big2.bin")):
        with open(kept / rel, "rb") as f:
            assert (dest / "tree" / (rel + ".flud-restored")).read_bytes() == f.read()


# ---- honest exit codes (issue 25, finding 10) ----------------------------------------

def test_each_path_that_matches_nothing_is_named_and_the_exit_is_not_0(net, tmp_path):
    src = tmp_path / "src" / "tree"
    make_tree(str(src), 60)
    home = tmp_path / "home"
    init_client(home, net, None, "--k", K, "--n", N)
    backup(home, src)
    dest = tmp_path / "dest"
    gone = str(src / "sub" / "gone")

    proc = flud("restore", "--home", home, "--to", dest, "tree/keep.txt", "tree/nope", gone,
                "--json")

    assert proc.returncode == 1, output(proc)
    record = json.loads(proc.stdout.splitlines()[-1])   # the summary line
    assert record["exit"] == 1 and record["unmatched_paths"] == ["tree/nope", gone], record
    assert record["files"] == 1 and record["failed"] == 0, record
    with open(src / "keep.txt", "rb") as f:
        assert (dest / "tree" / "keep.txt").read_bytes() == f.read()
    assert "nothing in the snapshot matches tree/nope" in proc.stderr, output(proc)

    proc = flud("restore", "--home", home, "--to", tmp_path / "dest2", "tree/nope", "--json")
    assert proc.returncode == 2, output(proc)
    record = json.loads(proc.stdout.splitlines()[-1])   # the summary line
    assert "nothing in the snapshot matches tree/nope" in record["error"]["message"], record


def _immutable(path, on: bool) -> bool:
    proc = subprocess.run(["chattr", "+i" if on else "-i", str(path)], capture_output=True)
    return proc.returncode == 0


def test_a_directory_that_cannot_be_made_fails_its_subtree_and_the_rest_is_restored(
        net, tmp_path):
    """DEST/tree/d is immutable (as a read-only mount, or a directory of
    someone else's would be to its user): nothing can be made in it. Its
    part of the snapshot fails, by name; the rest is restored. (One mkdir
    error ended the whole restore with a traceback and exit 1.)"""
    src = tmp_path / "src" / "tree"
    make_tree(str(src), 70)
    home = tmp_path / "home"
    init_client(home, net, None, "--k", K, "--n", N)
    backup(home, src)
    dest = tmp_path / "dest"
    os.makedirs(dest / "tree" / "d")
    if not _immutable(dest / "tree" / "d", True):
        pytest.skip("chattr +i is not available here")
    try:
        proc = flud("restore", "--home", home, "--to", dest, "--json")
    finally:
        _immutable(dest / "tree" / "d", False)

    assert proc.returncode == 2, output(proc)
    assert "Traceback" not in proc.stderr, output(proc)
    record = json.loads(proc.stdout.splitlines()[-1])   # the summary line
    failed = {f["path"] for f in record["failed_paths"]}
    assert {"tree/d/deeper", "tree/d/deeper/tiny.txt", "tree/d/big.bin",
            "tree/d/small.txt"} <= failed, record
    assert all(path.startswith("tree/d") for path in failed), record
    assert os.listdir(dest / "tree" / "d") == []
    shutil.rmtree(src / "d")
    os.rmdir(dest / "tree" / "d")
    assert compare_trees(src, dest / "tree") == [], output(proc)
