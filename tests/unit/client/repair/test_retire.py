"""`flud check --repair` moves data off a node whose reputation fell below
the threshold (client/repair/retire.py, client/trust_view.py)."""
from flud.client.reputation_store import ReputationStore
from flud.client.trust_view import TrustView
from flud.trust.reputation import VERIFY_OK
from tests.unit.client.repair.world import World


def _trust(world, tmp_path):
    return TrustView(ReputationStore(str(tmp_path)), None, clock=world.clock.seconds)


def test_a_node_that_fails_verify_loses_its_other_shares_too(tmp_path):
    world = World(nodes=14)
    first = world.add(first_node=0)
    second = world.add(first_node=0)     # the same 8 nodes
    bad = first.shares[3]
    world.node(bad.node).corrupt.add(bytes.fromhex(bad.key))
    trust = _trust(world, tmp_path)
    report = world.check([first, second], repair=True, trust=trust)
    moved_second = report.moved.get(second.object_id)
    # the corrupt share is re-created, and so is the good share of the other
    # object on the node that lost one: it is no longer trusted to keep it
    assert [i for i, _, _ in report.moved[first.object_id]] == [3]
    assert moved_second and [i for i, _, _ in moved_second] == [3]
    new_nodes = {node for _, _, node in report.moved[first.object_id] + moved_second}
    assert bad.node not in new_nodes
    assert not trust.may_hold(bytes.fromhex(bad.node))
    # the old copy is surplus, for prune to delete
    assert (second.object_id, second.shares[3].key, bad.node) in report.surplus


def test_without_reputation_nothing_healthy_moves():
    world = World(nodes=14)
    first = world.add(first_node=0)
    second = world.add(first_node=0)
    bad = first.shares[3]
    world.node(bad.node).corrupt.add(bytes.fromhex(bad.key))
    report = world.check([first, second], repair=True)
    assert second.object_id not in report.moved


def test_a_node_with_a_long_good_record_keeps_its_shares_after_one_loss(tmp_path):
    world = World(nodes=14)
    first = world.add(first_node=0)
    second = world.add(first_node=0)
    bad = first.shares[3]
    trust = _trust(world, tmp_path)
    trust.reputation.record(bytes.fromhex(bad.node), VERIFY_OK, world.clock.seconds(), 40)
    world.node(bad.node).corrupt.add(bytes.fromhex(bad.key))
    report = world.check([first, second], repair=True, trust=trust)
    assert [i for i, _, _ in report.moved[first.object_id]] == [3]
    assert second.object_id not in report.moved
