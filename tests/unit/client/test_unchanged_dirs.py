"""A directory whose listing, and every listing below it, is as the last
backup saw it keeps its record: a no-change backup reads one directory (the
root's listing is compared, its record kept) and seals nothing; a change
deep down rebuilds only the directories on its path."""
import os

from tests.unit.client.fakes import make_world, snapshot_manifest
from tests.unit.client.test_pipeline import run_backup, run_restore
from tools.treecmp import compare_trees


def _tree(root):
    for a in range(3):
        for b in range(3):
            folder = os.path.join(root, f"a{a}", f"b{b}")
            os.makedirs(folder)
            for i in range(3):
                with open(os.path.join(folder, f"f{i}.txt"), "w") as f:
                    f.write(f"{a} {b} {i}\n" * (i + 1))


def test_unchanged_subtrees_keep_their_records(tmp_path):
    world = make_world(tmp_path, nodes=12)
    src = str(tmp_path / "src")
    _tree(src)
    first, _, _ = run_backup(world, [src])
    assert first["dirs_read"] == 13 and first["dirs_kept"] == 0
    again, _, _ = run_backup(world, [src])
    assert again["dirs_read"] == 0 and again["dirs_kept"] == 1      # the root dir, whole
    assert again["tree_stored"] == 0          # even the snapshot's root record is the same blob
    assert again["files"] == first["files"] == 27
    with open(os.path.join(src, "a1", "b2", "f0.txt"), "a") as f:
        f.write("changed\n")
    changed, _, _ = run_backup(world, [src])
    # a1/b2, a1 and the root are read again; a0, a2 and a1's other two are kept
    assert changed["dirs_read"] == 3 and changed["dirs_kept"] == 4
    assert changed["files"] == 27
    restored, _ = run_restore(world, str(tmp_path / "out"), snapshot_manifest(world))
    assert restored["failed"] == 0
    assert compare_trees(src, str(tmp_path / "out" / "src")) == []
