"""A head never goes back, and one key has one writer (issue 25, findings 6
and 7): roots are chained to the home that wrote them, root writes need a
majority, and every head writer refuses a root that is older than, or
forked from, the head its home saved last; a reader says so and reads the
home's own head."""
import os
import random

import pytest

from flud.client.repository import head as head_module
from flud.client.repository.head_chain import Saved
from flud.client.repository.head_adopt import adopt
from flud.client.repository.holder_map import RootRecord
from flud.client.home import create_home
from flud.client.node_requests import NodeRequests
from flud.client.repository.root_store import RootNotStored, find_root, put_root_v2, root_place_key
from flud.client.prune import forget as forgetting
from flud.client.prune.retention import Policy
from flud.errors import FludError
from tests.unit.client.fakes import run_until, snapshot_manifest
from tests.unit.client.test_pipeline import run_backup, run_restore
from tests.unit.client.test_prune import (UTC, ctx_of, prune, stored_bytes,  # noqa: F401
                                          world, write)
from tools.treecmp import compare_trees


def _roots(network) -> dict:
    """Every node's root records, as they are now (to replay later)."""
    return {nid: dict(node.roots) for nid, node in network.nodes.items()}


def _replay(network, saved) -> None:
    for nid, node in network.nodes.items():
        node.roots = dict(saved[nid])


def _two_backups(world, tmp_path):
    """Snapshot 1, then snapshot 2 whose large file only it has; returns
    (src, the roots as they were after snapshot 1)."""
    src = str(tmp_path / "src")
    rng = random.Random(3)
    for i in range(10):
        write(os.path.join(src, f"f{i}.txt"), rng.randbytes(2000))
    run_backup(world, [src])
    after_first = _roots(world[2])
    write(os.path.join(src, "new", "big.bin"), rng.randbytes(3 * 1024 * 1024))
    run_backup(world, [src])
    return src, after_first


def _refused(world, d, code):
    with pytest.raises(FludError) as err:
        run_until(world[0], d)
    assert err.value.code == code, str(err.value)
    return err.value


def _stale(world, after_first, how):
    """The nodes' newest root is snapshot 1's: every node replays it, or
    two nodes holding the newest are away and the others replay it."""
    network = world[2]
    if how == "replayed":
        _replay(network, after_first)
        return
    newest = _roots(network)
    _replay(network, after_first)
    targets = network.place(root_place_key(network), len(network.nodes))
    for nid in targets[:2]:
        network.nodes[nid].roots = newest[nid]
        network.nodes[nid].up = False


@pytest.mark.parametrize("how", ["replayed", "away"])
def test_prune_refuses_a_stale_root_and_deletes_nothing(world, tmp_path, how):
    src, after_first = _two_backups(world, tmp_path)
    _stale(world, after_first, how)
    before = stored_bytes(world)
    for now in (1000.0, 2000.0):   # two runs: what a prune would delete by then
        err = _refused(world, prune_deferred(world, now), "STALE_ROOT")
        assert "older than the head this home wrote last" in str(err)
    assert stored_bytes(world) == before
    for node in world[2].nodes.values():
        node.up = True
    restored, _ = run_restore(world, str(tmp_path / "out"), snapshot_manifest(world))
    assert restored["failed"] == 0
    assert compare_trees(src, str(tmp_path / "out" / "src")) == []


def prune_deferred(world, now):
    from flud.client.prune.prune_job import Prune
    return Prune(ctx_of(world), grace=0.0, now=lambda: now, say=lambda line: None).run()


def test_every_head_writer_refuses_a_stale_root(world, tmp_path):
    src, after_first = _two_backups(world, tmp_path)
    _replay(world[2], after_first)
    ctx = ctx_of(world)
    _refused(world, forgetting.forget(ctx, Policy(forget=("1",)), False, UTC,
                                      say=lambda text: None), "STALE_ROOT")
    _refused(world, forgetting.tag(ctx, [1], add=("x",)), "STALE_ROOT")
    write(os.path.join(src, "more.txt"), b"more")
    with pytest.raises(FludError) as err:
        run_backup(world, [src])
    assert err.value.code == "STALE_ROOT"
    assert _roots(world[2]) == after_first        # nothing was written over
    assert Saved(world[1].index).generation == 2  # nor did the home's head move back


