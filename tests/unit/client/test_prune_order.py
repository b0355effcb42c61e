"""No backup names an object that a prune has begun to delete (issue 25,
finding 4). Prune takes what it decided to delete out of the client index
and writes its state BEFORE the first DELETE, so a DELETE that fails on one
holder, or a prune killed in its delete phase, leaves nothing a later
backup deduplicates against: the backup stores the content again, and the
next prune, finding the pending object referenced again (same content
key), cancels its DELETE instead of sending it."""
import datetime
import os
import random

import pytest

from flud.client.prune import forget as forgetting
from flud.client.prune.prune_job import STATE_META, Prune
from flud.client.repository.prune_books import PruneState
from flud.client.prune.retention import Policy
from flud.storage.errors import StorageError
from tests.unit.client.fakes import make_world, run_until, snapshot_manifest
from tests.unit.client.test_pipeline import run_backup, run_restore
from tests.unit.client.test_prune import ctx_of, write
from tools.treecmp import compare_trees

UTC = datetime.timezone.utc
BIG = random.Random(11).randbytes(3 * 1024 * 1024)   # one extent: 8 streams at 4-of-8


@pytest.fixture
def world(tmp_path):
    return make_world(tmp_path, nodes=12)


def start_prune(world, now):
    job = Prune(ctx_of(world), grace=0.0, now=lambda: now, say=lambda line: None)
    return job.run()


def prune(world, now):
    return run_until(world[0], start_prune(world, now))


def the_extent(world):
    """(extent id, [(share key, node id)]) of the one extent the index knows."""
    rows = world[1].index.extent_rows()
    assert len(rows) == 1
    record = rows[0][1]
    return record["shares"][0][1], [(key, node) for _, key, node in record["shares"]]


def shares_left(world, shares) -> int:
    _, home, network = world
    left = 0
    for key, node in shares:
        try:
            with network.nodes[bytes.fromhex(node)].store.open_reader(
                    bytes.fromhex(key), network.client_id, 0, None):
                left += 1
        except StorageError:
            pass
    return left


def kill_everything_in_flight(clock) -> None:
    """As SIGKILL: every request not answered yet never is, and the job's
    code after it never runs (its Deferred is abandoned)."""
    for call in list(clock.getDelayedCalls()):
        call.cancel()


def garbage_extent(world, tmp_path):
    """Snapshot 2 without big.bin, snapshot 1 (which had it) forgotten, one
    prune run that marks the extent: the next run deletes it."""
    src = str(tmp_path / "src")
    write(os.path.join(src, "keep.txt"), b"kept")
    write(os.path.join(src, "old", "big.bin"), BIG)
    run_backup(world, [src])
    extent = the_extent(world)
    os.unlink(os.path.join(src, "old", "big.bin"))
    run_backup(world, [src])
    run_until(world[0], forgetting.forget(ctx_of(world), Policy(last=1), False, UTC,
                                          say=lambda text: None))
    first = prune(world, now=100.0)
    assert first["marked"] >= 1 and first["deleted"] == 0
    return src, extent


def bring_back_and_check(world, tmp_path, src, extent, now):
    """The deleted bytes come back, a backup stores them, a prune runs: the
    newest snapshot restores whole and the extent keeps all its shares."""
    write(os.path.join(src, "old", "big.bin"), BIG)   # same bytes: the same content keys
    run_backup(world, [src])
    stored = the_extent(world)                        # stored again: same id, maybe other nodes
    assert stored[0] == extent[0]
    after = prune(world, now=now)
    state = PruneState.from_wire(world[1].index.get_meta(STATE_META))
    assert "x:" + extent[0] not in state.pending           # referenced again: cancelled
    assert after["failed"] == 0
    assert shares_left(world, stored[1]) == len(stored[1])
    out = str(tmp_path / "out")
    restored, _ = run_restore(world, out, snapshot_manifest(world))
    assert restored["failed"] == 0
    assert compare_trees(src, os.path.join(out, "src")) == []


def test_a_delete_that_fails_on_one_holder_then_backup_prune_restore(world, tmp_path):
    src, extent = garbage_extent(world, tmp_path)
    network = world[2]
    down = network.nodes[bytes.fromhex(extent[1][3][1])]
    down.up = False                                # its DELETE fails
    second = prune(world, now=200.0)
    down.up = True
    assert second["failed"] >= 1 and shares_left(world, extent[1]) == 1
    # pending, and gone from the index: its extent, its content, the file
    # state naming it, its challenges (nothing a backup could count on)
    index = world[1].index
    assert index.extent_rows() == []
    assert all(index.challenges(key) is None for key, _ in extent[1])
    assert not any(b'"ext"' in record for _, record in index.content_rows())
    bring_back_and_check(world, tmp_path, src, extent, now=300.0)


@pytest.mark.parametrize("left_when_killed", [8, 3, 0])
def test_a_prune_killed_in_its_delete_phase_then_backup_prune_restore(world, tmp_path,
                                                                     left_when_killed):
    """Killed before its first DELETE (8 shares left), in the middle (3 of
    8: fewer than k), or after the last one but before it recorded them."""
    src, extent = garbage_extent(world, tmp_path)
    clock, home, network = world
    running = start_prune(world, now=200.0)
    for _ in range(100000):
        if left_when_killed == 8:
            if home.index.get_meta(STATE_META, {}).get("pending"):
                break                              # its state written, no DELETE answered
        elif shares_left(world, extent[1]) <= left_when_killed:
            break
        clock.advance(0.001)
    assert not running.called
    kill_everything_in_flight(clock)
    assert shares_left(world, extent[1]) == left_when_killed
    bring_back_and_check(world, tmp_path, src, extent, now=300.0)


def test_a_share_another_kept_object_names_is_not_deleted(tmp_path):
    """Share keys are convergent: two extents can name one stored share (a
    large file changed in part). Deleting the dead one must leave the
    share the live one names (the lifecycle simulation, seed 70055)."""
    from flud.client.prune.prune_job import Prune, kept_shares
    from tests.unit.client.fakes import make_world, run_until
    from tests.unit.client.test_prune import ctx_of
    world = make_world(tmp_path, nodes=4)
    clock, _, network = world
    owner = network.client_id
    nodes = list(network.nodes)
    import blake3
    data = {name: name.encode() * 100 for name in ("shared", "own", "other")}
    shared, own, other = (blake3.blake3(data[n]).digest() for n in ("shared", "own", "other"))
    for key, name in ((shared, "shared"), (own, "own")):
        network.nodes[nodes[0]].store_(owner, key, data[name])   # a key is its bytes' hash
    network.nodes[nodes[1]].store_(owner, other, data["other"])
    dead = ("x", "dead", [(shared.hex(), nodes[0].hex()), (own.hex(), nodes[0].hex())])
    live = ("x", "live", [(shared.hex(), nodes[0].hex()), (other.hex(), nodes[1].hex())])
    objects = {"x:dead": dead, "x:live": live}
    job = Prune(ctx_of(world), say=lambda line: None)
    outcomes = run_until(clock, job._delete(["x:dead"], objects,
                                            kept_shares(objects, {"x:dead"})))
    assert outcomes["x:dead"].status == "deleted"
    keys = set(network.nodes[nodes[0]].store.keys(owner))
    assert shared in keys and own not in keys
