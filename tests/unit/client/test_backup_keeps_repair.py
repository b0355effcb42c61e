"""A backup never moves the holder map back: a large file that changed in
part reuses its unchanged extents, and writes no map row for them, so the
holders repair moved them to stay the newest."""
import os
import random

from flud.client.backup import large_files as large_module
from flud.client.repository.snapshot_lookup import open_repository
from tests.unit.client.fakes import make_world, run_until
from flud.client.repair.repository_check import Check
from tests.unit.client.test_check_run import ctx_of
from tests.unit.client.test_pipeline import MIB, run_backup, run_restore
from tests.unit.client.fakes import snapshot_manifest
from tools.treecmp import compare_trees


def _map_extents(world) -> dict:
    """extent id -> set of holder nodes (hex), as the published map says."""
    _, repo = run_until(world[0], open_repository(ctx_of(world)))
    try:
        return {xid: {row[2] for row in holders} for xid, holders in repo.cache.extent_rows()}
    finally:
        repo.close()


def test_a_backup_of_an_appended_file_keeps_the_repaired_holders(tmp_path, monkeypatch):
    # one segment an extent, so a 5 MiB file is three extents and an append
    # changes only the last
    monkeypatch.setattr(large_module, "segments_per_extent", lambda size: 1)
    world = make_world(tmp_path, nodes=12)
    clock, home, network = world
    src = str(tmp_path / "src")
    os.makedirs(src)
    big = os.path.join(src, "log.bin")
    with open(big, "wb") as f:
        f.write(random.Random(3).randbytes(5 * MIB))
    run_backup(world, [src])
    before = _map_extents(world)
    assert len(before) == 3
    # a holder of every extent goes; repair moves its shares elsewhere
    gone = sorted(set.intersection(*before.values()))[0]
    network.nodes[bytes.fromhex(gone)].up = False
    network.mark_failed(bytes.fromhex(gone), "gone")
    report = run_until(clock, Check(ctx_of(world), repair=True, grace=0.0,
                                    m=home.config["n"]).run(), limit=2_000_000)
    assert report.counts()["repaired"] >= 3
    repaired = _map_extents(world)
    assert all(gone not in holders for holders in repaired.values())
    with open(big, "ab") as f:
        f.write(b"appended\n")
    summary, _, _ = run_backup(world, [src])
    assert summary["changed"] == 1
    after = _map_extents(world)
    for xid, holders in repaired.items():
        assert gone not in after[xid], "the backup moved a repaired extent back"
    assert len(after) == 4          # the changed last extent, stored anew
    restored, _ = run_restore(world, str(tmp_path / "out"), snapshot_manifest(world))
    assert restored["failed"] == 0
    assert compare_trees(src, str(tmp_path / "out" / "src")) == []
