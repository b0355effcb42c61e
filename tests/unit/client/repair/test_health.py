import pytest

from flud.client.records import ShareHolder
from flud.client.repair.object_health import (
    AT_RISK, CORRUPT, DAY, DEGRADED, HEALTHY, LOST, MISSING, OK, SAFETY_MARGIN, UNAVAILABLE,
    UNREACHABLE, HealthBook, Observation, RepairPolicy, StoredObject, default_m)

NODES = [f"{i:02x}" * 32 for i in range(1, 20)]


def _object(k=4, n=8, nodes=NODES):
    return StoredObject("ab" * 32, "bundle", k, n,
                        tuple(ShareHolder(i, f"{i:02x}" * 32, nodes[i]) for i in range(n)), 1024)


def test_nothing_known_bad_is_healthy():
    health = HealthBook().classify(_object(), 0.0, RepairPolicy())
    assert (health.state, health.healthy, health.needs_repair) == (HEALTHY, 8, False)


def test_a_wrong_digest_counts_corrupt_at_once_never_healthy():
    book, obj = HealthBook(), _object()
    book.observe(Observation(obj.shares[2].key, obj.shares[2].node, CORRUPT, 10.0))
    health = book.classify(obj, 10.0, RepairPolicy(m=8))
    assert health.state == DEGRADED and health.healthy == 7 and health.lost == (2,)
    assert health.needs_repair and health.to_recreate() == (2,)


def test_missing_counts_lost_and_a_later_good_answer_clears_it():
    book, obj = HealthBook(), _object()
    share = obj.shares[5]
    book.observe(Observation(share.key, share.node, MISSING, 1.0))
    assert book.classify(obj, 1.0, RepairPolicy()).lost == (5,)
    book.observe(Observation(share.key, share.node, OK, 2.0))
    assert book.classify(obj, 2.0, RepairPolicy()).state == HEALTHY


def test_an_unreachable_node_counts_until_grace_then_its_shares_are_lost():
    book, obj = HealthBook(), _object()
    policy = RepairPolicy(m=8, grace=3 * DAY)
    book.observe(Observation(obj.shares[0].key, obj.shares[0].node, UNREACHABLE, 0.0))
    early = book.classify(obj, 2 * DAY, policy)
    assert (early.healthy, early.unreachable, early.lost) == (7, 1, ())
    assert not early.needs_repair   # presumed alive within grace, 7 confirmed
    late = book.classify(obj, 3 * DAY, policy)
    assert (late.healthy, late.unreachable, late.lost) == (7, 0, (0,))
    assert late.needs_repair and late.to_recreate() == (0,)


def _away(book, obj, indexes, at=0.0, outcome=UNREACHABLE):
    for i in indexes:
        book.observe(Observation(obj.shares[i].key, obj.shares[i].node, outcome, at))


def test_classes_say_what_a_restore_could_do_now_whatever_the_grace():
    """Unreachable shares within grace cannot be fetched: they never make an
    object healthier than its confirmed shares (issue 25: '(2 healthy, 6
    unreachable)' was 'degraded', '(0 healthy, 8 unreachable)' too)."""
    policy = RepairPolicy(grace=30 * DAY)
    expect = {0: HEALTHY, 1: DEGRADED, 2: DEGRADED, 3: AT_RISK, 4: AT_RISK,
              5: UNAVAILABLE, 6: UNAVAILABLE, 8: UNAVAILABLE}
    for away, state in expect.items():
        book, obj = HealthBook(), _object()
        _away(book, obj, range(away))
        health = book.classify(obj, DAY, policy)
        assert (away, health.state) == (away, state)
        assert (health.healthy >= health.k) == (state not in (UNAVAILABLE, LOST))


def test_an_object_stored_with_k_plus_one_shares_is_at_risk_with_all_of_them_confirmed():
    """A bundle coded k-of-(the nodes up) while most nodes were away (a
    check's map page at reduced redundancy) has all its shares confirmed and
    still only k + 1: one more node away and a restore is one short of k.
    The lifecycle simulation (seed 50003, 365 days) saw check call such a
    4-of-5 page 'healthy'."""
    book = HealthBook()
    health = book.classify(_object(k=4, n=5), 0.0, RepairPolicy())
    assert (health.state, health.healthy) == (AT_RISK, 5)
    assert book.classify(_object(k=4, n=6), 0.0, RepairPolicy()).state == HEALTHY


