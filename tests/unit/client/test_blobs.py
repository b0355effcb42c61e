"""Blobs are sealed deterministically and addressed by a keyed hash: equal
records are equal blobs, and any change to a blob is caught."""
import pytest

from flud.client.repository.blobs import BlobDamaged, BlobSealer
from flud.crypto import (SIV_KEY_LENGTH, new_user_secret, open_deterministic,
                         seal_deterministic)
from flud.errors import IntegrityError

RECORD = b'{"v":2,"t":"dir","e":[["notes.txt","f",33188,1,5,null]]}'


@pytest.fixture
def sealer():
    return BlobSealer(new_user_secret())


def test_the_same_record_is_the_same_blob(sealer):
    assert sealer.seal(RECORD) == sealer.seal(bytes(RECORD))


def test_a_different_record_is_a_different_blob(sealer):
    one, two = sealer.seal(RECORD), sealer.seal(RECORD.replace(b"5", b"6"))
    assert one[0] != two[0] and one[1] != two[1]


def test_another_users_blob_of_the_same_record_differs_and_does_not_open(sealer):
    theirs = BlobSealer(new_user_secret())
    blob_id, sealed = theirs.seal(RECORD)
    assert (blob_id, sealed) != sealer.seal(RECORD)
    with pytest.raises(BlobDamaged):
        sealer.open(blob_id, sealed)


def test_a_blob_opens_to_its_record_and_hides_it(sealer):
    blob_id, sealed = sealer.seal(RECORD)
    assert RECORD not in sealed and b"notes" not in sealed
    assert sealer.open(blob_id, sealed) == RECORD


@pytest.mark.parametrize("damage", [
    lambda b: b[:-1],                                   # truncated
    lambda b: b[:20] + bytes([b[20] ^ 1]) + b[21:],     # one bit flipped
    lambda b: b + b"x",                                 # grown
])
def test_any_change_to_a_blob_is_caught(sealer, damage):
    blob_id, sealed = sealer.seal(RECORD)
    with pytest.raises(BlobDamaged) as caught:
        sealer.open(blob_id, damage(sealed))
    assert caught.value.code == "BLOB_DAMAGED"


def test_a_blob_fetched_for_another_address_is_refused(sealer):
    _, sealed = sealer.seal(RECORD)
    other_id, _ = sealer.seal(b"another record")
    with pytest.raises(BlobDamaged):
        sealer.open(other_id, sealed)


def test_siv_sealing_round_trips_and_is_deterministic():
    key = bytes(range(SIV_KEY_LENGTH))
    sealed = seal_deterministic(key, b"payload", b"context")
    assert sealed == seal_deterministic(key, b"payload", b"context")
    assert open_deterministic(key, sealed, b"context") == b"payload"
    with pytest.raises(IntegrityError):
        open_deterministic(key, sealed, b"other context")
    with pytest.raises(IntegrityError):
        open_deterministic(key, sealed[:8])
    with pytest.raises(ValueError):
        seal_deterministic(key[:32], b"payload")


def test_a_record_is_compressed_when_that_saves_and_opens_the_same():
    sealer = BlobSealer(b"s" * 32)
    plain = b'{"v":2,"t":"dir","e":[' + b",".join(
        b'["name%d","f",420,1,5,["S","%s","","%s",0,5]]' % (i, b"ab" * 32, b"cd" * 32)
        for i in range(200)) + b"]}"
    blob_id, sealed = sealer.seal(plain)
    assert len(sealed) < len(plain) / 4          # repeated hex ids compress well
    assert sealer.open(blob_id, sealed) == plain
    assert sealer.seal(plain) == (blob_id, sealed)   # the same record is the same blob


def test_a_frame_that_grows_past_the_limit_is_refused(monkeypatch):
    from flud.client.repository import blobs
    from flud.client.repository.blobs import BlobDamaged
    monkeypatch.setattr(blobs, "MAX_RECORD_BYTES", 1000)
    sealer = BlobSealer(b"s" * 32)
    blob_id, sealed = sealer.seal(b"{" + b"x" * 5000 + b"}")
    with pytest.raises(BlobDamaged, match="more than 1000 bytes"):
        sealer.open(blob_id, sealed)
