"""Claims: the holder must keep the bytes; the checker keeps only an id."""
import random

import blake3

from flud.trust import claims

SECRET = claims.claim_secret(b"\x07" * 32)


def test_claim_bytes_read_any_range_without_the_rest():
    cid = claims.new_claim_id(random.Random(1))
    data, key = claims.claim_content(SECRET, cid, 3 * 1024 * 1024 + 17)
    assert key == blake3.blake3(data).digest()
    assert claims.claim_bytes(SECRET, cid, 2_000_000, 5000) == data[2_000_000:2_005_000]


def test_claims_differ_by_secret_and_id_and_do_not_compress():
    import zlib
    cid = claims.new_claim_id(random.Random(2))
    a = claims.claim_bytes(SECRET, cid, 0, 65536)
    assert a != claims.claim_bytes(claims.claim_secret(b"\x08" * 32), cid, 0, 65536)
    assert a != claims.claim_bytes(SECRET, claims.new_claim_id(random.Random(3)), 0, 65536)
    assert len(zlib.compress(a, 9)) > len(a)


def test_a_spot_check_matches_the_node_digest_of_the_kept_bytes_only():
    rng = random.Random(4)
    cid = claims.new_claim_id(rng)
    data, _ = claims.claim_content(SECRET, cid, 500_000)
    check = claims.spot_check(SECRET, cid, len(data), rng)
    span = data[check.offset:check.offset + check.length]
    assert blake3.blake3(check.nonce + span).digest() == check.expected   # what VERIFY answers
    flipped = bytearray(data)
    flipped[check.offset] ^= 1
    bad = bytes(flipped[check.offset:check.offset + check.length])
    assert blake3.blake3(check.nonce + bad).digest() != check.expected


def test_a_claim_smaller_than_the_span_is_checked_whole():
    rng = random.Random(5)
    check = claims.spot_check(SECRET, b"x" * 16, 1000, rng)
    assert (check.offset, check.length) == (0, 1000)