def test_fewer_than_k_left_counting_the_unreachable_is_lost():
    book, obj = HealthBook(), _object()
    _away(book, obj, range(3), outcome=MISSING)
    _away(book, obj, (3,))
    assert book.classify(obj, DAY, RepairPolicy()).state == AT_RISK      # 4 confirmed
    _away(book, obj, range(3, 8))
    assert book.classify(obj, DAY, RepairPolicy()).state == UNAVAILABLE  # 5 away, 0 confirmed
    _away(book, obj, (3, 4), outcome=CORRUPT)
    assert book.classify(obj, DAY, RepairPolicy()).state == LOST         # 3 away at most


def test_down_to_the_safety_margin_repair_does_not_wait_for_the_grace():
    """Two holders away an hour with a grace of three days: 6 = k + 2
    confirmed, so every share not confirmed is re-created now."""
    assert SAFETY_MARGIN == 2 and RepairPolicy().urgent_at(4, 8) == 6
    book, obj = HealthBook(), _object()
    _away(book, obj, (2, 5))
    health = book.classify(obj, 3600.0, RepairPolicy(grace=3 * DAY))
    assert health.needs_repair and health.urgent and health.to_recreate() == (2, 5)
    assert health.state == DEGRADED


def test_the_grace_still_postpones_the_repair_of_a_comfortably_redundant_object():
    book, obj = HealthBook(), _object()
    _away(book, obj, (4,))
    assert not book.classify(obj, 3600.0, RepairPolicy(grace=3 * DAY)).needs_repair
    # a wider margin is an option: 7 confirmed is then urgent too
    health = book.classify(obj, 3600.0, RepairPolicy(grace=3 * DAY, margin=3))
    assert health.needs_repair and health.to_recreate() == (4,)


def test_the_margin_never_asks_to_repair_an_object_with_all_shares_confirmed():
    health = HealthBook().classify(_object(k=2, n=4), 0.0, RepairPolicy(margin=5))
    assert health.state == HEALTHY and not health.needs_repair
    assert RepairPolicy(margin=5).urgent_at(2, 4) == 3


def test_unreachable_since_is_the_first_miss_and_an_answer_resets_it():
    book, obj = HealthBook(), _object()
    share = obj.shares[0]
    book.observe(Observation(share.key, share.node, UNREACHABLE, 0.0))
    book.observe(Observation(share.key, share.node, UNREACHABLE, 2 * DAY))
    assert book.unreachable_since[share.node] == 0.0
    book.observe(Observation(share.key, share.node, OK, 2.5 * DAY))
    assert book.classify(obj, 10 * DAY, RepairPolicy()).state == HEALTHY


def test_repair_threshold_m():
    book, obj = HealthBook(), _object()
    for i in (0,):
        book.observe(Observation(obj.shares[i].key, obj.shares[i].node, CORRUPT, 0.0))
    assert not book.classify(obj, 0.0, RepairPolicy(m=7)).needs_repair   # 7 left: not < 7
    book.observe(Observation(obj.shares[1].key, obj.shares[1].node, CORRUPT, 0.0))
    assert book.classify(obj, 0.0, RepairPolicy(m=7)).needs_repair
    assert default_m(4, 8) == RepairPolicy().threshold(4, 8)


def test_only_k_confirmed_with_others_away_is_urgent_and_recreates_them_too():
    book, obj = HealthBook(), _object()
    for i in (0, 1):
        book.observe(Observation(obj.shares[i].key, obj.shares[i].node, CORRUPT, 0.0))
    for i in (2, 3):
        book.observe(Observation(obj.shares[i].key, obj.shares[i].node, UNREACHABLE, 0.0))
    health = book.classify(obj, 1.0, RepairPolicy(m=5))
    assert health.urgent and health.to_recreate() == (0, 1, 2, 3)


