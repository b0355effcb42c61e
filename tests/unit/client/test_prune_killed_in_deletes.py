"""A prune killed between its DELETEs and its final map write loses nothing
(issue 25: the lifecycle simulation's seed 50001, the window its fix left).

Repack moved a mostly-dead bundle's live small files to a bundle R and
wrote a map row per moved key. When those files go too, prune deletes R;
the rows into R left the map only with the map prune writes at its end. A
prune killed after its DELETEs and before that write left the rows naming
the half-deleted R: a backup that met the same bytes again stored them
anew (the index had forgotten them) and its record named its own bundle,
but restore and prune's reach followed the row to R. Prune now drops the
rows into what it deletes with a small page before its first DELETE.
"""
import os

import pytest

from flud.client.prune.prune_job import Prune
from flud.client.repository.reach import Reach
from flud.client.repository.snapshot_lookup import open_repository
from tests.unit.client.fakes import run_until, snapshot_manifest
from tests.unit.client.test_pipeline import run_backup, run_restore
from tests.unit.client.test_prune import ctx_of, prune, world, write  # noqa: F401 (fixture)
from tests.unit.client.test_repacked_rows import bundle_of, forget_all_but_newest, mostly_dead_bundle
from tools.treecmp import compare_trees


class Killed(Exception):
    """The prune process dies here."""


def test_a_prune_killed_after_its_deletes_leaves_no_row_into_what_it_deleted(
        world, tmp_path, monkeypatch):
    src = str(tmp_path / "src")
    files = mostly_dead_bundle(world, src, 9)
    assert prune(world, now=10.0, max_unused=50)["repacked_members"] >= 4
    survivor = os.path.join(src, "f39.bin")
    repacked = bundle_of(world, survivor)            # R: where the moved rows point
    for name in list(files)[36:]:                    # the moved files go too: R dies
        os.unlink(os.path.join(src, name))
    write(os.path.join(src, "other.txt"), b"something kept")
    run_backup(world, [src])
    forget_all_but_newest(world)
    prune(world, now=20.0)                           # marks R

    def killed(self, *args, **kwargs):
        raise Killed("prune killed after its DELETEs, before its map write")

    with monkeypatch.context() as patched:
        patched.setattr(Prune, "_write_map", killed)
        with pytest.raises(Killed):
            prune(world, now=30.0)                   # R's shares are deleted, the map is not
    write(survivor, files["f39.bin"])                # the same bytes come back
    run_backup(world, [src])
    out = str(tmp_path / "out")
    restored, job = run_restore(world, out, snapshot_manifest(world))
    assert restored["failed"] == 0, job.failed[:3]
    assert compare_trees(src, os.path.join(out, "src")) == []
    # prune's reach does not follow a row to R either: R is not live again
    ctx = ctx_of(world)
    _, repo = run_until(world[0], open_repository(ctx))
    try:
        kept = run_until(world[0], repo.snapshots())
        reached = run_until(world[0], Reach(repo, kept, ctx).run())
    finally:
        repo.close()
    assert repacked not in reached.bundles
    after = prune(world, now=40.0)
    assert after["cancelled"] == 0
    restored, job = run_restore(world, str(tmp_path / "again"), snapshot_manifest(world))
    assert restored["failed"] == 0, job.failed[:3]
