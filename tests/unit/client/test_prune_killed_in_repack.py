"""A prune killed between its repack and its map write loses nothing (the
lifecycle simulation's seed 95003, all kinds, day 111 on d10fef6).

Repack stores a mostly dead bundle's live small files in a new bundle R.
It pointed this home's index (the files' contents) at R at once, before the
map that names R was published; killed before its map write, the prune
left the index naming a bundle no map holds. The next backup took those
files as unchanged and its directory records named their ranges in R: its
snapshot restored with "KeyError: <R>" (the bundle is not in the map). The
index now follows the move only once the map naming R is published."""
import os

import pytest

from flud.client.prune.prune_job import Prune
from tests.unit.client.fakes import snapshot_manifest
from tests.unit.client.test_pipeline import run_backup, run_restore
from tests.unit.client.test_prune import prune, world, write  # noqa: F401 (fixture)
from tests.unit.client.test_repacked_rows import mostly_dead_bundle
from tools.treecmp import compare_trees


class Killed(Exception):
    """The prune process dies here."""


def test_a_prune_killed_after_its_repack_leaves_the_index_on_the_mapped_ranges(
        world, tmp_path, monkeypatch):
    src = str(tmp_path / "src")
    mostly_dead_bundle(world, src, 11)

    def killed(self, *args, **kwargs):
        raise Killed("prune killed after its repack, before its map write")

    with monkeypatch.context() as patched:
        patched.setattr(Prune, "_write_map", killed)
        with pytest.raises(Killed):
            prune(world, now=10.0, max_unused=50)    # repacks: R stored, not mapped
    write(os.path.join(src, "new.txt"), b"a later backup")
    summary, _, _ = run_backup(world, [src])         # the survivors are unchanged
    out = str(tmp_path / "out")
    restored, job = run_restore(world, out, snapshot_manifest(world, summary["snapshot"]))
    assert restored["failed"] == 0, job.failed[:3]
    assert compare_trees(src, os.path.join(out, "src")) == []
    # a prune that completes repacks and maps it; the next backup still restores
    assert prune(world, now=20.0, max_unused=50)["repacked_members"] >= 4
    write(os.path.join(src, "later.txt"), b"after the repack")
    summary, _, _ = run_backup(world, [src])
    restored, job = run_restore(world, str(tmp_path / "again"),
                                snapshot_manifest(world, summary["snapshot"]))
    assert restored["failed"] == 0, job.failed[:3]
    assert compare_trees(src, os.path.join(str(tmp_path / "again"), "src")) == []
