"""When tars are sealed (size, age, end of run, memory pressure)."""

import pytest

from flud.aggregator.policy import FlushPolicy
from flud.aggregator.records import DrainRequired
from flud.aggregator.tarball import BLOCK_SIZE, END_OF_ARCHIVE
from tests.unit.aggregator.fakes import file_bytes
from tests.unit.aggregator.fakes import NODE_COUNT
from tests.unit.aggregator.helpers import K, KIB, MAX_AGE, N, make_aggregator

SIZE_POLICY = FlushPolicy(small_file_limit=8 * KIB, bundle_target=8 * KIB,
                          tar_target=16 * KIB, max_age=MAX_AGE,
                          max_pending_bytes=8 * 1024 * KIB)
PRESSURE_POLICY = FlushPolicy(small_file_limit=4 * KIB, bundle_target=4 * KIB,
                              tar_target=32 * KIB, max_age=MAX_AGE,
                              max_pending_bytes=64 * KIB)
MEMBER_HEADER = BLOCK_SIZE


def _tar_body(tar):
    return len(tar.data) - len(END_OF_ARCHIVE)


def _add_bundles(aggregator, count, start=0, bundle_target=None):
    """Add `count` files that each fill exactly one bundle."""
    size = bundle_target or aggregator.policy.bundle_target
    for i in range(start, start + count):
        aggregator.add(f"f{i}", file_bytes(i, size))


def test_tar_is_sealed_before_a_member_would_take_it_past_its_target():
    aggregator, _ = make_aggregator(policy=SIZE_POLICY)
    _add_bundles(aggregator, 30)
    sealed = aggregator.take_sealed()
    assert sealed, "some destination should have filled a tar"
    member = MEMBER_HEADER + SIZE_POLICY.bundle_target // K  # every share here
    for tar in sealed:
        assert len(tar.data) <= SIZE_POLICY.tar_target  # end blocks included
        assert len(tar.data) + member > SIZE_POLICY.tar_target  # one more did not fit
    aggregator.flush()
    rest = aggregator.take_sealed()
    assert all(len(t.data) <= SIZE_POLICY.tar_target for t in rest)


def test_tar_is_sealed_when_its_oldest_member_is_max_age_old():
    aggregator, clock = make_aggregator()
    _add_bundles(aggregator, 1)
    assert aggregator.take_sealed() == []
    clock.advance(MAX_AGE - 0.001)
    aggregator.poll()
    assert aggregator.take_sealed() == []
    clock.advance(0.001)
    aggregator.poll()
    assert len(aggregator.take_sealed()) == N


def test_only_the_expired_tars_are_sealed_oldest_first():
    aggregator, clock = make_aggregator()
    _add_bundles(aggregator, 1, start=0)
    first = {ref.node for ref in aggregator.take_bundles()[0].shares}
    clock.advance(MAX_AGE / 2)
    _add_bundles(aggregator, 1, start=1)
    second = {ref.node for ref in aggregator.take_bundles()[0].shares}
    assert second - first, "the test needs some new destinations"
    clock.advance(MAX_AGE / 2)
    aggregator.poll()
    expired = aggregator.take_sealed()
    assert {t.node for t in expired} == first
    assert [t.serial for t in expired] == sorted(t.serial for t in expired)
    clock.advance(MAX_AGE / 2)
    aggregator.poll()
    assert {t.node for t in aggregator.take_sealed()} == second - first


def test_add_polls_the_clock():
    aggregator, clock = make_aggregator()
    _add_bundles(aggregator, 1)
    clock.advance(MAX_AGE)
    aggregator.add("tiny", b"x")  # does not fill the bundle
    assert len(aggregator.take_sealed()) == N


def test_flush_seals_the_open_bundle_and_every_tar():
    aggregator, _ = make_aggregator()
    aggregator.add("a", b"abc")
    assert aggregator.take_bundles() == []
    aggregator.flush()
    (record,) = aggregator.take_bundles()
    assert record.length == 3
    assert len(aggregator.take_sealed()) == N
    aggregator.flush()  # nothing left: no empty bundle, no empty tar
    assert aggregator.take_bundles() == []
    assert aggregator.take_sealed() == []


def test_pending_bytes_count_bundle_open_tars_and_unconfirmed_tars():
    aggregator, _ = make_aggregator()
    aggregator.add("a", b"x" * 100)
    assert aggregator.pending_bytes == 100
    aggregator.flush()
    tars = aggregator.take_sealed()
    assert aggregator.pending_bytes == sum(len(t.data) for t in tars)
    for tar in tars:
        aggregator.confirm(tar)
    assert aggregator.pending_bytes == 0


def test_confirm_refuses_an_unknown_or_repeated_tar():
    aggregator, _ = make_aggregator()
    aggregator.add("a", b"x")
    aggregator.flush()
    tar = aggregator.take_sealed()[0]
    aggregator.confirm(tar)
    with pytest.raises(ValueError, match="not awaiting confirmation"):
        aggregator.confirm(tar)


def test_over_the_bound_the_largest_open_tars_are_sealed_and_add_refuses():
    aggregator, _ = make_aggregator(policy=PRESSURE_POLICY)
    added = 0
    while not aggregator.must_drain():
        _add_bundles(aggregator, 1, start=added)
        added += 1
    with pytest.raises(DrainRequired, match="take_sealed"):
        aggregator.add("refused", b"x")
    # The bundle is empty (each file filled one), so flush seals only tars.
    under_pressure = aggregator.take_sealed()
    assert under_pressure
    aggregator.flush()
    assert aggregator.take_bundles()[-1].files[0].file_id == f"f{added - 1}"
    still_open = aggregator.take_sealed()
    half_bound = PRESSURE_POLICY.max_pending_bytes / 2
    assert sum(map(_tar_body, still_open)) <= half_bound
    assert min(map(_tar_body, under_pressure)) >= max(map(_tar_body, still_open))
    for tar in under_pressure + still_open:
        aggregator.confirm(tar)
    assert not aggregator.must_drain()
    aggregator.add("accepted", b"x")


def test_draining_what_was_sealed_under_pressure_is_enough_to_go_on():
    aggregator, _ = make_aggregator(policy=PRESSURE_POLICY)
    for i in range(200):
        while aggregator.must_drain():
            sealed = aggregator.take_sealed()
            assert sealed, "must_drain() with nothing to drain would deadlock"
            for tar in sealed:
                aggregator.confirm(tar)
        aggregator.add(f"f{i}", file_bytes(i, 1500))
        assert aggregator.pending_bytes < (
            PRESSURE_POLICY.max_pending_bytes
            + PRESSURE_POLICY.bundle_target * 4  # one bundle's shares of slack
            + NODE_COUNT * len(END_OF_ARCHIVE))  # and the tars sealed meanwhile
    aggregator.flush()
    assert sum(len(r.files) for r in aggregator.take_bundles()) == 200


def test_sealing_order_is_deterministic_for_input_and_clock():
    def run():
        aggregator, clock = make_aggregator(policy=SIZE_POLICY)
        order = []
        for i in range(60):
            aggregator.add(f"f{i}", file_bytes(i, 1000 + 37 * i))
            if i % 7 == 0:
                clock.advance(0.5)
            order += [(t.serial, t.node, t.key) for t in aggregator.take_sealed()]
        aggregator.flush()
        order += [(t.serial, t.node, t.key) for t in aggregator.take_sealed()]
        return order, aggregator.take_bundles()
    assert run() == run()

