"""Files that vanish, change while read or cannot be read: each is named in
the backup's summary and counted, the rest is backed up, and the command's
exit code says something was skipped (EXIT_SKIPPED, flud/cli/jobs.py)."""
import builtins
import os

import pytest

from flud.client.backup.backup_job import Backup
from flud.client.backup.preview import preview
from tests.unit.client.fakes import make_world, snapshot_manifest
from tests.unit.client.test_pipeline import run_backup

MIB = 1024 * 1024


@pytest.fixture
def world(tmp_path):
    return make_world(tmp_path, nodes=12)


def test_vanished_changed_and_unreadable_files_are_named_and_counted(world, tmp_path,
                                                                     monkeypatch):
    src = tmp_path / "src"
    src.mkdir()
    for name in ("keep.txt", "vanishes.txt", "grows.txt", "locked.txt"):
        (src / name).write_bytes(name.encode() * 100)
    (src / "grows-large.bin").write_bytes(os.urandom(3 * MIB))
    find_changes = Backup._find_changes

    def then_the_tree_moves(self, roots, excludes):
        find_changes(self, roots, excludes)   # the first walk saw every file as it was
        os.unlink(src / "vanishes.txt")
        with open(src / "grows.txt", "ab") as f:
            f.write(b"more")
        with open(src / "grows-large.bin", "ab") as f:
            f.write(b"more")

    real_open = builtins.open

    def refusing_open(path, *args, **kwargs):
        if str(path) == str(src / "locked.txt"):   # (root reads a mode-0 file anyway)
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(Backup, "_find_changes", then_the_tree_moves)
    monkeypatch.setattr(builtins, "open", refusing_open)
    summary, _, job = run_backup(world, [str(src)])
    monkeypatch.undo()
    skipped = dict(job.skipped)
    assert set(skipped) == {str(src / n) for n in ("vanishes.txt", "grows.txt", "locked.txt",
                                                   "grows-large.bin")}
    assert "No such file" in skipped[str(src / "vanishes.txt")]
    assert "changed while" in skipped[str(src / "grows.txt")]
    assert "changed while" in skipped[str(src / "grows-large.bin")]
    assert "Permission denied" in skipped[str(src / "locked.txt")]
    assert summary["skipped"] == 4
    names = {rel for rel, kind, *_ in snapshot_manifest(world, summary["snapshot"])["entries"]
             if kind == "file"}
    assert names == {"src/keep.txt"}
    # the next run (and its dry run) takes them up again
    home = world[1]
    totals = preview(home.index, [str(src)])
    assert (totals.new, totals.unchanged, totals.skipped) == (3, 1, 0)
    summary, _, _ = run_backup(world, [str(src)])
    assert (summary["new"], summary["unchanged"], summary["skipped"]) == (3, 1, 0)

