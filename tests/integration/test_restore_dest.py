"""A restore never writes outside DEST, whatever symlinks DEST holds (issue 16,
item 6), with real node processes.

Two ways a directory of DEST can lead elsewhere: a symlink the user had
there before the restore, and flud's own snapshots (a directory `d` in one,
a symlink `d -> /outside` in the next, both restored into one DEST).
"""
import os
import re
import shutil

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