def test_fewer_than_k_left_is_lost_and_cannot_be_repaired():
    book, obj = HealthBook(), _object()
    for i in range(5):
        book.observe(Observation(obj.shares[i].key, obj.shares[i].node, MISSING, 0.0))
    health = book.classify(obj, 0.0, RepairPolicy())
    assert health.state == LOST and health.healthy < health.k and not health.needs_repair


def test_fewer_than_k_confirmed_but_others_away_is_unavailable_not_lost():
    book, obj = HealthBook(), _object()
    for i in range(5):
        book.observe(Observation(obj.shares[i].key, obj.shares[i].node, UNREACHABLE, 0.0))
    health = book.classify(obj, 1.0, RepairPolicy())
    assert health.state == UNAVAILABLE and health.healthy < health.k and not health.needs_repair


def test_a_node_back_after_its_share_moved_is_surplus_not_a_second_share():
    book, obj = HealthBook(), _object()
    old = obj.shares[3]
    book.observe(Observation(old.key, old.node, UNREACHABLE, 0.0))
    assert book.classify(obj, 4 * DAY, RepairPolicy()).lost == (3,)
    new_node = NODES[15]
    book.moved(obj.object_id, old, new_node)
    repaired = obj._replace(shares=obj.shares[:3] + (old._replace(node=new_node),) + obj.shares[4:])
    book.observe(Observation(old.key, old.node, OK, 5 * DAY))   # the old node is back
    health = book.classify(repaired, 5 * DAY, RepairPolicy())
    assert (health.state, health.healthy) == (HEALTHY, 8)
    # the map given with both rows for index 3: the newest (last) wins
    both = obj._replace(shares=obj.shares + (old._replace(node=new_node),))
    assert book.classify(both, 5 * DAY, RepairPolicy()).healthy == 8
    reports = {r.node: r for r in book.node_reports([repaired], 5 * DAY, DAY)}
    assert reports[old.node].surplus == 1 and reports[old.node].shares == 0
    assert reports[old.node].reachable
    assert reports[new_node].shares == 1
    assert book.surplus() == [(obj.object_id, old.key, old.node)]


def test_node_reports_count_reachability_and_bad_shares():
    book, obj = HealthBook(), _object()
    book.observe(Observation(obj.shares[0].key, obj.shares[0].node, CORRUPT, 0.0))
    book.observe(Observation(obj.shares[1].key, obj.shares[1].node, UNREACHABLE, 7.0))
    reports = {r.node: r for r in book.node_reports([obj], 8.0, DAY)}
    assert reports[NODES[0]].corrupt == 1 and reports[NODES[0]].ok == 0
    assert not reports[NODES[1]].reachable and reports[NODES[1]].unreachable_since == 7.0
    assert reports[NODES[2]].ok == 1 and reports[NODES[2]].reachable


def test_the_book_round_trips_through_its_wire_form():
    book, obj = HealthBook(), _object()
    book.observe(Observation(obj.shares[0].key, obj.shares[0].node, CORRUPT, 1.0))
    book.observe(Observation(obj.shares[1].key, obj.shares[1].node, UNREACHABLE, 2.0))
    book.observe(Observation(obj.shares[2].key, obj.shares[2].node, OK, 3.0))
    book.moved(obj.object_id, obj.shares[4], NODES[16])
    again = HealthBook.from_wire(book.to_wire())
    assert again.to_wire() == book.to_wire()
    assert again.classify(obj, 2.5, RepairPolicy()) == book.classify(obj, 2.5, RepairPolicy())
    with pytest.raises(ValueError):
        HealthBook.from_wire({"v": 9})
    with pytest.raises(ValueError):
        book.observe(Observation("k", "n", "fine", 0.0))


def test_a_surplus_copy_found_missing_or_pruned_is_forgotten():
    book, obj = HealthBook(), _object()
    book.moved(obj.object_id, obj.shares[0], NODES[17])
    book.observe(Observation(obj.shares[0].key, obj.shares[0].node, CORRUPT, 1.0))
    assert book.surplus() and not book.bad          # still surplus, never "bad"
    book.observe(Observation(obj.shares[0].key, obj.shares[0].node, MISSING, 2.0))
    assert book.surplus() == []
    book.moved(obj.object_id, obj.shares[1], NODES[17])
    book.pruned(obj.shares[1].key, obj.shares[1].node)
    assert book.surplus() == []
