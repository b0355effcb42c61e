"""Where each file's bytes end up: bundle slices, shares, tar members."""

import pytest

from flud.aggregator.aggregator import Aggregator
from flud.aggregator.records import BundleRecord, FileSlice
from tests.unit.aggregator.tar_members import parse_members
from tests.unit.aggregator.fakes import (NODES, blake2b_32, file_bytes,
                                         rendezvous_place, xor_encoder)
from tests.unit.aggregator.helpers import (K, N, SPARES, TEST_POLICY,
                                           bundle_from_primaries,
                                           make_aggregator, share_in_tars)

# A mix of sizes around block and bundle boundaries, deterministic.
FILE_SIZES = [0, 1, 100, 511, 512, 513, 1000, 3000, 4096, 7000, 8191] * 4


def _run(sizes=FILE_SIZES, **kwargs):
    aggregator, clock = make_aggregator(**kwargs)
    files = {f"file-{i}": file_bytes(i, size) for i, size in enumerate(sizes)}
    for file_id, data in files.items():
        aggregator.add(file_id, data)
    aggregator.flush()
    return aggregator, files, aggregator.take_bundles(), aggregator.take_sealed()


def test_every_file_is_found_at_its_slice_of_its_bundle():
    _, files, records, tars = _run()
    assert len(records) > 1
    seen = []
    for record in records:
        bundle = bundle_from_primaries(tars, record)
        assert blake2b_32(bundle) == record.bundle_id
        expected_offset = 0
        for piece in record.files:
            assert piece.offset == expected_offset
            assert bundle[piece.offset:piece.offset + piece.length] == \
                files[piece.file_id]
            expected_offset += piece.length
            seen.append(piece.file_id)
        assert expected_offset == record.length
    assert seen == list(files)  # every file once, in order


def test_bundle_is_sealed_before_a_file_would_take_it_past_the_target():
    _, _, records, _ = _run()
    for record, following in zip(records, records[1:]):
        assert record.length <= TEST_POLICY.bundle_target
        assert record.length + following.files[0].length > TEST_POLICY.bundle_target \
            or record.length == TEST_POLICY.bundle_target


