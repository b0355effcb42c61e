"""A node that answers QUOTA (docs/quotas.md) is not failed: it keeps
serving what it holds, nothing new is placed on it this run, the shares
go elsewhere, and a store with nowhere left to go says QUOTA."""
from twisted.internet import defer, task

from flud.client.repository.segments import StoreFailed, prepare_segment, store_segment
from flud.coding import SegmentCoder
from tests.unit.client.fakes import FakeNetwork

SECRET = bytes(range(32))


def store(network, clock, seed=1):
    prep = prepare_segment(SECRET, SegmentCoder(4, 8), bytes([seed]) * 200_000)
    d = defer.maybeDeferred(store_segment, network, prep, 8, clock=clock)
    clock.pump([0.05] * 200)
    return d


def test_quota_refusals_move_shares_elsewhere_without_failing_the_node():
    clock = task.Clock()
    network = FakeNetwork(clock, 12)
    full = list(network.nodes)[:3]
    for node_id in full:
        network.nodes[node_id].quota = 0
    holders = []
    for seed in (1, 2, 3):
        store(network, clock, seed).addCallback(holders.append)
    assert len(holders) == 3
    refused = set(network.health.quota)
    assert refused and refused <= set(full)
    assert not network.failed                       # not failed: still asked for what it holds
    assert set(full) <= set(network.alive_ids())
    landed = {bytes.fromhex(h.node) for shares in holders for h in shares}
    assert not landed & set(full)
    assert not set(network.place(b"x" * 32, 12)) & refused


def test_a_store_with_nowhere_left_fails_naming_quota():
    clock = task.Clock()
    network = FakeNetwork(clock, 10)
    for node_id in list(network.nodes)[:5]:
        network.nodes[node_id].quota = 0
    failures = []
    d = store(network, clock)
    d.addErrback(lambda f: failures.append(f.value))
    for _ in range(3):
        store(network, clock, 9).addErrback(lambda f: failures.append(f.value))
    assert failures and all(isinstance(err, StoreFailed) for err in failures)
    assert any("QUOTA" in str(err) for err in failures), [str(e) for e in failures]
    assert not network.failed
