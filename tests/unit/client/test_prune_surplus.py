"""Surplus copies and dead rows (issue 25, finding 11, prune's half): a node
that comes back after a repair re-created its shares elsewhere holds copies
no map row names any more; prune deletes them by the two-run and grace
rules, remembers them across a map rewrite and while their node is away,
and its map rewrite keeps only the challenges of shares the map names."""
import datetime
import os
import random

import pytest

from flud.client.prune import forget as forgetting
from flud.client.prune.prune_job import STATE_META
from flud.client.prune.surplus import place_of, surplus_id, surplus_objects
from flud.client.repository.prune_books import (Mark, Pending, PruneState, deleted_copies,
                                     pending_object_ids)
from flud.client.repair.repository_check import Check
from flud.client.prune.retention import Policy
from flud.client.repository.snapshot_lookup import open_repository
from tests.unit.client.fakes import make_world, run_until, snapshot_manifest
from tests.unit.client.test_pipeline import run_backup, run_restore
from tests.unit.client.test_prune import ctx_of, prune, write
from tools.treecmp import compare_trees

UTC = datetime.timezone.utc


@pytest.fixture
def world(tmp_path):
    return make_world(tmp_path, nodes=12)


def keys_on(world, node_id) -> set:
    network = world[2]
    return {key.hex() for key in network.nodes[node_id].store.keys(network.client_id)}


def newest_map(world, pages_only=False):
    """(the keys each node holds by the newest map rows: {node hex: {key}},
    the share keys of the map's challenge rows), read from the nodes.
    pages_only: not the head's own bundles nor the pages' (the root and the
    map index name those, and the nodes keep only the newest root: a copy
    only an old head named is found when its bundle is deleted whole)."""
    _, repo = run_until(world[0], open_repository(ctx_of(world)))
    try:
        named = {}
        heads = {bundle_id for bundle_id, _ in repo.root.bundles} | \
            {ref.bundle for ref, _ in repo.index.pages} if pages_only else set()
        for bundle_id in set(repo.cache.bundle_ids()) - heads:
            for h in repo.cache.bundle(bundle_id).holders:
                named.setdefault(h.node, set()).add(h.key)
        for _, holders in repo.cache.extent_rows():
            for _, key, node in holders:
                named.setdefault(node, set()).add(key)
        return named, {key for key, _ in repo.cache.challenge_rows()}
    finally:
        repo.close()


def index_named(home, node) -> set:
    import json
    keys = {key for _, record in home.index.extent_rows()
            for _, key, where in record["shares"] if where == node}
    for _, record in home.index.bundle_rows():
        keys.update(key for _, key, where in json.loads(record)["shares"] if where == node)
    return keys


def repair_away(world, victim):
    """The victim goes, a check re-creates every share it held elsewhere
    (m = n), and it comes back with its old copies."""
    clock, home, network = world
    network.nodes[victim].up = False
    network.mark_failed(victim, "gone")
    report = run_until(clock, Check(ctx_of(world), repair=True, grace=0.0,
                                    m=home.config["n"]).run(), limit=2_000_000)
    assert report.recreated_shares > 0
    network.nodes[victim].up = True
    network.health.failed.discard(victim)


def busiest_repaired_away(world):
    """(the node holding the most shares, the copies the map's pages name
    on it), after repair_away took it away and brought it back."""
    network = world[2]
    counts = {node_id: len(keys_on(world, node_id)) for node_id in network.nodes}
    victim = max(counts, key=counts.get)
    mapped, _ = newest_map(world, pages_only=True)
    old_copies = mapped[victim.hex()] & keys_on(world, victim)
    repair_away(world, victim)
    return victim, old_copies