def test_share_i_is_coded_block_i_in_the_tar_for_destination_i():
    _, _, records, tars = _run()
    encode = xor_encoder(K, N)
    for record in records:
        assert (record.k, record.n) == (K, N)
        assert record.block_length == -(-record.length // K)
        bundle = bundle_from_primaries(tars, record)
        padded = bundle + bytes(record.block_length * K - len(bundle))
        blocks = [padded[i * record.block_length:(i + 1) * record.block_length]
                  for i in range(K)]
        expected_shares = encode(blocks)
        destinations = rendezvous_place()(record.bundle_id, N + SPARES)
        assert [ref.node for ref in record.shares] == destinations[:N]
        assert record.spares == destinations[N:]
        for ref in record.shares:
            share = share_in_tars(tars, record.bundle_id, ref)
            assert share == expected_shares[ref.index]
            assert ref.key == blake2b_32(share)


def test_tar_members_are_named_by_key_at_the_offsets_recorded():
    _, _, _, tars = _run()
    for tar in tars:
        assert tar.key == blake2b_32(tar.data)
        listed = parse_members(tar.data)
        # an identical share (say, of zero padding) is stored once per tar
        assert listed == list(dict.fromkeys((m.member_key.hex(), m.data_offset, m.length)
                                            for m in tar.members))
        for member in tar.members:
            share = tar.data[member.data_offset:member.data_offset + member.length]
            assert blake2b_32(share) == member.member_key


def test_no_bundle_puts_two_shares_on_one_node():
    _, _, records, _ = _run()
    for record in records:
        nodes = [ref.node for ref in record.shares] + record.spares
        assert len(set(nodes)) == N + SPARES


def test_flush_leaves_one_tar_per_destination():
    _, _, records, tars = _run()
    nodes = [tar.node for tar in tars]
    assert len(set(nodes)) == len(nodes)
    destinations = {ref.node for record in records for ref in record.shares}
    assert set(nodes) == destinations
    members_sent = sum(len(tar.members) for tar in tars)
    assert members_sent == N * len(records)


def test_a_file_bigger_than_the_bundle_target_goes_whole_into_a_bundle_of_its_own():
    big = TEST_POLICY.bundle_target * 3 + 5
    _, files, records, tars = _run(sizes=[10, big, 20])
    assert [[p.file_id for p in r.files] for r in records] == \
        [["file-0"], ["file-1"], ["file-2"]]
    assert records[1].length == big
    assert bundle_from_primaries(tars, records[1]) == files["file-1"]


def test_a_bundle_of_empty_files_still_has_storable_shares():
    _, _, records, tars = _run(sizes=[0, 0])
    (record,) = records
    assert record.length == 0
    assert record.block_length == 1
    assert record.files == [FileSlice("file-0", 0, 0), FileSlice("file-1", 0, 0)]
    assert sum(len(t.members) for t in tars) == N


def test_identical_shares_are_stored_once_per_tar():
    # Two identical bundles: same id, same placement, same shares.
    aggregator, _ = make_aggregator()
    data = file_bytes(1, TEST_POLICY.bundle_target)
    aggregator.add("a", data)
    aggregator.add("b", data)
    aggregator.flush()
    first, second = aggregator.take_bundles()
    assert first.bundle_id == second.bundle_id
    for tar in aggregator.take_sealed():
        assert len(tar.members) == 2
        assert tar.members[0].data_offset == tar.members[1].data_offset
        assert len(parse_members(tar.data)) == 1


def test_stats_count_what_went_through():
    aggregator, files, records, tars = _run()
    stats = aggregator.stats()
    assert stats["files"] == len(files)
    assert stats["bytes_in"] == sum(map(len, files.values()))
    assert stats["bundles"] == len(records)
    assert stats["tars_sealed"] == len(tars)
    assert stats["bytes_out"] == sum(len(t.data) for t in tars)
    assert stats["members"] == N * len(records)
    assert stats["shares_moved"] == 0


def test_records_are_plain_dataclasses():
    _, _, records, _ = _run(sizes=[5])
    assert isinstance(records[0], BundleRecord)
    assert records[0].files == [FileSlice("file-0", 0, 5)]


def test_same_input_gives_byte_identical_output():
    runs = [_run()[2:] for _ in range(2)]
    (records_a, tars_a), (records_b, tars_b) = runs
    assert records_a == records_b
    assert [(t.node, t.key, t.data, t.members, t.serial) for t in tars_a] == \
        [(t.node, t.key, t.data, t.members, t.serial) for t in tars_b]


# -- what the injected callables must honour ---------------------------------

def _make(**kwargs):
    defaults = dict(policy=TEST_POLICY, k=K, n=N, encode=xor_encoder(K, N),
                    hash=blake2b_32, place=rendezvous_place(),
                    clock=lambda: 0.0)
    defaults.update(kwargs)
    return Aggregator(**defaults)


@pytest.mark.parametrize("k, n", [(0, 4), (5, 4), (4, 257)])
def test_k_and_n_are_checked(k, n):
    with pytest.raises(ValueError, match="k <= n"):
        _make(k=k, n=n)


def test_negative_spares_are_refused():
    with pytest.raises(ValueError, match="spares"):
        _make(spares=-1)


@pytest.mark.parametrize("encode, message", [
    (lambda blocks: [bytes(len(b)) for b in blocks] * 2, "not systematic"),
    (lambda blocks: list(blocks), "expected n=8"),
    (lambda blocks: list(blocks) + [b"x"] * 4, "bytes, expected"),
])
def test_a_wrong_coder_is_refused(encode, message):
    aggregator = _make(encode=encode)
    with pytest.raises(ValueError, match=message):
        aggregator.add("f", file_bytes(0, 2 * TEST_POLICY.bundle_target))


@pytest.mark.parametrize("place, message", [
    (lambda bundle_id, count: NODES[:count - 3], "expected n \\+ spares"),
    (lambda bundle_id, count: [NODES[0]] * count, "twice"),
    (lambda bundle_id, count: [""] + NODES[:count - 1], "non-empty"),
])
def test_a_wrong_placement_is_refused(place, message):
    aggregator = _make(place=place)
    with pytest.raises(ValueError, match=message):
        aggregator.add("f", file_bytes(0, 2 * TEST_POLICY.bundle_target))


def test_a_short_hash_is_refused():
    aggregator = _make(hash=lambda data: b"short")
    with pytest.raises(ValueError, match="32"):
        aggregator.add("f", file_bytes(0, 2 * TEST_POLICY.bundle_target))

