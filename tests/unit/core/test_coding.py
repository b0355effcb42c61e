import itertools
import random
import sys

import pytest

from flud.coding import (
    MAX_SHARES,
    BadCodingParameters,
    BadShares,
    NotEnoughShares,
    Piece,
    SegmentCoder,
    locate,
)
from flud.errors import FludError


def decode_piece(coder, piece, slices):
    """Bytes [piece.start, piece.end) of block piece.block_index: `slices`
    holds that range of the primary share itself, or of any k shares."""
    if piece.block_index in slices:
        found = slices[piece.block_index]
    else:
        found = coder.decode_blocks_range(slices)[piece.block_index]
    assert len(found) == piece.end - piece.start
    return found


def decode_range(coder, pieces, slices_per_piece) -> bytes:
    """Bytes of the original data covered by `pieces` (from locate()), joined:
    slices_per_piece[i] holds the range of pieces[i] from the primary share
    or from any k shares (the restore decodes piece by piece instead)."""
    assert len(pieces) == len(slices_per_piece)
    return b"".join(decode_piece(coder, piece, slices)
                    for piece, slices in zip(pieces, slices_per_piece))


@pytest.fixture
def rng():
    return random.Random(42)


def _share_map(shares, indices):
    return {i: bytes(shares[i]) for i in indices}


@pytest.mark.parametrize("k, n", [(0, 1), (2, 1), (1, MAX_SHARES + 1), (-1, 3), (2.0, 4)])
def test_rejects_bad_parameters(k, n):
    with pytest.raises(BadCodingParameters, match="1 <= k <= n <= 256") as info:
        SegmentCoder(k, n)
    assert isinstance(info.value, FludError) and isinstance(info.value, ValueError)


@pytest.mark.parametrize("k, n", [(1, 1), (1, 3), (3, 3), (4, 8), (MAX_SHARES - 1, MAX_SHARES)])
def test_accepts_boundary_parameters(k, n, rng):
    coder = SegmentCoder(k, n)
    data = rng.randbytes(3 * k + 1)
    _, shares = coder.encode(data)
    assert len(shares) == n
    assert coder.decode(_share_map(shares, range(n - k, n)), len(data)) == data


def test_encode_is_systematic_with_zero_padding():
    coder = SegmentCoder(3, 5)
    block_length, shares = coder.encode(b"abcdefg")
    assert block_length == 3
    assert [bytes(s) for s in shares[:3]] == [b"abc", b"def", b"g\0\0"]
    assert all(len(s) == 3 for s in shares)


def test_primary_shares_are_views_of_the_input_not_copies():
    data = bytes(range(200)) * 10
    _, shares = SegmentCoder(4, 8).encode(data)
    assert all(isinstance(s, memoryview) and s.readonly for s in shares)
    assert shares[0].obj is data  # no copy of a full block


