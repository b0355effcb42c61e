"""`flud check --repair` on the in-memory network (repair/run.py), issue 25:
repair does not wait while redundancy runs out, raises objects as far as
the nodes allow when fewer than n answer, keeps every local copy of what it
moved, and leaves prune's pending deletes out of its counts."""
import argparse
import json
import os
import random

from flud.cli import check as cli_check
from flud.cli.exits import EXIT_ERROR, EXIT_OK, EXIT_SKIPPED
from flud.client.backup.large_files import EXTENT_PREFIX
from flud.client.records import Extent
from flud.client.repair.object_health import AT_RISK, DEGRADED, LOST, UNAVAILABLE
from flud.client.repository.prune_books import pending_object_ids
from flud.client.repair.repository_check import Check, _holder_map
from flud.client.repository.snapshot_lookup import open_repository
from tests.unit.client.fakes import make_world, run_until, snapshot_manifest
from tests.unit.client.test_check_run import ctx_of
from tests.unit.client.test_pipeline import run_backup, run_restore
from tools.treecmp import compare_trees

DAY = 86400.0


def _tree(tmp_path, big=3 * 1024 * 1024, files=12, seed=5):
    src = str(tmp_path / "src")
    rng = random.Random(seed)
    os.makedirs(os.path.join(src, "docs"))
    for i in range(files):
        with open(os.path.join(src, "docs", f"d{i}.txt"), "wb") as f:
            f.write(rng.randbytes(rng.randint(100, 30000)))
    with open(os.path.join(src, "big.bin"), "wb") as f:
        f.write(rng.randbytes(big))
    return src


def _check(world, repair=True, **kwargs):
    return run_until(world[0], Check(ctx_of(world), repair=repair, **kwargs).run(),
                     limit=2_000_000)


def _stop_busiest(network, count, mark_failed=False):
    """Stop the `count` up nodes holding the most of this client's shares."""
    held = {node_id: len(node.store.keys(network.client_id))
            for node_id, node in network.nodes.items() if node.up}
    victims = sorted(held, key=lambda nid: (-held[nid], nid))[:count]
    for victim in victims:
        network.nodes[victim].up = False
        if mark_failed:
            network.mark_failed(victim, "gone")
    return {v.hex() for v in victims}


def _the_map(world):
    ctx = ctx_of(world)
    _, repo = run_until(world[0], open_repository(ctx))
    try:
        return _holder_map(repo.cache)
    finally:
        repo.close()


def test_the_issues_three_rounds_of_the_busiest_three_on_twenty_nodes(tmp_path):
    """Defaults (4-of-8, grace 3 days): three times the 3 busiest nodes stop
    and a check --repair runs at once. Every object down to k + 2 confirmed
    is repaired whatever the grace, so none ever falls below k, and the
    snapshot restores byte for byte from the key alone."""
    world = make_world(tmp_path, nodes=20)
    clock, home, network = world
    src = _tree(tmp_path)
    run_backup(world, [src])
    repaired = 0
    for _ in range(3):
        _stop_busiest(network, 3)
        report = _check(world)
        counts = report.counts()
        assert counts[UNAVAILABLE] == counts[LOST] == 0, report.summary()
        # down to k + 2 = 6 confirmed is repaired at once: none is left below
        assert all(r.confirmed >= 6 for r in report.objects), report.summary()
        repaired += counts["repaired"]
        clock.advance(3600)
    assert repaired > 0
    restored, _ = run_restore(world, str(tmp_path / "out"), snapshot_manifest(world))
    assert restored["failed"] == 0
    assert compare_trees(src, str(tmp_path / "out" / "src")) == []


