"""What the aggregator tells a memory budget: every buffer it holds, and a
bound on what one add() can add before the bytes exist."""

import random

from flud.aggregator.bundle import OpenBundle, code_bundle
from flud.aggregator.policy import FlushPolicy
from flud.aggregator.tarball import TarWriter
from tests.unit.aggregator.fakes import blake2b_32, file_bytes, xor_encoder
from tests.unit.aggregator.helpers import KIB, MAX_AGE, make_aggregator

POLICY = FlushPolicy(small_file_limit=8 * KIB, bundle_target=8 * KIB,
                     tar_target=24 * KIB, max_age=MAX_AGE,
                     max_pending_bytes=256 * KIB)


def _accounted(aggregator):
    return aggregator.bundle_bytes + sum(
        size for _, size, _ in aggregator.pending_tars().values())


def test_pending_tars_and_the_bundle_are_all_of_pending_bytes():
    aggregator, clock = make_aggregator(policy=POLICY)
    rng = random.Random(1)
    taken = []
    for i in range(150):
        while aggregator.must_drain():
            taken += aggregator.take_sealed()
            aggregator.confirm(taken.pop(0))
        aggregator.add(f"f{i}", file_bytes(i, rng.randint(1, 8 * KIB - 1)))
        if i % 10 == 0:
            clock.advance(MAX_AGE / 3)
        taken += aggregator.take_sealed()
        if i % 7 == 0 and taken:  # some confirmed, some still in flight
            aggregator.confirm(taken.pop(0))
        assert _accounted(aggregator) == aggregator.pending_bytes
    sealed = {s for s, (_, _, is_sealed) in aggregator.pending_tars().items() if is_sealed}
    assert sealed == {t.serial for t in taken}
    for node, size, is_sealed in aggregator.pending_tars().values():
        assert size > 0 and node


def test_a_tar_keeps_its_serial_from_opening_to_confirmation():
    aggregator, _ = make_aggregator(policy=POLICY)
    aggregator.add("a", file_bytes(0, 8 * KIB))  # one bundle: n open tars
    opened = {node: serial for serial, (node, _, is_sealed)
              in aggregator.pending_tars().items() if not is_sealed}
    assert len(opened) == aggregator.n
    aggregator.flush()
    sealed = aggregator.take_sealed()
    assert {t.node: t.serial for t in sealed} == opened
    for tar in sealed:
        aggregator.confirm(tar)
    assert aggregator.pending_tars() == {} and aggregator.pending_bytes == 0


def test_add_cost_bounds_the_growth_of_every_add():
    aggregator, clock = make_aggregator(policy=POLICY)
    rng = random.Random(2)
    tight = 0
    for i in range(300):
        size = rng.choice([1, 100, 3000, 8 * KIB - 1, rng.randint(1, 8 * KIB)])
        cost = aggregator.add_cost(size)
        before = aggregator.pending_bytes
        aggregator.add(f"f{i}", file_bytes(i, size))
        growth = aggregator.pending_bytes - before
        assert growth <= cost
        tight = max(tight, growth / cost if cost else 1)
        if rng.random() < 0.2:
            clock.advance(MAX_AGE)
        for tar in aggregator.take_sealed():
            aggregator.confirm(tar)
    assert tight > 0.8  # a bound, but not a wild one


def test_seal_open_tars_largest_first_down_to_what_may_stay():
    aggregator, _ = make_aggregator(policy=POLICY)
    for i in range(6):
        aggregator.add(f"f{i}", file_bytes(i, 8 * KIB))
    open_sizes = sorted((size for _, size, is_sealed in aggregator.pending_tars().values()
                         if not is_sealed), reverse=True)
    keep = sum(open_sizes) // 2
    count = aggregator.seal_open_tars(keep)
    assert count >= 1
    still_open = [size for _, size, is_sealed in aggregator.pending_tars().values()
                  if not is_sealed]
    assert sum(still_open) <= keep
    assert max(still_open, default=0) <= min(open_sizes[:count])
    assert aggregator.seal_open_tars() == len(still_open)
    assert all(is_sealed for _, _, is_sealed in aggregator.pending_tars().values())


def test_sealing_and_coding_do_not_copy_the_buffers():
    writer = TarWriter()
    writer.add("a" * 64, b"x" * 1000)
    buffer = writer._buffer
    assert writer.seal() is buffer  # the tar is its writer's buffer, handed over

    bundle = OpenBundle()
    bundle.append("f", b"y" * 4096)
    kept = bundle._buffer
    data, files = bundle.take()
    assert data is kept and bundle.size == 0 and files[0].length == 4096

    coded = code_bundle(data, 4, 8, xor_encoder(4, 8), blake2b_32)
    for block in coded.shares[:4]:
        assert isinstance(block, memoryview) and block.obj is data  # views, no copy
    uneven = bytearray(b"z" * 4097)  # the last block needs padding: only it is new
    coded = code_bundle(uneven, 4, 8, xor_encoder(4, 8), blake2b_32)
    assert [s.obj is uneven for s in coded.shares[:4]] == [True, True, True, False]
    assert bytes(coded.shares[3]).rstrip(b"\0") == b"z" * (4097 - 3 * coded.block_length)
