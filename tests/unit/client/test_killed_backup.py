"""A backup killed before it publishes its snapshot leaves nothing a later
run can trust: what it wrote to the index (file states, contents, records'
blobs, extents) counts as stored only once the map that names it is
published. The next backup rolls those rows back (its files are read again),
keeps the killed run's bundles and extents as orphans for prune, and its
snapshot restores identical, from this home and from the key alone."""
import os
import random
import shutil

import pytest
from twisted.internet import defer

from flud.client.repository import head as head_module
from flud.client.backup import backup_job as run_module
from flud.client.backup import tree_writer as snapshot_module
from flud.client.backup.backup_job import Backup
from flud.client.backup.small_files import SmallFiles
from flud.client.home import create_home
from flud.client.progress import Progress
from flud.memory import MemoryMonitor
from flud.workers import CPUPool
from tests.unit.client.fakes import (FakeNetwork, FakeReactor, make_world, run_until,
                                     snapshot_manifest)
from tests.unit.client.test_pipeline import MIB, run_backup, run_restore
from tools.treecmp import compare_trees


def _files(root, rng, tag, small=12, large=(MIB + 5,)):
    os.makedirs(os.path.join(root, tag, "deep"), exist_ok=True)
    for i in range(small):
        folder = os.path.join(root, tag, "deep" if i % 2 else "")
        with open(os.path.join(folder, f"s{i}.txt"), "wb") as f:
            f.write(rng.randbytes(rng.randint(1, 20_000)))
    for i, size in enumerate(large):
        with open(os.path.join(root, tag, f"l{i}.bin"), "wb") as f:
            f.write(rng.randbytes(size))


def _hang(monkeypatch, module, name, after=0):
    """module.name hangs forever from its (after+1)-th call on: the run stops
    there as if killed (nothing after it happens). Returns a list that gets
    True once it hung."""
    real = getattr(module, name)
    calls, hung = [0], []

    def patched(*args, **kwargs):
        calls[0] += 1
        if calls[0] > after:
            hung.append(True)
            return defer.Deferred()
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, patched)
    return hung


_KILLED = []


def _killed_backup(world, paths, hung=None, steps=None, tick=0.005):
    """A backup killed: run on a clock and a network of its own (over the
    same nodes and home) until it hangs at the kill point, or for `steps`
    ticks; then that clock never moves again, so nothing of it (an answer
    in flight, a timer) runs after. Returns True if it was cut off before
    its end."""
    clock, home, network = world
    own_clock = FakeReactor()
    own_clock.advance(clock.seconds())
    own = FakeNetwork(own_clock, nodes=0, delay=network.delay)
    own.nodes, own.client_id = network.nodes, network.client_id
    monitor = MemoryMonitor(clock=own_clock.seconds, rss_reader=lambda: 0, budget_bytes=64 * MIB)
    job = Backup(own_clock, home, own, CPUPool(own_clock, inline=True), monitor,
                 Progress("backup", quiet=True), clock=own_clock.seconds)
    d = job.run(paths)
    for step in range(200000 if steps is None else steps):
        if (hung is not None and hung) or d.called:
            break
        own_clock.advance(tick)
    if hung is not None:
        assert hung and not d.called, "the backup never reached its kill point"
    clock.advance(own_clock.seconds() - clock.seconds())
    d.addErrback(lambda _: None)
    # Held for good: a killed process runs nothing more, not even the
    # finally blocks its generators would run when collected.
    _KILLED.append((job, d, own_clock))
    return not d.called


KILL_POINTS = {
    # while the files are sent: extents have landed, no file state yet
    "files": (SmallFiles, "finish", 0),
    # after every file's bundle landed, while directory records are sealed
    "tree": (snapshot_module.TreeWriter, "_hand_over", 1),
    # after the tree and the map page landed, before the head is written
    "page": (snapshot_module, "write_head", 0),
    # after the map index and snapshot record landed, before the root
    "root": (head_module, "put_root_v2", 0),
}


def _fresh_home_world(tmp_path, world):
    """A home made from the key alone (identity and secret), on the same network."""
    clock, home, network = world
    fresh = create_home(str(tmp_path / "fresh"), join=("127.0.0.1", 1),
                        identity=home.identity, secret=home.secret)
    return clock, fresh, network


def _restores_identical(world, src, dest):
    restored, _ = run_restore(world, dest, snapshot_manifest(world))
    assert restored["failed"] == 0
    assert compare_trees(src, os.path.join(dest, os.path.basename(src))) == []


@pytest.mark.parametrize("point", sorted(KILL_POINTS))
def test_a_backup_killed_before_it_publishes_breaks_no_later_snapshot(tmp_path, monkeypatch,
                                                                        point):
    world = make_world(tmp_path, nodes=12)
    rng = random.Random(point)
    src = str(tmp_path / "src")
    _files(src, rng, "first")
    run_backup(world, [src])
    _files(src, rng, "second")
    with monkeypatch.context() as patch:
        target, name, after = KILL_POINTS[point]
        _killed_backup(world, [src], _hang(patch, target, name, after))
    again, _, _ = run_backup(world, [src])
    assert again["skipped"] == 0
    _restores_identical(world, src, str(tmp_path / "out"))
    _restores_identical(_fresh_home_world(tmp_path, world), src, str(tmp_path / "out-fresh"))
    # and the snapshot after that, with nothing changed, still does
    run_backup(world, [src])
    shutil.rmtree(tmp_path / "out")
    _restores_identical(world, src, str(tmp_path / "out"))


