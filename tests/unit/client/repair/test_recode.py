import itertools
import random

import blake3
import pytest

from flud.client.repair.recode import RecodeMismatch, recode
from flud.coding import BadShares, NotEnoughShares, SegmentCoder


def _object(rng, k, n, size):
    coder = SegmentCoder(k, n)
    _, shares = coder.encode(rng.randbytes(size))
    shares = [bytes(s) for s in shares]
    return coder, shares, [blake3.blake3(s).hexdigest() for s in shares]


@pytest.mark.parametrize("size", [1, 4095, 256 * 1024 + 3])
def test_every_choice_of_lost_shares_comes_back_byte_identical(size):
    rng = random.Random(size)
    coder, shares, keys = _object(rng, 4, 8, size)
    for lost in itertools.combinations(range(8), 4):   # drop any n-k
        fetched = {i: shares[i] for i in range(8) if i not in lost}
        made = recode(coder, fetched, {i: keys[i] for i in lost})
        assert sorted(made) == list(lost)
        for i in lost:
            assert made[i] == shares[i]


def test_only_the_asked_indexes_are_made_and_fewer_than_n_minus_k_lost_works():
    rng = random.Random(7)
    coder, shares, keys = _object(rng, 3, 7, 10_000)
    fetched = {i: shares[i] for i in (1, 4, 6)}
    made = coder.recreate(fetched, [0, 5])
    assert sorted(made) == [0, 5]
    assert bytes(made[0]) == shares[0] and bytes(made[5]) == shares[5]


def test_a_byte_range_of_k_shares_recreates_that_range_of_the_lost_one():
    rng = random.Random(3)
    coder, shares, _ = _object(rng, 4, 8, 64 * 1024)
    fetched = {i: shares[i][1000:5000] for i in (0, 3, 5, 7)}
    made = coder.recreate(fetched, [1, 6])
    assert bytes(made[1]) == shares[1][1000:5000]
    assert bytes(made[6]) == shares[6][1000:5000]


def test_a_wrong_input_share_is_caught_by_the_recorded_key():
    rng = random.Random(5)
    coder, shares, keys = _object(rng, 4, 8, 9000)
    fetched = {i: shares[i] for i in (0, 1, 2, 4)}
    fetched[4] = bytes([fetched[4][0] ^ 1]) + fetched[4][1:]
    with pytest.raises(RecodeMismatch) as info:
        recode(coder, fetched, {3: keys[3], 7: keys[7]})
    assert info.value.code == "RECODE_MISMATCH"


def test_too_few_shares_or_a_bad_index_is_refused():
    rng = random.Random(1)
    coder, shares, keys = _object(rng, 4, 8, 100)
    with pytest.raises(NotEnoughShares):
        coder.recreate({i: shares[i] for i in range(3)}, [5])
    with pytest.raises(BadShares):
        coder.recreate({i: shares[i] for i in range(4)}, [8])


def test_parity_is_recreated_the_same_with_the_kernel_and_with_zfec(monkeypatch):
    from flud import gf256
    rng = random.Random(11)
    coder, shares, keys = _object(rng, 4, 8, 100_003)
    fetched = {i: shares[i] for i in (0, 2, 4, 6)}
    with_kernel = coder.recreate(fetched, [1, 5, 7])
    monkeypatch.setattr(gf256, "available", lambda: False)
    with_zfec = SegmentCoder(4, 8).recreate(fetched, [1, 5, 7])
    for i in (1, 5, 7):
        assert bytes(with_kernel[i]) == bytes(with_zfec[i]) == shares[i]