def test_with_fewer_nodes_than_n_every_object_is_raised_as_far_as_they_allow(tmp_path):
    """10 nodes, 4-of-8, 3 stopped: 7 answer. Every object ends with a share
    on each of the 7 (not the 'n are needed' error), the map says so, and
    the run reports the reduced redundancy rather than success."""
    world = make_world(tmp_path, nodes=10)
    clock, home, network = world
    src = _tree(tmp_path)
    run_backup(world, [src])
    stopped = _stop_busiest(network, 3)
    report = _check(world)
    assert report.objects and all(r.confirmed == 7 for r in report.objects), report.summary()
    assert report.counts()[DEGRADED] == len(report.objects)
    assert any(r.repaired and r.unplaced for r in report.objects)   # raised, not to n
    assert all(r.confirmed + r.unplaced >= 8 for r in report.objects if r.health.needs_repair)
    after = _check(world, repair=False)
    assert all(r.health.healthy == 7 for r in after.objects), after.summary()
    for obj_id, rows in report.moved.items():
        assert not {node for _, _, node in rows} & stopped
    restored, _ = run_restore(world, str(tmp_path / "out"), snapshot_manifest(world))
    assert restored["failed"] == 0
    assert compare_trees(src, str(tmp_path / "out" / "src")) == []


def test_repair_updates_every_local_copy_of_what_it_moved(tmp_path):
    """The client index's bundle rows, extent rows (what a resumed backup
    reuses) and large contents' extents name the holders the map names."""
    world = make_world(tmp_path, nodes=12)
    clock, home, network = world
    src = _tree(tmp_path, big=9 * 1024 * 1024)
    run_backup(world, [src])
    _stop_busiest(network, 2, mark_failed=True)
    report = _check(world, grace=0.0, m=home.config["n"])
    assert report.moved
    the_map = _the_map(world)
    index = home.index
    moved = set(report.moved)
    seen = {"bundle": 0, "extent": 0, "content": 0}
    for bundle_id, record in index.bundle_rows():
        if bundle_id in moved:
            assert the_map.bundle(bundle_id).to_wire()["shares"] == \
                json.loads(record)["shares"]
            seen["bundle"] += 1
    for key, record in index.extent_rows():
        extent = Extent.from_wire(record)
        assert key.startswith(EXTENT_PREFIX)
        if extent.holders[0].key in moved:
            assert extent.holders == the_map.extent(extent.holders[0].key)
            seen["extent"] += 1
    for _cid, record in index.content_rows():
        for wire in json.loads(record).get("ext", ()):
            extent = Extent.from_wire(wire)
            if extent.holders[0].key in moved:
                assert extent.holders == the_map.extent(extent.holders[0].key)
                seen["content"] += 1
    assert seen["bundle"] and seen["extent"] and seen["content"], seen


def test_objects_prune_is_deleting_are_left_out_of_the_counts(tmp_path):
    """A bundle prune decided to delete (pending while a holder is down) and
    whose shares are already gone from the others is not 'lost'."""
    world = make_world(tmp_path, nodes=12)
    clock, home, network = world
    src = _tree(tmp_path, big=0)
    run_backup(world, [src])
    victim = next(json.loads(record)["b"] for _cid, record in home.index.content_rows()
                  if json.loads(record)["t"] == "S")   # file data, not the head's records
    bundle = home.index.bundle(victim)
    for _index, key, node in bundle["shares"]:
        network.nodes[bytes.fromhex(node)].store.delete(bytes.fromhex(key), network.client_id)
    lost = _check(world, repair=False)
    assert lost.unreadable() == 1     # without prune's word it is lost
    assert _cli_check(world) == EXIT_ERROR
    home.index.set_meta("prune_state", {"v": 1, "run": 3, "marks": {}, "deleted": {},
                                        "pending": {f"b:{victim}": [2, 1.0, 1, "down"]}})
    assert pending_object_ids(home.index) == {victim}
    report = _check(world, repair=False)
    assert report.unreadable() == 0
    assert victim not in {r.health.object_id for r in report.objects}
    assert _cli_check(world) == EXIT_OK


def _cli_check(world, summary=None):
    """`flud check` as the CLI runs it: its exit code (its --json summary
    into `summary`)."""
    args = argparse.Namespace(read_data_subset=None, unreachable_grace="3d", repair=False,
                              repair_below=None, safety_margin=None, json=False)
    code = run_until(world[0], cli_check.check(ctx_of(world), args), limit=2_000_000)
    if summary is not None:
        summary.update(args.summary)
    return code


