"""Segment restore: the plaintext comes back from any k shares, decrypted in
place when the k primaries arrived as writable buffers."""
import random

import pytest

from flud.client.records import SegmentFetch
from flud.client.repository.segments import _decode_and_decrypt, add_parity, prepare_primaries
from flud.coding import SegmentCoder

SECRET = bytes(range(32))


def prepare_segment(secret, coder, data):
    """Encrypt, code and hash one segment: both halves, as a large file's do."""
    return add_parity(secret, coder, prepare_primaries(secret, coder, data))


def _prepared(length):
    data = random.Random(length).randbytes(length)
    coder = SegmentCoder(4, 8)
    prep = prepare_segment(SECRET, coder, data)
    record = SegmentFetch(prep.key.hex(), len(data), prep.block_length, ())
    return data, coder, prep, record


@pytest.mark.parametrize("answer", [bytearray, lambda share: memoryview(bytearray(share))],
                         ids=["bytearray", "writable view"])
@pytest.mark.parametrize("length", [1, 4096, 100_003, 2 * 1024 * 1024])
def test_primaries_are_decrypted_where_they_landed(length, answer):
    data, coder, prep, record = _prepared(length)
    got = {i: answer(prep.shares[i]) for i in range(coder.k)}
    owners = {i: share.obj if isinstance(share, memoryview) else share for i, share in got.items()}
    pieces = _decode_and_decrypt(coder, got, record, prep.key)
    assert b"".join(pieces) == data
    # No new buffer: every piece is a view of a share that was fetched.
    assert all(piece.obj is owners[i] for i, piece in enumerate(pieces))


def test_a_missing_primary_is_rebuilt_from_parity():
    data, coder, prep, record = _prepared(300_000)
    got = {i: bytearray(prep.shares[i]) for i in (0, 2, 5, 7)}
    assert b"".join(_decode_and_decrypt(coder, got, record, prep.key)) == data


def test_read_only_primaries_take_the_decode_path():
    data, coder, prep, record = _prepared(50_000)
    got = {i: bytes(prep.shares[i]) for i in range(coder.k)}  # small answers come inline
    assert b"".join(_decode_and_decrypt(coder, got, record, prep.key)) == data
    assert all(got[i] == bytes(prep.shares[i]) for i in got)  # left as they were


def test_a_bytearray_segment_is_encrypted_in_place_with_the_same_result():
    data = random.Random(7).randbytes(300_001)
    coder = SegmentCoder(4, 8)
    from_bytes = prepare_segment(SECRET, coder, data)
    buffer = bytearray(data)
    in_place = prepare_segment(SECRET, coder, buffer)
    assert in_place.share_keys == from_bytes.share_keys
    assert in_place.key == from_bytes.key and in_place.digest == from_bytes.digest
    assert in_place.shares[0].obj is buffer  # the primaries are views of the read buffer