@pytest.mark.parametrize("size", [0, 1, 3, 4, 5, 7, 8, 9, 1000, 4096, 1 << 20])
def test_round_trip_sizes(size, rng):
    coder = SegmentCoder(4, 8)
    data = rng.randbytes(size)
    block_length, shares = coder.encode(data)
    assert block_length == coder.block_length(size) == -(-size // 4)
    assert coder.decode(_share_map(shares, range(4)), size) == data  # fast path
    assert coder.decode(_share_map(shares, range(4, 8)), size) == data  # parity only
    assert coder.decode(_share_map(shares, [1, 3, 5, 6]), size) == data


@pytest.mark.parametrize("k, n", [(1, 2), (2, 3), (2, 4), (3, 5), (3, 6)])
def test_every_k_subset_decodes(k, n, rng):
    coder = SegmentCoder(k, n)
    data = rng.randbytes(101)
    _, shares = coder.encode(data)
    for subset in itertools.combinations(range(n), k):
        assert coder.decode(_share_map(shares, subset), len(data)) == data, subset


def test_random_subsets_of_4_of_8(rng):
    coder = SegmentCoder(4, 8)
    for _trial in range(50):
        data = rng.randbytes(rng.randrange(0, 5000))
        _, shares = coder.encode(data)
        subset = rng.sample(range(8), rng.randrange(4, 9))
        assert coder.decode(_share_map(shares, subset), len(data)) == data


def test_accepts_bytearray_and_memoryview_input(rng):
    coder = SegmentCoder(2, 4)
    data = rng.randbytes(33)
    for form in (bytearray(data), memoryview(data)):
        _, shares = coder.encode(form)
        assert coder.decode({2: shares[2], 3: shares[3]}, len(data)) == data


def test_not_enough_shares(rng):
    coder = SegmentCoder(4, 8)
    _, shares = coder.encode(rng.randbytes(100))
    with pytest.raises(NotEnoughShares, match="need 4 of 8 shares.*have 3") as info:
        coder.decode(_share_map(shares, [0, 5, 7]), 100)
    assert info.value.code == "NOT_ENOUGH_SHARES"


@pytest.mark.parametrize(
    "shares, data_length, message",
    [
        ({0: b"ab", 1: b"abc"}, 4, "same length"),
        ({0: b"ab", 9: b"ab"}, 4, "outside 0..3"),
        ({0: b"ab", -1: b"ab"}, 4, "outside"),
        ({0: b"ab", 1: b"ab"}, 5, "cannot come from"),
    ],
)
def test_inconsistent_shares(shares, data_length, message):
    with pytest.raises(BadShares, match=message):
        SegmentCoder(2, 4).decode(shares, data_length)


def test_fast_path_does_not_import_zfec(rng, monkeypatch):
    coder = SegmentCoder(4, 8)
    data = rng.randbytes(64)
    shares = {i: data[i * 16 : (i + 1) * 16] for i in range(4)}
    monkeypatch.setitem(sys.modules, "zfec", None)  # any import would now fail
    assert coder.decode(shares, 64) == data
    assert coder.decode_blocks_range(shares) == [shares[i] for i in range(4)]


# --- locate and range decoding --------------------------------------------------


def test_locate_within_one_block():
    assert locate(5, 3, 10) == [Piece(0, 5, 8)]
    assert locate(10, 10, 10) == [Piece(1, 0, 10)]


def test_locate_straddling_and_spanning_blocks():
    assert locate(8, 5, 10) == [(0, 8, 10), (1, 0, 3)]
    assert locate(5, 27, 10) == [(0, 5, 10), (1, 0, 10), (2, 0, 10), (3, 0, 2)]


def test_locate_empty_and_invalid():
    assert locate(7, 0, 10) == []
    with pytest.raises(ValueError):
        locate(-1, 1, 10)
    with pytest.raises(ValueError):
        locate(0, 1, 0)


def _slices_for(shares, piece, indices):
    return {i: bytes(shares[i][piece.start : piece.end]) for i in indices}


def test_decode_blocks_range_equals_block_slices(rng):
    coder = SegmentCoder(4, 8)
    _, shares = coder.encode(rng.randbytes(4000))
    for a, b in [(0, 1), (13, 14), (100, 777), (0, 1000), (999, 1000)]:
        slices = {i: bytes(shares[i][a:b]) for i in (2, 5, 6, 7)}
        assert [bytes(x) for x in coder.decode_blocks_range(slices)] == [bytes(s[a:b]) for s in shares[:4]]


@pytest.mark.parametrize("subset", [(0, 1, 2, 3), (4, 5, 6, 7), (0, 2, 5, 7), (1, 3, 4, 6, 7)])
def test_decode_range_equals_original_slice(rng, subset):
    coder = SegmentCoder(4, 8)
    data = rng.randbytes(10_001)
    block_length, shares = coder.encode(data)
    for offset, length in [(0, 1), (17, 300), (block_length - 3, 10), (1, 3 * block_length), (10_000, 1), (0, 10_001)]:
        pieces = locate(offset, length, block_length)
        slices = [_slices_for(shares, piece, subset) for piece in pieces]
        assert decode_range(coder, pieces, slices) == data[offset : offset + length], (offset, length)


def test_decode_range_mixes_primary_reads_and_decoded_pieces(rng):
    # A file straddling blocks 1 and 2 where primary share 2 is lost.
    coder = SegmentCoder(4, 8)
    data = rng.randbytes(4000)
    block_length, shares = coder.encode(data)
    offset = 2 * block_length - 7
    pieces = locate(offset, 20, block_length)
    assert [p.block_index for p in pieces] == [1, 2]
    slices = [_slices_for(shares, pieces[0], [1]), _slices_for(shares, pieces[1], [0, 1, 3, 6])]
    assert decode_range(coder, pieces, slices) == data[offset : offset + 20]


def test_a_range_from_fewer_than_k_shares_is_refused(rng):
    coder = SegmentCoder(2, 4)
    _, shares = coder.encode(rng.randbytes(100))
    with pytest.raises(NotEnoughShares):
        coder.decode_blocks_range({3: bytes(shares[3][:5])})