def test_check_exits_2_when_an_object_is_unavailable_whatever_the_grace(tmp_path):
    """Holders away an hour, grace 3 days: '(3 healthy, 5 unreachable)' is
    not 'degraded' and not exit 1 (issue 25), it cannot be read: exit 2."""
    world = make_world(tmp_path, nodes=12)
    clock, home, network = world
    src = _tree(tmp_path, big=0, files=4)
    run_backup(world, [src])
    victim = next(json.loads(record)["b"] for _cid, record in home.index.content_rows()
                  if json.loads(record)["t"] == "S")
    assert _cli_check(world) == EXIT_OK
    shares = home.index.bundle(victim)["shares"]
    for _index, key, node in shares[:3]:
        network.nodes[bytes.fromhex(node)].store.delete(bytes.fromhex(key), network.client_id)
    home.index.set_meta("check_state", None)   # a new rotation: every share is asked
    assert _cli_check(world) == EXIT_SKIPPED   # 5 confirmed: at risk, still readable
    for _index, _key, node in shares[3:5]:
        network.nodes[bytes.fromhex(node)].up = False
    home.index.set_meta("check_state", None)
    summary = {}
    assert _cli_check(world, summary) == EXIT_ERROR     # 3 confirmed, 2 away: unavailable
    assert summary["counts"]["unavailable"] == 1
    assert summary["error"]["code"] == "OBJECTS_UNREADABLE"


def test_an_object_at_k_plus_one_is_at_risk_and_repaired_at_once(tmp_path):
    world = make_world(tmp_path, nodes=12)
    clock, home, network = world
    src = _tree(tmp_path, big=0, files=4)
    run_backup(world, [src])
    first = _check(world, repair=False)
    obj = first.objects[0]
    bundle = home.index.bundle(obj.health.object_id)
    for _index, _key, node in bundle["shares"][:3]:
        network.nodes[bytes.fromhex(node)].up = False
    seen = _check(world, repair=False)
    mine = next(r for r in seen.objects if r.health.object_id == obj.health.object_id)
    assert mine.state == AT_RISK and mine.health.unreachable == 3
    fixed = _check(world)
    mine = next(r for r in fixed.objects if r.health.object_id == obj.health.object_id)
    assert mine.state == "repaired" and mine.confirmed == 8


def test_a_backup_after_a_repair_keeps_the_repaired_holders_of_unchanged_extents(
        tmp_path, monkeypatch):
    """Issue 25 finding 5: a large file that changed in part reuses its
    unchanged extents from the client index; after a repair those rows name
    the new holders, so the holder map does not go back to the old ones."""
    import flud.client.backup.large_files as large
    monkeypatch.setattr(large, "segments_per_extent", lambda segment_size: 2)
    world = make_world(tmp_path, nodes=12)
    clock, home, network = world
    src = _tree(tmp_path, big=8 * 1024 * 1024, files=2)
    run_backup(world, [src])
    [big] = [json.loads(r) for _cid, r in home.index.content_rows() if json.loads(r)["t"] == "L"]
    first = Extent.from_wire(big["ext"][0])
    stopped = {h.node for h in first.holders[:2]}
    for node in stopped:
        network.nodes[bytes.fromhex(node)].up = False
        network.mark_failed(bytes.fromhex(node), "gone")
    report = _check(world, grace=0.0, m=home.config["n"])
    extent_id = first.holders[0].key
    assert extent_id in report.moved
    with open(os.path.join(src, "big.bin"), "ab") as f:
        f.write(random.Random(9).randbytes(1024 * 1024))   # the first extent is unchanged
    clock.advance(60)
    run_backup(world, [src])
    holders = _the_map(world).extent(extent_id)
    assert not {h.node for h in holders} & stopped, holders
    restored, _ = run_restore(world, str(tmp_path / "out"), snapshot_manifest(world))
    assert restored["failed"] == 0
    assert compare_trees(src, str(tmp_path / "out" / "src")) == []


def test_a_safety_margin_beyond_n_minus_k_is_refused(tmp_path):
    import pytest
    from flud.cli.exits import UserError
    world = make_world(tmp_path, nodes=12)
    args = argparse.Namespace(read_data_subset=None, unreachable_grace="3d", repair=True,
                              repair_below=None, safety_margin=5, json=False)
    with pytest.raises(UserError, match="--safety-margin 5"):
        run_until(world[0], cli_check.check(ctx_of(world), args))
