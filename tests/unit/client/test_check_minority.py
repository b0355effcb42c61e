"""`check --repair` hearing fewer than a majority of the root's holders
(issue 25, the lifecycle simulation's seed 70002 with the `stale` kind).

check --repair writes its moves into the map while most holders are away
(the 16-node churn of issue 25 needs it), so it cannot ask for a majority
as the other writers do. It read a replaced home's old head from the
holders it could hear and wrote a root one generation newer: the same
generation as the handover that replaced it, a fork that readers broke by
digest. Now such a head is a repair root (RootRecord.repairs: the same
generation, one repair more), which ranks below any newer generation, and
the check says the head it checked may not be the newest."""
import os
import random

from flud.client.repair.repository_check import Check
from flud.client.repository.head_adopt import adopt
from flud.client.repository.head_chain import Saved
from flud.client.repository.root_store import _root_rank, find_root, root_holders
from tests.unit.client.fakes import run_until, snapshot_manifest
from tests.unit.client.test_check_run import ctx_of
from tests.unit.client.test_head_chain import _all_up
from tests.unit.client.test_pipeline import run_backup, run_restore
from tests.unit.client.test_prune import write
from tools.treecmp import compare_trees


def _world(tmp_path):
    """12 nodes, 2-of-8: with the 6 of the root's 10 holders that make a
    majority away, every object still has 2 shares up (8 distinct nodes of
    12), whatever the random placement."""
    from flud.client.home import create_home
    from tests.unit.client.fakes import FakeNetwork, FakeReactor
    clock = FakeReactor()
    home = create_home(str(tmp_path / "home"), join=("127.0.0.1", 1), overrides={"k": 2, "n": 8})
    network = FakeNetwork(clock, nodes=12)
    network.client_id = home.identity.node_id
    return clock, home, network


def _second_home(world, tmp_path, name="home-b"):
    """A home from the key alone, beside the first (its coding too)."""
    from flud.client.home import create_home
    clock, home, network = world
    other = create_home(str(tmp_path / name), join=("127.0.0.1", 1), identity=home.identity,
                        secret=home.secret, overrides={"k": 2, "n": 8})
    return clock, other, network


def _tree(tmp_path):
    src = str(tmp_path / "src")
    rng = random.Random(4)
    for i in range(12):
        write(os.path.join(src, f"f{i}.txt"), rng.randbytes(3000))
    write(os.path.join(src, "big.bin"), rng.randbytes(600 * 1024))
    return src


def _check(world):
    job = Check(ctx_of(world), repair=True, grace=0.0)
    report = run_until(world[0], job.run(), limit=2_000_000)
    return job, report


def _away(network, node_ids):
    for node_id in node_ids:
        network.nodes[node_id].up = False
        network.mark_failed(node_id, "away")   # as a real network learns it


def test_a_replaced_home_hearing_a_minority_never_outranks_the_handover(tmp_path):
    world = _world(tmp_path)
    clock, home, network = world
    src = _tree(tmp_path)
    run_backup(world, [src])
    first = Saved(world[1].index).root
    holders = root_holders(network, home.config["n"])
    quorum = len(holders) // 2 + 1
    _away(network, holders[:len(holders) - quorum])   # a minority away during the handover
    world_b = _second_home(world, tmp_path)
    run_until(clock, adopt(ctx_of(world_b)))
    handover = run_until(clock, find_root(network, home.secret))
    assert handover.home == world_b[1].home_id and handover.generation == first.generation + 1
    _all_up(network, holders)
    _away(network, holders[len(holders) - quorum:])   # now the handover's holders are away
    job, report = _check(world)                      # the first home: its own old head
    assert report.moved, "the check had nothing to repair: the test proves nothing"
    written = Saved(world[1].index).root
    assert written.digest() != first.digest()        # it wrote its moves' page
    assert written.generation < handover.generation  # never the handover's generation
    assert _root_rank(written) < _root_rank(handover)
    assert job.unconfirmed                           # ... and it says it may be stale
    _all_up(network, list(network.nodes))
    assert run_until(clock, find_root(network, home.secret)) == handover


def test_a_home_hearing_a_minority_records_its_repairs_for_every_reader(tmp_path):
    world = _world(tmp_path)
    clock, home, network = world
    src = _tree(tmp_path)
    run_backup(world, [src])
    first = Saved(world[1].index).root
    holders = root_holders(network, home.config["n"])
    quorum = len(holders) // 2 + 1
    _away(network, holders[len(holders) - quorum:])
    job, report = _check(world)
    assert report.moved and job.unconfirmed
    repaired = Saved(world[1].index).root
    assert (repaired.generation, repaired.repairs) == (first.generation, first.repairs + 1)
    # a home made from the key alone, every node up, reads the repaired head
    _all_up(network, list(network.nodes))
    assert run_until(clock, find_root(network, home.secret)) == repaired
    fresh = _second_home(world, tmp_path, "home-fresh")
    restored, _ = run_restore(fresh, str(tmp_path / "out"), snapshot_manifest(fresh))
    assert restored["failed"] == 0
    assert compare_trees(src, str(tmp_path / "out" / "src")) == []
    # the home writes on from it: the next backup is a new generation
    write(os.path.join(src, "later.txt"), b"later")
    run_backup(world, [src])
    after = Saved(world[1].index).root
    assert (after.generation, after.repairs) == (first.generation + 1, 0)
    assert after.prev == repaired.digest()


def test_a_repair_root_is_this_homes_next_head_and_one_with_fewer_repairs_is_stale():
    import pytest
    from flud.client.repository.head_chain import AHEAD, ForkedHead, StaleRoot, judge
    from tests.unit.client.test_holders import root
    me, other = "a" * 32, "b" * 32
    saved = root(generation=5, home=me)
    mine = saved._replace(repairs=1, prev=saved.digest())
    assert judge(5, saved, mine, me) == AHEAD                    # this home's own repair
    with pytest.raises(StaleRoot):
        judge(5, mine, saved, me)                                # the root it repaired: older
    with pytest.raises(ForkedHead):
        judge(5, saved, mine._replace(home=other), me)           # another home's: a fork


def test_flud_check_says_so_in_its_summary_and_exit_code(tmp_path):
    """What `flud check --json` prints (and the simulation reads) carries
    `unconfirmed`, and the exit code is 1 at least."""
    from flud.cli import check as check_cli
    from flud.cli.exits import EXIT_OK
    from flud.cli.main import build_parser
    world = _world(tmp_path)
    clock, home, network = world
    run_backup(world, [_tree(tmp_path)])
    holders = root_holders(network, home.config["n"])
    _away(network, holders[len(holders) - (len(holders) // 2 + 1):])
    args = build_parser().parse_args(["check", "--home", home.path, "--repair"])
    args.summary = {}
    code = run_until(clock, check_cli.check(ctx_of(world), args), limit=2_000_000)
    assert args.summary.get("unconfirmed") and code != EXIT_OK
