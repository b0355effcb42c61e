"""A STORE failed: its shares move to spares, never doubling up on a node."""

import pytest

from flud.aggregator.policy import FlushPolicy
from flud.aggregator.records import PlacementExhausted, ShareRef
from tests.unit.aggregator.fakes import blake2b_32, file_bytes
from tests.unit.aggregator.helpers import (KIB, N, SPARES, TEST_POLICY,
                                           bundle_from_primaries,
                                           holders_by_bundle, make_aggregator,
                                           share_in_tars)

BUNDLES = 12


def _sealed_run(bundles=BUNDLES, spares=SPARES, **options):
    aggregator, _ = make_aggregator(spares=spares, **options)
    for i in range(bundles):
        aggregator.add(f"f{i}", file_bytes(i, TEST_POLICY.bundle_target))
    aggregator.flush()
    return aggregator, aggregator.take_sealed()


def _apply(records, moves):
    by_id = {r.bundle_id: r for r in records}
    for move in moves:
        record = by_id[move.bundle_id]
        assert record.shares[move.index].node == move.from_node
        record.shares[move.index] = ShareRef(move.index, move.key, move.to_node)
        record.spares.remove(move.to_node)


def test_replace_moves_every_member_to_the_first_free_spare():
    aggregator, tars = _sealed_run()
    records = aggregator.take_bundles()
    by_id = {r.bundle_id: r for r in records}
    failed = tars[0]
    spares_before = {r.bundle_id: list(r.spares) for r in records}
    moves = aggregator.replace(failed)
    assert [(m.bundle_id, m.index, m.key) for m in moves] == \
        [(m.bundle_id, m.share_index, m.member_key) for m in failed.members]
    for move in moves:
        assert move.from_node == failed.node
        assert move.to_node == spares_before[move.bundle_id][0]
    aggregator.flush()
    new_tars = aggregator.take_sealed()
    _apply(records, moves)
    for move in moves:
        record = by_id[move.bundle_id]
        share = share_in_tars(new_tars, record.bundle_id,
                              record.shares[move.index])
        assert blake2b_32(share) == move.key
    survivors = [t for t in tars if t is not failed] + new_tars
    for bundle_id, nodes in holders_by_bundle(survivors).items():
        assert len(nodes) == len(set(nodes)) == N
        assert failed.node not in nodes
        bundle = bundle_from_primaries(survivors, by_id[bundle_id])
        assert blake2b_32(bundle) == bundle_id
    assert aggregator.stats()["shares_moved"] == len(moves)


def test_replace_releases_the_failed_tar_and_holds_its_shares_again():
    aggregator, tars = _sealed_run()
    for tar in tars[1:]:
        aggregator.confirm(tar)
    assert aggregator.pending_bytes == len(tars[0].data)
    aggregator.replace(tars[0])
    aggregator.flush()
    new_tars = aggregator.take_sealed()
    assert aggregator.pending_bytes == sum(len(t.data) for t in new_tars)
    with pytest.raises(ValueError, match="not awaiting confirmation"):
        aggregator.replace(tars[0])
    for tar in new_tars:
        aggregator.confirm(tar)
    assert aggregator.pending_bytes == 0


def test_a_spare_that_fails_in_turn_is_replaced_by_the_next_spare():
    aggregator, tars = _sealed_run(bundles=1)
    (record,) = aggregator.take_bundles()
    first_spare, second_spare = record.spares
    failed = tars[0]
    (move,) = aggregator.replace(failed)
    assert move.to_node == first_spare
    aggregator.flush()
    (retry,) = aggregator.take_sealed()
    assert retry.node == first_spare
    (move2,) = aggregator.replace(retry)
    assert (move2.from_node, move2.to_node) == (first_spare, second_spare)


def test_failed_nodes_are_never_chosen_as_spares_again():
    aggregator, tars = _sealed_run()
    first_spare = {r.bundle_id: r.spares[0] for r in aggregator.take_bundles()}
    # A tar on node X, then a tar holding a bundle whose first spare is X.
    pairs = [(a, b) for a in tars for b in tars if a is not b
             and any(first_spare[m.bundle_id] == a.node for m in b.members)]
    assert pairs, "the fixed input should contain such a pair"
    earlier, later = pairs[0]
    aggregator.replace(earlier)
    moves = aggregator.replace(later)
    assert earlier.node not in {m.to_node for m in moves}
    assert any(first_spare[m.bundle_id] == earlier.node for m in moves)


def test_exhausted_spares_raise_and_change_nothing():
    """No spare, and place() knows no node but the n holders."""
    from tests.unit.aggregator.fakes import NODES, rendezvous_place
    aggregator, tars = _sealed_run(bundles=2, spares=0, place=rendezvous_place(NODES[:N]))
    failed = tars[0]
    pending = aggregator.pending_bytes
    with pytest.raises(PlacementExhausted) as caught:
        aggregator.replace(failed)
    bundle_ids = {m.bundle_id for m in failed.members}
    assert caught.value.bundle_id in bundle_ids
    assert caught.value.bundle_id.hex() in str(caught.value)
    assert failed.node in str(caught.value)
    assert aggregator.pending_bytes == pending
    assert aggregator.take_sealed() == []
    aggregator.confirm(failed)  # still known: the caller may retry it