def test_a_reader_reads_the_homes_head_when_the_nodes_root_is_stale(world, tmp_path, caplog):
    src, after_first = _two_backups(world, tmp_path)
    _replay(world[2], after_first)
    manifest = snapshot_manifest(world)        # the newest: the home's, not the nodes'
    assert manifest["snapshot"] == 2
    assert "older than the head this home saved (generation 2)" in caplog.text  # and says so
    restored, _ = run_restore(world, str(tmp_path / "out"), manifest)
    assert restored["failed"] == 0
    assert compare_trees(src, str(tmp_path / "out" / "src")) == []


def test_a_root_write_needs_a_majority(world, tmp_path):
    _two_backups(world, tmp_path)
    clock, home, network = world
    root = run_until(clock, find_root(network, home.secret))
    targets = network.place(root_place_key(network), home.config["n"] + 2)
    for nid in targets[: len(targets) // 2]:          # half of them: no majority
        network.nodes[nid].up = False
    newer = root.successor(home.home_id)
    with pytest.raises(RootNotStored):
        run_until(clock, put_root_v2(network, home.secret, home.config["n"], newer))
    network.nodes[targets[0]].up = True               # one more: a majority
    run_until(clock, put_root_v2(network, home.secret, home.config["n"], newer))


def test_a_tie_is_broken_the_same_way_whatever_order_the_nodes_answer(world, tmp_path):
    _two_backups(world, tmp_path)
    clock, home, network = world
    root = run_until(clock, find_root(network, home.secret))
    one = root.successor(home.home_id)
    other = root.successor("ab" * 16)
    assert one.generation == other.generation and one.digest() != other.digest()
    ids = list(network.nodes)
    for i, nid in enumerate(ids):
        network.nodes[nid].roots.clear()
        run_until(clock, put_root_v2(_Only(network, nid), home.secret, 0,
                                     one if i % 2 else other))
    first = run_until(clock, find_root(network, home.secret))
    network.nodes = dict(reversed(list(network.nodes.items())))
    second = run_until(clock, find_root(network, home.secret))
    assert first == second == max((one, other), key=RootRecord.digest)


class _Only(NodeRequests):
    """A network that places every root on one node."""

    def __init__(self, network, node_id):
        self._network, self._node = network, node_id
        self.client_id = network.client_id
        self.nodes = {node_id: network.nodes[node_id]}   # the root's holders: this one

    def place(self, key, count):
        return [self._node]

    def call(self, *args, **kwargs):
        return self._network.call(*args, **kwargs)


def test_a_root_put_before_the_home_saved_it_is_taken_not_refused(world, tmp_path):
    """Killed between ROOT_PUT and saving the head: the nodes hold this
    home's own next root, which the next backup takes and writes after."""
    src = str(tmp_path / "src")
    write(os.path.join(src, "a.txt"), b"alpha")
    run_backup(world, [src])
    home = world[1]
    saved = home.index.get_meta("repo_v2")
    write(os.path.join(src, "b.txt"), b"beta")
    run_backup(world, [src])
    home.index.set_meta("repo_v2", saved)      # as if killed before the save
    write(os.path.join(src, "c.txt"), b"gamma")
    summary, _, _ = run_backup(world, [src])
    assert summary["snapshot"] == 3
    root = run_until(world[0], find_root(world[2], home.secret))
    assert root.generation == 3 and root.home == home.home_id
    assert [s["id"] for s in home.index.snapshots()] == [1, 2, 3]


def _second_home(world, tmp_path, name="home-b"):
    """A home made from the key alone (what `init --import-key` makes),
    beside the first, on the same nodes."""
    clock, home, network = world
    other = create_home(str(tmp_path / name), join=("127.0.0.1", 1), identity=home.identity,
                        secret=home.secret)
    assert other.home_id != home.home_id
    return clock, other, network


def test_a_second_home_with_the_key_reads_but_does_not_write_until_it_adopts(world, tmp_path):
    src, _ = _two_backups(world, tmp_path)
    world_b = _second_home(world, tmp_path)
    ctx_b = ctx_of(world_b)
    # it reads: the nodes' newest is snapshot 2
    assert snapshot_manifest(world_b)["snapshot"] == 2
    # it does not write
    with pytest.raises(FludError) as err:
        run_backup(world_b, [src])
    assert err.value.code == "OTHER_WRITER" and "flud adopt --home" in str(err.value)
    before = stored_bytes(world)
    _refused(world_b, forgetting.forget(ctx_b, Policy(last=1), False, UTC,
                                        say=lambda text: None), "OTHER_WRITER")
    _refused(world_b, forgetting.tag(ctx_b, [1], add=("x",)), "OTHER_WRITER")
    _refused(world_b, prune_deferred(world_b, 1000.0), "OTHER_WRITER")
    assert stored_bytes(world) == before
    # adopt: b becomes the writer; its snapshot ids go on from the head's
    head, was = run_until(world[0], adopt(ctx_b))
    assert was == world[1].home_id
    assert [s["id"] for s in world_b[1].index.snapshots()] == [1, 2]
    write(os.path.join(src, "from-b.txt"), b"b was here")
    summary, _, _ = run_backup(world_b, [src])
    assert summary["snapshot"] == 3
    # and now a is refused, and its prune deletes nothing
    write(os.path.join(src, "from-a.txt"), b"a was here")
    with pytest.raises(FludError) as err:
        run_backup(world, [src])
    assert err.value.code == "OTHER_WRITER" and "flud adopt --home" in str(err.value)
    before = stored_bytes(world)
    _refused(world, prune_deferred(world, 5000.0), "OTHER_WRITER")
    assert stored_bytes(world) == before
    restored, _ = run_restore(world_b, str(tmp_path / "out"), snapshot_manifest(world_b, 3))
    assert restored["failed"] == 0
    assert os.path.exists(str(tmp_path / "out" / "src" / "from-b.txt"))


def test_adopting_back_forgets_what_the_other_home_pruned(world, tmp_path):
    """A home that adopts after another home wrote (and pruned) must not
    deduplicate against objects the map no longer holds."""
    src = str(tmp_path / "src")
    rng = random.Random(9)
    write(os.path.join(src, "big.bin"), rng.randbytes(2 * 1024 * 1024))
    run_backup(world, [src])
    world_b = _second_home(world, tmp_path)
    ctx_b = ctx_of(world_b)
    run_until(world[0], adopt(ctx_b))
    os.unlink(os.path.join(src, "big.bin"))
    write(os.path.join(src, "small.txt"), b"small")
    run_backup(world_b, [src])
    run_until(world[0], forgetting.forget(ctx_b, Policy(last=1), False, UTC,
                                          say=lambda text: None))
    prune(world_b, now=1000.0)
    assert prune(world_b, now=2000.0)["deleted"] >= 1      # big.bin's extent is gone
    # a takes over again, and backs big.bin up again: it must store it anew
    run_until(world[0], adopt(ctx_of(world)))
    write(os.path.join(src, "big.bin"), random.Random(9).randbytes(2 * 1024 * 1024))
    summary, _, _ = run_backup(world, [src])
    assert summary["snapshot"] == 3
    restored, _ = run_restore(world, str(tmp_path / "out"), snapshot_manifest(world))
    assert restored["failed"] == 0
    assert compare_trees(src, str(tmp_path / "out" / "src")) == []


def test_writers_merge_the_map_pages_before_they_pile_up(world, tmp_path, monkeypatch):
    """Every backup appends a map page; a writer merges them once the index
    would list more than MERGE_AT (a few here, 64 by default), so the index
    never reaches what a reader cannot open."""
    monkeypatch.setattr(head_module, "MERGE_AT", 3, raising=False)
    src = str(tmp_path / "src")
    rng = random.Random(4)
    pages, merges = [], []
    real = head_module.merge_pages

    def counted(*args, **kwargs):
        merges.append(1)
        return real(*args, **kwargs)
    monkeypatch.setattr(head_module, "merge_pages", counted)
    for i in range(8):
        write(os.path.join(src, f"d{i % 3}", f"f{i}.txt"), rng.randbytes(1500))
        run_backup(world, [src])
        index = world[1].index.get_meta("repo_v2")["index"]
        pages.append(len(index["pages"]))
        assert len(index["pages"]) - index.get("m", 0) <= 3, index
    assert max(pages) <= 4, pages      # the merged page(s) and at most 3 appended
    # a merged page is not merged again: one merge every few backups, not each
    assert 1 <= len(merges) <= 3, (merges, pages)
    for snapshot in range(1, 9):   # every snapshot still restores from the merged map
        out = str(tmp_path / f"out{snapshot}")
        restored, _ = run_restore(world, out, snapshot_manifest(world, snapshot))
        assert restored["failed"] == 0
    assert compare_trees(src, str(tmp_path / "out8" / "src")) == []
    prune(world, now=1000.0)       # what the merged map lists is what prune keeps
    prune(world, now=2000.0)
    restored, _ = run_restore(world, str(tmp_path / "again"), snapshot_manifest(world, 1))
    assert restored["failed"] == 0


def test_adopt_refuses_an_older_head_unless_told_it_is_gone_for_good(world, tmp_path):
    src, after_first = _two_backups(world, tmp_path)
    _replay(world[2], after_first)
    ctx = ctx_of(world)
    err = _refused(world, adopt(ctx), "STALE_ROOT")
    assert "--accept-older" in str(err)
    head, _ = run_until(world[0], adopt(ctx, accept_older=True))
    assert [s["id"] for s in world[1].index.snapshots()] == [1]
    assert head.last_id == 2       # snapshot 2 is gone, its id is not given again
    write(os.path.join(src, "after.txt"), b"after")
    summary, _, _ = run_backup(world, [src])
    assert summary["snapshot"] == 3
    restored, _ = run_restore(world, str(tmp_path / "out"), snapshot_manifest(world))
    assert restored["failed"] == 0
    assert compare_trees(src, str(tmp_path / "out" / "src")) == []


def test_a_home_whose_repository_is_gone_can_start_over(world, tmp_path):
    src, _ = _two_backups(world, tmp_path)
    for node in world[2].nodes.values():
        node.roots.clear()                      # every root purged
    with pytest.raises(FludError) as err:
        run_backup(world, [src])
    assert err.value.code == "STALE_ROOT"
    run_until(world[0], adopt(ctx_of(world), accept_older=True))
    summary, _, _ = run_backup(world, [src])
    assert summary["snapshot"] == 1 and summary["new"] > 0   # everything stored again
    restored, _ = run_restore(world, str(tmp_path / "out"), snapshot_manifest(world))
    assert restored["failed"] == 0
    assert compare_trees(src, str(tmp_path / "out" / "src")) == []


def test_a_home_and_a_root_from_before_the_chain_write_on(world, tmp_path):
    """An upgrade: the nodes hold a root without chain fields and the home
    a head saved without its root; the next backup writes on and starts
    the chain from that root."""
    src = str(tmp_path / "src")
    write(os.path.join(src, "a.txt"), b"alpha")
    run_backup(world, [src])
    clock, home, network = world
    found = run_until(clock, find_root(network, home.secret))
    legacy = found._replace(home="", prev="", last_id=0)
    assert b'"home"' not in legacy.encode()
    run_until(clock, put_root_v2(network, home.secret, home.config["n"], legacy))
    saved = home.index.get_meta("repo_v2")
    del saved["root"], saved["last_id"]
    home.index.set_meta("repo_v2", saved)
    write(os.path.join(src, "b.txt"), b"beta")
    summary, _, _ = run_backup(world, [src])
    assert summary["snapshot"] == 2
    root = run_until(clock, find_root(network, home.secret))
    assert root.generation == 2 and root.home == home.home_id
    assert root.prev == legacy.digest() and root.last_id == 2


def _put_on_one_node(network, node_id):
    """A put_root_v2 that reaches one node and then fails (no majority)."""
    def put(net, secret, n, root, everywhere=False):
        d = put_root_v2(_Only(network, node_id), secret, n, root)

        def fail(_):
            raise RootNotStored("only 1 node took the root")
        return d.addCallback(fail)
    return put


def test_a_root_that_missed_its_majority_never_ties_with_the_next(world, tmp_path, monkeypatch):
    src = str(tmp_path / "src")
    write(os.path.join(src, "a.txt"), b"alpha")
    run_backup(world, [src])
    clock, home, network = world
    orphan_node = list(network.nodes)[0]
    monkeypatch.setattr(head_module, "put_root_v2", _put_on_one_node(network, orphan_node))
    write(os.path.join(src, "b.txt"), b"beta")
    with pytest.raises(RootNotStored):
        run_backup(world, [src])
    monkeypatch.undo()
    # (what the failed run stored is not in a published map: finding 1 of
    # issue 25, not this test's; its file is gone before the next backup)
    os.unlink(os.path.join(src, "b.txt"))
    orphan = run_until(clock, find_root(network, home.secret))
    assert orphan.generation == 2                   # it sits on one node
    network.nodes[orphan_node].up = False           # away for the next backup
    write(os.path.join(src, "c.txt"), b"gamma")
    run_backup(world, [src])
    network.nodes[orphan_node].up = True            # and back
    root = run_until(clock, find_root(network, home.secret))
    assert root.generation == 3 and root.digest() != orphan.digest()
    write(os.path.join(src, "d.txt"), b"delta")
    summary, _, _ = run_backup(world, [src])       # no fork: the orphan is older
    restored, _ = run_restore(world, str(tmp_path / "out"), snapshot_manifest(world))
    assert restored["failed"] == 0
    assert compare_trees(src, str(tmp_path / "out" / "src")) == []


def test_a_root_that_missed_its_majority_is_taken_when_seen(world, tmp_path, monkeypatch):
    src = str(tmp_path / "src")
    write(os.path.join(src, "a.txt"), b"alpha")
    run_backup(world, [src])
    clock, home, network = world
    monkeypatch.setattr(head_module, "put_root_v2",
                        _put_on_one_node(network, list(network.nodes)[0]))
    write(os.path.join(src, "b.txt"), b"beta")
    with pytest.raises(RootNotStored):
        run_backup(world, [src])
    monkeypatch.undo()
    write(os.path.join(src, "c.txt"), b"gamma")
    summary, _, _ = run_backup(world, [src])
    root = run_until(clock, find_root(network, home.secret))
    assert root.generation == 3 and root.home == home.home_id
    restored, _ = run_restore(world, str(tmp_path / "out"), snapshot_manifest(world))
    assert restored["failed"] == 0
    assert compare_trees(src, str(tmp_path / "out" / "src")) == []


def test_check_repairs_root_put_again_never_goes_over_a_newer_root(world, tmp_path):
    """`check --repair` puts the root it opened again: only while it is
    still the nodes' newest (another home may have written meanwhile)."""
    from flud.client.repository.head import put_root_again
    from flud.client.repository.snapshot_lookup import open_repository
    _two_backups(world, tmp_path)
    clock, home, network = world
    ctx = ctx_of(world)
    _, repo = run_until(clock, open_repository(ctx))
    try:
        run_until(clock, put_root_again(ctx, repo))       # the same root: put again
        world_b = _second_home(world, tmp_path)
        run_until(clock, adopt(ctx_of(world_b)))        # another home writes meanwhile
        newer = run_until(clock, find_root(network, home.secret))
        _refused(world, put_root_again(ctx, repo), "OTHER_WRITER")
    finally:
        repo.close()
    assert run_until(clock, find_root(network, home.secret)) == newer


def test_root_holders_are_a_fixed_set_a_reader_needs_most_and_a_handover_all(world, tmp_path):
    """The root goes to a fixed set (the highest ranked of every known node,
    up or not) and needs a majority of it: a write made while some holders
    were away is seen by a read made while others are. A reader that hears
    from fewer than a majority says it is not sure (RootUnconfirmed); so
    does a writer, which writes nothing then; a handover (adopt) needs every
    holder that answers and a majority, so the home that wrote before,
    hearing a majority, sees it (two majorities share a node) even when the
    one holder it hears besides replays that home's own old root."""
    from flud.client.repository.root_store import RootUnconfirmed, root_holders
    clock, home, network = world
    src = str(tmp_path / "src")
    write(os.path.join(src, "a.txt"), b"alpha")
    run_backup(world, [src])
    n = home.config["n"]
    holders = root_holders(network, n)
    quorum = len(holders) // 2 + 1
    minority = len(holders) - quorum
    for node_id in holders[:minority]:               # away while the next root is written
        network.nodes[node_id].up = False
    write(os.path.join(src, "b.txt"), b"beta")
    run_backup(world, [src])
    newest = run_until(clock, find_root(network, home.secret, n))
    _all_up(network, holders)
    for node_id in holders[-minority:]:              # a different minority away for the read
        network.nodes[node_id].up = False
    assert run_until(clock, find_root(network, home.secret, n)) == newest
    _all_up(network, holders)
    for node_id in holders[:quorum]:                 # most holders away: a reader is not sure
        network.nodes[node_id].up = False
    with pytest.raises(RootUnconfirmed) as raised:
        run_until(clock, find_root(network, home.secret, n))
    assert raised.value.code == "ROOT_UNCONFIRMED"
    assert run_until(clock, find_root(network, home.secret, n, least=1)) is not None
    # a second home cannot take over while a holder is away; with all of
    # them up it can, and the first home, reaching one holder, is refused
    world_b = _second_home(world, tmp_path)
    _all_up(network, holders)
    network.nodes[holders[0]].up = False
    with pytest.raises(RootNotStored):
        run_until(clock, adopt(ctx_of(world_b)))
    _all_up(network, holders)
    old_roots = _roots(network)
    run_until(clock, adopt(ctx_of(world_b)))
    write(os.path.join(src, "c.txt"), b"gamma")
    for node_id in holders[quorum:]:                 # a minority away: still refused
        network.nodes[node_id].up = False
    with pytest.raises(FludError) as refused:
        run_backup(world, [src])
    assert refused.value.code == "OTHER_WRITER"
    _all_up(network, holders)
    # most holders away and the one left replays the first home's own root
    # (the stale fork): the first home hears one holder, so writes nothing
    for node_id in holders[1:]:
        network.nodes[node_id].up = False
    for node_id in set(network.nodes) - set(holders[1:]):
        network.nodes[node_id].roots = dict(old_roots[node_id])
    before, replayed = stored_bytes(world), _roots(network)
    with pytest.raises(FludError) as refused:
        run_backup(world, [src])
    assert refused.value.code == "ROOT_UNCONFIRMED", str(refused.value)
    assert "nodes that hold this home's root record answered" in str(refused.value)
    assert stored_bytes(world) == before and _roots(network) == replayed   # nothing written
    _all_up(network, holders)


def _all_up(network, node_ids):
    for node_id in node_ids:
        network.nodes[node_id].up = True
    network.health.failed.clear()


def test_a_superseded_home_stays_refused_when_the_new_writers_root_is_not_heard(world, tmp_path):
    """Once a home has met another home's newer root (OTHER_WRITER), it is
    superseded until it adopts, even when the nodes it hears later all show
    its own head again: the new writer's holders away or gone for good (the
    home set changed) and one node replaying an old root (the lifecycle
    simulation, seed 92309: the home wrote a fork the head never listed)."""
    clock, home, network = world
    src = str(tmp_path / "src")
    write(os.path.join(src, "a.txt"), b"alpha")
    run_backup(world, [src])
    before_handover = _roots(network)
    world_b = _second_home(world, tmp_path)
    run_until(clock, adopt(ctx_of(world_b)))
    write(os.path.join(src, "b.txt"), b"beta")
    with pytest.raises(FludError) as refused:
        run_backup(world, [src])
    assert refused.value.code == "OTHER_WRITER"
    # every node answers with the first home's own head again
    _replay(network, before_handover)
    stored, roots = stored_bytes(world), _roots(network)
    with pytest.raises(FludError) as refused:
        run_backup(world, [src])
    assert refused.value.code == "OTHER_WRITER", str(refused.value)
    assert f"home {world_b[1].home_id[:8]}" in str(refused.value)
    assert stored_bytes(world) == stored and _roots(network) == roots   # nothing written
    _refused(world, prune_deferred(world, 1000.0), "OTHER_WRITER")
    # adopting back needs the newer head, or --accept-older
    _refused(world, adopt(ctx_of(world)), "STALE_ROOT")
    run_until(clock, adopt(ctx_of(world), accept_older=True))
    summary, _, _ = run_backup(world, [src])
    assert summary["snapshot"] == 2