def test_surplus_copies_are_deleted_by_two_runs_even_across_a_map_rewrite_and_an_outage(
        world, tmp_path):
    clock, home, network = world
    src = str(tmp_path / "src")
    rng = random.Random(21)
    for i in range(12):
        write(os.path.join(src, f"f{i}.bin"), rng.randbytes(5000))
    write(os.path.join(src, "big.bin"), rng.randbytes(3 * 1024 * 1024))
    write(os.path.join(src, "gone", "g.bin"), rng.randbytes(2 * 1024 * 1024))
    run_backup(world, [src])
    extents = {record["shares"][0][1]: {key for _, key, _ in record["shares"]}
               for _, record in home.index.extent_rows()}
    os.unlink(os.path.join(src, "gone", "g.bin"))
    run_backup(world, [src])
    run_until(clock, forgetting.forget(ctx_of(world), Policy(last=1), False, UTC,
                                       say=lambda text: None))
    assert prune(world, now=100.0)["marked"] >= 1    # g.bin's extent: deleted by the next run
    victim, old_copies = busiest_repaired_away(world)
    named, _ = newest_map(world)
    # what the map named there and names no more; a copy this home's index
    # still names there stays (a backup may name it again: kept until the
    # index agrees with the map)
    surplus = old_copies - named.get(victim.hex(), set()) - index_named(home, victim.hex())
    assert surplus                                   # the repair moved them elsewhere
    first = prune(world, now=200.0)
    # garbage went (and the map was rewritten from its newest rows: the
    # pages that named the victim's copies are gone); the copies were marked
    assert first["deleted"] >= 1 and first["surplus_deleted"] == 0
    # g.bin's extent went whole: from its holders by the map and by the
    # index both (the victim's old copy too, which the repair had moved)
    gone = set(extents) - {record["shares"][0][1] for _, record in home.index.extent_rows()}
    assert len(gone) == 1
    g_keys = extents[gone.pop()]
    marked = {oid for oid in PruneState.from_wire(home.index.get_meta(STATE_META)).marks
              if oid.startswith("s:")}
    # Every copy of it went but the victim's: repair moved that one off in
    # the map and in the index alike, so only the map's older pages name it
    # there, and it waits, marked, as a surplus copy.
    left = {(key, node.hex()) for node in network.nodes for key in g_keys & keys_on(world, node)}
    assert {node for _, node in left} <= {victim.hex()}
    assert {surplus_id(key, node) for key, node in left} <= marked
    assert marked >= {surplus_id(key, victim.hex()) for key in surplus}
    for oid in marked:        # (older rows may find more: never a copy still named)
        key, node = place_of(oid)
        assert key not in named.get(node, ()) and key not in index_named(home, node)
    assert first["surplus"] == len(marked)
    assert keys_on(world, victim) >= surplus
    network.nodes[victim].up = False                  # away when their turn comes
    second = prune(world, now=300.0)
    assert second["surplus"] == len(marked) and second["failed"] == len(marked)
    state = PruneState.from_wire(home.index.get_meta(STATE_META))
    assert marked <= set(state.pending)
    assert pending_object_ids(home.index) == frozenset()   # copies, not objects
    network.nodes[victim].up = True
    third = prune(world, now=400.0)
    assert third["surplus_deleted"] == len(marked) and third["failed"] == 0
    assert not keys_on(world, victim) & surplus
    assert {place_of(oid) for oid in marked} <= deleted_copies(home.index)   # for check
    report = run_until(clock, Check(ctx_of(world), repair=False).run(), limit=2_000_000)
    assert not {(key, node) for _, key, node in report.surplus} & \
        {place_of(oid) for oid in marked}       # check no longer calls them surplus
    assert prune(world, now=500.0)["surplus"] == 0
    named, challenged = newest_map(world)
    everything = set().union(*named.values())
    assert challenged and challenged <= everything   # no challenge of a share it does not name
    out = str(tmp_path / "out")
    restored, _ = run_restore(world, out, snapshot_manifest(world))
    assert restored["failed"] == 0
    assert compare_trees(src, os.path.join(out, "src")) == []
    report = run_until(clock, Check(ctx_of(world), repair=False, grace=0.0).run(),
                       limit=2_000_000)
    assert report.counts()["lost"] == report.counts()["degraded"] == 0