def test_a_record_not_yet_taken_is_updated_in_place():
    aggregator, tars = _sealed_run(bundles=1)
    failed = tars[0]
    (move,) = aggregator.replace(failed)
    (record,) = aggregator.take_bundles()
    assert record.shares[move.index] == ShareRef(move.index, move.key,
                                                 move.to_node)
    assert move.to_node not in record.spares
    assert len(record.spares) == SPARES - 1


def test_a_taken_record_is_left_to_the_caller():
    aggregator, tars = _sealed_run(bundles=1)
    (record,) = aggregator.take_bundles()
    (move,) = aggregator.replace(tars[0])
    assert record.shares[move.index].node == move.from_node
    assert len(record.spares) == SPARES




def test_shares_moved_under_pressure_are_sealed_so_the_caller_can_drain():
    """A tar for node A stays in flight while the client goes on; when it
    finally fails, its shares land in open tars. Were they left open, the
    aggregator would be over its bound with nothing to drain: deadlock."""
    policy = FlushPolicy(small_file_limit=64 * KIB, bundle_target=5632,
                         tar_target=60 * KIB, max_pending_bytes=64 * KIB)
    bundles_for_a = 6
    calls = []

    def place(bundle_id, count):  # k=1, n=2, one spare
        calls.append(bundle_id)
        i = len(calls)
        return ["A", "B", "C"] if i <= bundles_for_a else [f"X{i}", f"Y{i}", "C"]

    aggregator, _ = make_aggregator(policy=policy, k=1, n=2, spares=1,
                                    place=place)
    in_flight = None
    for i in range(bundles_for_a + 10):
        while aggregator.must_drain():
            sealed = aggregator.take_sealed()
            if not sealed:
                assert in_flight is not None, "nothing to drain: deadlock"
                aggregator.replace(in_flight)
                in_flight = None
                continue
            for tar in sealed:
                if tar.node == "A" and in_flight is None:
                    in_flight = tar
                else:
                    aggregator.confirm(tar)
        aggregator.add(f"f{i}", file_bytes(i, policy.bundle_target))
    assert aggregator.stats()["shares_moved"] == bundles_for_a


def test_a_network_of_fewer_than_n_plus_spares_nodes_still_takes_bundles():
    """Nine nodes for n=8 and 2 spares: bundles go to the eight holders with
    the one spare there is; fewer than n nodes is refused."""
    from tests.unit.aggregator.fakes import rendezvous_place
    nine = [f"node-{i}" for i in range(9)]
    aggregator, _ = make_aggregator(place=rendezvous_place(nine))
    aggregator.add(b"f" * 32, b"x" * 9000)
    aggregator.flush()
    (record,) = [r for _, r in aggregator._records]
    assert len(record.shares) == 8 and len(record.spares) == 1
    seven = [f"node-{i}" for i in range(7)]
    short, _ = make_aggregator(place=rendezvous_place(seven))
    with pytest.raises(ValueError, match="expected n \\+ spares"):
        short.add(b"g" * 32, b"y" * 9000)
        short.flush()


def test_once_the_spares_are_used_the_next_ranked_live_node_takes_the_share():
    """Two spares a bundle run out when several of its nodes fail at once:
    place() is asked again, and what it ranks next (not failed, holding no
    share of the bundle) takes the share."""
    aggregator, tars = _sealed_run(bundles=1, spares=1)
    (record,) = aggregator.take_bundles()
    for failed in tars[:3]:
        (move,) = aggregator.replace(failed)
        assert move.to_node not in {t.node for t in tars[:3]}
        record.shares[move.index] = ShareRef(move.index, move.key, move.to_node)
    nodes = [s.node for s in record.shares]
    assert len(set(nodes)) == N


def test_with_fewer_live_nodes_than_n_a_live_holder_takes_a_second_share():
    """min_distinct below n: with no other node, the live holder with the
    fewest shares of the bundle takes one more; a move that would leave
    fewer than min_distinct nodes holding the bundle is refused."""
    from tests.unit.aggregator.fakes import NODES, rendezvous_place
    aggregator, _ = make_aggregator(spares=0, place=rendezvous_place(NODES[:N]))
    aggregator.min_distinct = N - 1
    aggregator.add("f", file_bytes(0, TEST_POLICY.bundle_target))
    aggregator.flush()
    tars = aggregator.take_sealed()
    (record,) = aggregator.take_bundles()
    holders = [s.node for s in record.shares]
    (move,) = aggregator.replace(tars[0])
    assert move.to_node in holders and move.to_node != tars[0].node
    holders[move.index] = move.to_node
    assert len(set(holders)) == N - 1
    with pytest.raises(PlacementExhausted):
        aggregator.replace(tars[1])
