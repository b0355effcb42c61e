"""A repacked file's map row never outlives its new bundle (found by the
lifecycle simulation, seed 50001 over 365 days).

Repack moves a mostly-dead bundle's live small files to a new bundle R and
writes a map row per moved key ("key K now lives in R"); a restore and
prune's reach follow that row before the range the tree record names. When
those files go too, prune deletes R. While R's delete is pending (a holder
was down) the map still listed R and its rows; a backup that then met the
same bytes again stored them anew in a bundle Y (the index had forgotten
K) and its record named Y, but the restore followed the row to the half
deleted R: the newest snapshot did not restore. Prune now writes the map
without the rows that point into what it deletes before its first DELETE.
"""
import datetime
import os
import random

from flud.client.prune import forget as forgetting
from flud.client.records import Bundle
from flud.client.prune.retention import Policy
from tests.unit.client.fakes import run_until, snapshot_manifest
from tests.unit.client.test_pipeline import run_backup, run_restore
from tests.unit.client.test_prune import ctx_of, prune, world, write  # noqa: F401 (fixture)
from tools.treecmp import compare_trees

UTC = datetime.timezone.utc


def forget_all_but_newest(world):
    run_until(world[0], forgetting.forget(ctx_of(world), Policy(last=1), False, UTC,
                                          say=lambda text: None))


def mostly_dead_bundle(world, src, seed):
    """Two backups of 40 small files, the second after 36 of them went (their
    bundle is 90% dead), then every snapshot but the newest forgotten: what
    a prune repacks. Returns {name: bytes} of the 40."""
    rng = random.Random(seed)
    files = {f"f{i:02}.bin": rng.randbytes(20000) for i in range(40)}
    for name, data in files.items():
        write(os.path.join(src, name), data)
    run_backup(world, [src])
    for name in list(files)[:36]:                   # 90% go: the bundle is mostly dead
        os.unlink(os.path.join(src, name))
    run_backup(world, [src])
    forget_all_but_newest(world)
    return files


def bundle_of(world, path):
    """The bundle the index says holds a small file's content."""
    index = world[1].index
    state = index.states_in(os.path.dirname(path))[path]
    return index.content(state.content_id)["b"]


def test_bytes_brought_back_after_their_repacked_bundle_died_restore(world, tmp_path):
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
    holder = Bundle.from_wire(world[1].index.bundle(repacked)).holders[0]
    down = world[2].nodes[bytes.fromhex(holder.node)]
    down.up = False                                  # one DELETE fails: R stays pending
    third = prune(world, now=30.0)
    down.up = True
    assert third["failed"] >= 1
    write(survivor, files["f39.bin"])                # the same bytes come back
    run_backup(world, [src])
    out = str(tmp_path / "out")
    restored, job = run_restore(world, out, snapshot_manifest(world))
    assert restored["failed"] == 0, job.failed[:3]
    assert compare_trees(src, os.path.join(out, "src")) == []


def test_the_same_bytes_in_two_live_rows_move_once(world, tmp_path):
    """Kept records can name one content in two places (stored again after
    the row that led to the first was dropped); repack moves it once, not
    twice into one bundle (which lost track of it: KeyError, seeds 50017
    and 70023 over a year)."""
    from flud.client.repository.reach import Reach
    from flud.client.prune.repack import repack
    from flud.client.repository.snapshot_lookup import open_repository

    src = str(tmp_path / "src")
    rng = random.Random(2)
    for i in range(6):
        write(os.path.join(src, f"f{i}.bin"), rng.randbytes(5000))
    run_backup(world, [src])
    ctx = ctx_of(world)
    _, repo = run_until(world[0], open_repository(ctx))
    try:
        kept = run_until(world[0], repo.snapshots())
        run_until(world[0], Reach(repo, kept, ctx).run())
        db = repo.cache.db
        row = db.execute("SELECT bundle, key, offset, length, kind, size FROM live_members "
                         "WHERE kind != 'blob' LIMIT 1").fetchone()
        db.execute("INSERT INTO live_members VALUES (?,?,?,?,?,?)", row[:5] + (row[5] + 1,))
        moved = run_until(world[0], repack(ctx, repo, [row[0]]))
    finally:
        repo.close()
    keys = [ref.blob_id for ref, _, _ in moved]
    assert row[1] in keys and len(keys) == len(set(keys))
