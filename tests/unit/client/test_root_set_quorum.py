"""The quorum gap behind the lifecycle simulation's seed 92309, for a home
that never met the new writer's root (SIM_TALLY.md, "Still open"): a
handover (`flud adopt`) reaches only the holders that are up, a bare
majority of the root's home set. One of them is destroyed and an empty node
takes its place in the set (it answers NOT_FOUND); another replays the old
home's own root. The old home then hears a majority of the set as it is now
without meeting the handover, and wrote a fork the head never lists.

A root names the holder set it was written to (RootRecord.holder_set), and
a writer needs a majority of that set as well as of the set as it is now:
an empty newcomer says nothing about a root written before it joined."""
import os

import pytest

from flud.client.repository.head_adopt import adopt
from flud.client.repository.root_store import find_root, root_holders, root_quorum
from flud.errors import FludError
from tests.unit.client.test_head_chain import _all_up, _roots, _second_home
from tests.unit.client.fakes import run_until
from tests.unit.client.test_pipeline import run_backup
from tests.unit.client.test_prune import ctx_of, stored_bytes, world, write  # noqa: F401


def _down(network, node_ids):
    for node_id in node_ids:
        network.nodes[node_id].up = False
        network.health.failed.add(node_id)


def test_a_handover_on_a_bare_majority_is_met_after_a_destroy_and_a_replay(world, tmp_path):
    clock, home, network = world
    n = home.config["n"]
    src = str(tmp_path / "src")
    write(os.path.join(src, "a.txt"), b"alpha")
    run_backup(world, [src])                         # home A: generation 1 on every holder
    holders = root_holders(network, n)
    quorum = root_quorum(len(holders))
    assert len(holders) == 10 and quorum == 6
    before_handover = _roots(network)
    # home B takes over while 4 holders are away: its root reaches the other 6
    _down(network, holders[quorum:])
    world_b = _second_home(world, tmp_path)
    run_until(clock, adopt(ctx_of(world_b)))
    newest = run_until(clock, find_root(network, home.secret))
    assert newest.home == world_b[1].home_id
    _all_up(network, holders)
    # one of B's holders is destroyed: it leaves the member list, and the
    # next node in rank (which holds no root) joins the set
    del network.nodes[holders[0]]
    joined = [i for i in root_holders(network, n) if i not in holders]
    assert len(joined) == 1 and joined[0] not in before_handover or \
        not before_handover[joined[0]]
    after_handover = _roots(network)
    # another replays home A's root; the rest of B's holders are away
    network.nodes[holders[1]].roots = dict(before_handover[holders[1]])
    _down(network, holders[2:quorum])
    # A hears 6 of the set as it is now (the 4 that missed the handover, the
    # newcomer, the replaying node), all showing its own head or none
    write(os.path.join(src, "b.txt"), b"beta")
    stored, roots = stored_bytes(world), _roots(network)
    with pytest.raises(FludError) as refused:
        run_backup(world, [src])
    assert refused.value.code in ("ROOT_UNCONFIRMED", "OTHER_WRITER"), str(refused.value)
    assert stored_bytes(world) == stored and _roots(network) == roots   # nothing written
    # B's holders back: A meets B's root and is refused as the other writer
    _all_up(network, holders[1:])
    network.nodes[holders[1]].roots = dict(after_handover[holders[1]])
    with pytest.raises(FludError) as refused:
        run_backup(world, [src])
    assert refused.value.code == "OTHER_WRITER", str(refused.value)


def test_a_handover_needs_two_holders_more_than_half_an_odd_set(world, tmp_path):
    """With an odd home set (n = 5: 7 holders), two majorities share only
    one node: a handover on 4 of 7, then the old home hearing the 3 others
    and one of the 4 replaying its own root, forked. A handover needs one
    holder more there, so any majority of the set meets it at two nodes."""
    clock, home, network = world
    home.config["n"], home.config["k"] = 5, 2          # k = 2: the data outlives 3 away
    src = str(tmp_path / "src")
    write(os.path.join(src, "a.txt"), b"alpha")
    run_backup(world, [src])
    holders = root_holders(network, 5)
    assert len(holders) == 7 and root_quorum(7) == 4
    before_handover = _roots(network)
    _down(network, holders[4:])                       # 3 away: only 4 can take it
    world_b = _second_home(world, tmp_path)
    world_b[1].config["n"], world_b[1].config["k"] = 5, 2
    try:
        run_until(clock, adopt(ctx_of(world_b)))
    except FludError as err:
        assert err.code == "ROOT_QUORUM", str(err)    # refused: the old home stays the writer
        return
    _all_up(network, holders)
    network.nodes[holders[0]].roots = dict(before_handover[holders[0]])   # replays A's root
    _down(network, holders[1:4])
    write(os.path.join(src, "b.txt"), b"beta")
    roots = _roots(network)
    with pytest.raises(FludError) as refused:
        run_backup(world, [src])
    assert refused.value.code in ("ROOT_UNCONFIRMED", "OTHER_WRITER"), str(refused.value)
    assert _roots(network) == roots


def test_most_of_the_set_lost_for_good_refuses_writers_until_the_user_adopts(world, tmp_path):
    """When most of the set the newest root was written to is lost for good,
    no writer can be sure of the newest root: they refuse (exit 2) until the
    user says those nodes are gone (`flud adopt --accept-older`)."""
    from tests.unit.client.fakes import FakeNode
    clock, home, network = world
    home.config["k"] = 2                              # the data outlives 5 lost disks
    n = home.config["n"]
    src = str(tmp_path / "src")
    write(os.path.join(src, "a.txt"), b"alpha")
    run_backup(world, [src])
    holders = root_holders(network, n)
    for node_id in holders[:5]:                       # 5 of 10 disks lost, 5 new nodes
        del network.nodes[node_id]
    for i in range(13, 18):
        network.nodes[bytes([i]) * 32] = FakeNode(bytes([i]) * 32)
    write(os.path.join(src, "b.txt"), b"beta")
    with pytest.raises(FludError) as refused:
        run_backup(world, [src])
    assert refused.value.code == "ROOT_UNCONFIRMED", str(refused.value)
    assert "written to answered" in str(refused.value)
    with pytest.raises(FludError) as refused:
        run_until(clock, adopt(ctx_of(world)))
    assert refused.value.code == "ROOT_UNCONFIRMED"
    run_until(clock, adopt(ctx_of(world), accept_older=True))
    summary, _, _ = run_backup(world, [src])
    assert summary["snapshot"] == 2


def test_a_root_from_before_the_holder_set_reads_and_keeps_its_encoding(world, tmp_path):
    from flud.client.repository.holder_map import RootRecord
    clock, home, network = world
    write(os.path.join(str(tmp_path / "src"), "a.txt"), b"alpha")
    run_backup(world, [str(tmp_path / "src")])
    root = run_until(clock, find_root(network, home.secret))
    assert root.holder_set == tuple(sorted(i.hex() for i in root_holders(network, 8)))
    old = root._replace(holder_set=())
    assert b'"hs"' not in old.encode()                # as written before: same bytes, digest
    assert RootRecord.decode(old.encode()) == old
    assert RootRecord.decode(root.encode()) == root
    with pytest.raises(FludError):
        RootRecord.decode(root.encode().replace(b'"hs":["', b'"hs":["zz'))