def test_a_killed_runs_extents_are_kept_as_orphans_and_adopted(tmp_path, monkeypatch):
    """The killed run's large file is not sent again (its extents are adopted
    by the next run, which maps them); until then prune still finds them."""
    world = make_world(tmp_path, nodes=12)
    rng = random.Random(5)
    src = str(tmp_path / "src")
    _files(src, rng, "first", large=())
    run_backup(world, [src])
    _files(src, rng, "second", small=2, large=(3 * MIB,))
    with monkeypatch.context() as patch:
        _killed_backup(world, [src], _hang(patch, head_module, "put_root_v2"))
    index = world[1].index
    index.recover_run()
    orphans = [key for key, _ in index.extent_rows()]
    assert orphans and all(key.startswith("O") for key in orphans)
    sent = world[2].calls.get("open_store", 0)
    again, _, _ = run_backup(world, [src])
    assert world[2].calls.get("open_store", 0) == sent   # no extent sent again
    assert all(key.startswith("E") for key, _ in index.extent_rows())
    _restores_identical(_fresh_home_world(tmp_path, world), src, str(tmp_path / "out"))


@pytest.mark.parametrize("steps", [20, 45, 55, 62, 70, 80, 95, 110])
def test_a_backup_killed_at_any_moment_breaks_no_later_snapshot(tmp_path, steps):
    """Killed after `steps` ticks of 0.5 ms (the whole run takes about 135):
    reading, sending, landing, the tree, the map, the head."""
    world = make_world(tmp_path, nodes=12)
    rng = random.Random(steps)
    src = str(tmp_path / "src")
    _files(src, rng, "first")
    run_backup(world, [src])
    _files(src, rng, "second", small=30, large=(MIB + 5, 2 * MIB + 1))
    assert _killed_backup(world, [src], steps=steps, tick=0.0005)
    run_backup(world, [src])
    _restores_identical(world, src, str(tmp_path / "out"))
    _restores_identical(_fresh_home_world(tmp_path, world), src, str(tmp_path / "out-fresh"))


def test_what_a_killed_run_stored_is_pruned_and_later_snapshots_restore(tmp_path, monkeypatch):
    """The killed run's bundles and extents (kept as orphans after the next
    backup rolled its rows back) are found by prune and deleted; nothing a
    published snapshot needs goes with them."""
    from tests.unit.client.test_prune import prune, stored_bytes
    world = make_world(tmp_path, nodes=12)
    rng = random.Random(11)
    src = str(tmp_path / "src")
    _files(src, rng, "first")
    run_backup(world, [src])
    published = stored_bytes(world)
    _files(src, rng, "second", small=20, large=(3 * MIB,))
    with monkeypatch.context() as patch:
        _killed_backup(world, [src], _hang(patch, head_module, "put_root_v2"))
    killed = stored_bytes(world) - published
    shutil.rmtree(os.path.join(src, "second"))      # what only the killed run had
    run_backup(world, [src])                           # rolls it back: orphans
    assert any(key.startswith("O") for key, _ in world[1].index.extent_rows())
    before = stored_bytes(world)
    for day in (1, 2):
        prune(world, now=1_000_000.0 * day)
    assert before - stored_bytes(world) > killed / 2
    assert not any(key.startswith("O") for key, _ in world[1].index.extent_rows())
    _restores_identical(world, src, str(tmp_path / "out"))
    _restores_identical(_fresh_home_world(tmp_path, world), src, str(tmp_path / "out-fresh"))


def _change(src, rng, round_number):
    """Add, edit, delete small files; append to or add a large file."""
    small = sorted(os.path.join(d, f) for d, _, names in os.walk(src) for f in names
                   if f.endswith(".txt"))
    for path in rng.sample(small, min(3, len(small))):
        if rng.random() < 0.5:
            os.unlink(path)
        else:
            with open(path, "ab") as f:
                f.write(rng.randbytes(rng.randint(1, 5000)))
    _files(src, rng, f"r{round_number}", small=rng.randint(1, 8),
           large=(rng.randint(MIB, 3 * MIB),) if rng.random() < 0.4 else ())
    large = sorted(os.path.join(d, f) for d, _, names in os.walk(src) for f in names
                   if f.endswith(".bin"))
    if large and rng.random() < 0.5:
        with open(rng.choice(large), "ab") as f:
            f.write(rng.randbytes(rng.randint(1, 300_000)))


@pytest.mark.parametrize("seed", range(10))
def test_random_histories_of_changes_and_killed_backups(tmp_path, seed):
    """A few rounds of changes, each backed up by a run killed at a random
    moment (or not at all) and then by one that finishes: every finished
    snapshot restores identical from the key alone."""
    rng = random.Random(seed)
    world = make_world(tmp_path, nodes=12)
    src = str(tmp_path / "src")
    _files(src, rng, "first")
    run_backup(world, [src])
    for round_number in range(5):
        _change(src, rng, round_number)
        if rng.random() < 0.7:
            _killed_backup(world, [src], steps=rng.randint(1, 150), tick=0.0005)
        run_backup(world, [src])
        clock, home, network = world
        fresh = create_home(str(tmp_path / f"fresh{round_number}"), join=("127.0.0.1", 1),
                            identity=home.identity, secret=home.secret)
        _restores_identical((clock, fresh, network), src, str(tmp_path / f"out{round_number}"))