def test_the_map_rewrite_drops_the_challenges_of_deleted_shares(world, tmp_path):
    clock, home, network = world
    src = str(tmp_path / "src")
    rng = random.Random(22)
    for i in range(40):
        write(os.path.join(src, "old", f"f{i}.bin"), rng.randbytes(4000))
    write(os.path.join(src, "keep.txt"), b"kept")
    run_backup(world, [src])
    _, before = newest_map(world)
    for i in range(40):
        os.unlink(os.path.join(src, "old", f"f{i}.bin"))
    run_backup(world, [src])
    run_until(clock, forgetting.forget(ctx_of(world), Policy(last=1), False, UTC,
                                       say=lambda text: None))
    prune(world, now=100.0)
    assert prune(world, now=200.0)["deleted"] >= 1
    named, challenged = newest_map(world)
    everything = set().union(*named.values())
    assert before - everything                       # some shares the first backup stored went
    assert challenged <= everything


def test_surplus_rules_a_copy_named_again_leaves_the_state():
    state = PruneState(2, {surplus_id("aa", "01"): Mark(1, 10.0, None)},
                       {surplus_id("bb", "02"): Pending(2, 20.0, 1, "down")}, {})
    # the map's pages are merged: nothing names them now, the state does
    found, again = surplus_objects(set(), set(), state)
    assert set(found) == {surplus_id("aa", "01"), surplus_id("bb", "02")} and again == set()
    assert found[surplus_id("bb", "02")][2] == [("bb", "02")]
    # a repair put share bb back on node 02: named again, not surplus
    found, again = surplus_objects({("cc", "03"), ("dd", "04")}, {("bb", "02"), ("dd", "04")},
                                   state)
    assert again == {surplus_id("bb", "02")}
    assert set(found) == {surplus_id("aa", "01"), surplus_id("cc", "03")}
    # deleted already (a tombstone): an old page still listing it finds nothing
    done = state._replace(deleted={surplus_id("cc", "03"): 30.0})
    found, _ = surplus_objects({("cc", "03")}, set(), done)
    assert surplus_id("cc", "03") not in found


def test_a_writers_page_merge_hands_the_copies_it_drops_to_prune(world, tmp_path, monkeypatch):
    """Backups merge the map's pages (past head.MERGE_AT) and the merged
    pages keep only the newest rows: the copies a repair moved away are
    named by older rows alone. The merge marks them in prune's books, so a
    prune after the merge still deletes them, and nothing a snapshot needs."""
    from flud.client.repository import head as head_module
    monkeypatch.setattr(head_module, "MERGE_AT", 1, raising=False)
    clock, home, network = world
    src = str(tmp_path / "src")
    rng = random.Random(5)
    for i in range(8):
        write(os.path.join(src, f"f{i}.bin"), rng.randbytes(4000))
    write(os.path.join(src, "big.bin"), rng.randbytes(3 * 1024 * 1024))
    run_backup(world, [src])
    victim, old_copies = busiest_repaired_away(world)
    for i in range(3):   # each backup appends a page; past MERGE_AT they are merged
        write(os.path.join(src, f"new{i}.bin"), rng.randbytes(3000))
        run_backup(world, [src])
    named, _ = newest_map(world)
    moved = old_copies - named.get(victim.hex(), set()) - index_named(home, victim.hex())
    assert moved                                          # the repair moved copies away
    state = PruneState.from_wire(home.index.get_meta(STATE_META))
    assert {surplus_id(key, victim.hex()) for key in moved} <= set(state.marks)
    prune(world, now=1e10)
    prune(world, now=2e10)
    assert not moved & keys_on(world, victim)              # deleted, though no page names them
    out = str(tmp_path / "out")
    run_restore(world, out, snapshot_manifest(world))
    assert compare_trees(src, os.path.join(out, os.path.basename(src))) == []
