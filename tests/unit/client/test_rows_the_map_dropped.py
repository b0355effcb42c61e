"""A record the map no longer locates is not deduplicated against (the
lifecycle simulation, seed 50020 over a year on 939ecc6).

This home's index and the holder map can name one record in two bundles:
home A stored a directory's record in bundle X; B took over and, its index
not knowing it, stored the same record again in Y, so the map's newest row
says Y; A took over again and its index still said X. When no kept
snapshot reached Y any more, prune deleted it and dropped the map's rows
into it, but A's index kept its row into X (which lived on for other
files). A's next backup met the same directory, found the record in its
index and named it without a map row: the snapshot did not restore
("record ... is not in the holder map"). Prune now makes this home's index
forget every record whose map row it drops, before its first DELETE.
"""
import os
import random

from flud.client.repository.snapshot_lookup import open_repository
from flud.client.repository.tree_records import BlobRef
from tests.unit.client.fakes import run_until, snapshot_manifest
from tests.unit.client.test_head_chain import _second_home
from tests.unit.client.test_pipeline import run_backup, run_restore
from tests.unit.client.test_prune import ctx_of, prune, world, write  # noqa: F401 (fixture)
from tests.unit.client.test_repacked_rows import forget_all_but_newest
from tools.treecmp import compare_trees


def _map_rows(world) -> dict:
    """{blob id: BlobRef} of the records the holder map locates."""
    _, repo = run_until(world[0], open_repository(ctx_of(world), reading=True))
    try:
        return {ref.blob_id: ref for ref in repo.cache.blob_rows()}
    finally:
        repo.close()


def _unlocated_records(world) -> list:
    """Directory records the newest snapshot names that the map does not
    locate (what a restore from the key alone cannot fetch)."""
    from flud.client.repository.tree_records import DIRECTORY, DirectoryRecord
    _, repo = run_until(world[0], open_repository(ctx_of(world), reading=True))
    try:
        _, record = run_until(world[0], repo.snapshots())[-1]
        missing, level = [], [record.tree]
        while level:
            below = []
            for blob_id in level:
                if repo.cache.blob(blob_id) is None and blob_id != repo.root.snapshot.blob_id:
                    missing.append(blob_id)
                    continue
                directory = DirectoryRecord.decode(run_until(world[0], repo.open_blob(blob_id)))
                below += [e.ref for e in directory.entries if e.kind == DIRECTORY]
            level = below
        return missing
    finally:
        repo.close()


def _add_empty(src):
    os.makedirs(os.path.join(src, "empty"))     # its record: the same bytes every time


def test_a_record_whose_map_row_prune_dropped_is_stored_again(world, tmp_path):
    src = str(tmp_path / "src")
    write(os.path.join(src, "keep.bin"), random.Random(1).randbytes(24000))
    run_backup(world, [src])                        # X: keep.bin and the first records
    keep_bundle = next(iter(_map_rows(world).values())).bundle
    before = _map_rows(world)
    _add_empty(src)
    run_backup(world, [src])                        # Y: the empty dir's record (and its parent's)
    new = [ref for blob_id, ref in _map_rows(world).items() if blob_id not in before]
    assert new and all(ref.bundle != keep_bundle for ref in new)
    # This home's index names those records in X, the map in Y: what a home
    # that adopted back after another home stored them again holds
    world[1].index.add_blobs([BlobRef(ref.blob_id, keep_bundle, 0, ref.length) for ref in new])
    os.rmdir(os.path.join(src, "empty"))
    run_backup(world, [src])
    forget_all_but_newest(world)                    # nothing kept reaches Y; keep.bin keeps X
    prune(world, now=10.0, max_unused=100)
    prune(world, now=20.0, max_unused=100)          # Y deleted, the map's rows into it dropped
    assert not any(ref.blob_id in _map_rows(world) for ref in new)
    _add_empty(src)                                 # the same records once more
    run_backup(world, [src])
    assert _unlocated_records(world) == []
    out = str(tmp_path / "out")
    fresh = _second_home(world, tmp_path, "home-fresh")     # from the key alone
    restored, job = run_restore(fresh, out, snapshot_manifest(fresh))
    assert restored["failed"] == 0, job.failed[:3]
    assert compare_trees(src, os.path.join(out, "src")) == []
