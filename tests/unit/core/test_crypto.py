import hashlib
import hmac
import random

import pytest

from flud.crypto import (
    crypt_ctr_in_place,
    KEY_LENGTH,
    PURPOSE_MANIFEST,
    PURPOSE_NAMES,
    SEALED_OVERHEAD,
    IntegrityError,
    content_digest,
    convergent_key,
    decrypt_ctr,
    derive_key,
    encrypt_ctr,
    new_user_secret,
    open_sealed,
    seal,
)
from flud.errors import FludError

SECRET = bytes(range(32))
KEY = bytes(range(100, 132))


@pytest.fixture
def rng():
    return random.Random(1234)


def test_user_secret_is_32_random_bytes():
    assert len(new_user_secret()) == 32
    assert new_user_secret() != new_user_secret()


def test_content_digest_is_sha256():
    assert content_digest(b"abc") == hashlib.sha256(b"abc").digest()
    assert content_digest(memoryview(b"abc")) == content_digest(b"abc")


def test_convergent_key_matches_definition_and_is_per_user():
    digest = content_digest(b"file contents")
    key = convergent_key(SECRET, digest)
    assert key == hmac.new(SECRET, b"flud-convergent-v1" + digest, hashlib.sha256).digest()
    assert len(key) == KEY_LENGTH
    assert convergent_key(SECRET, digest) == key  # same content, same user: dedup
    assert convergent_key(bytes(32), digest) != key  # another user: another key
    assert convergent_key(SECRET, content_digest(b"other")) != key


def test_convergent_key_wants_a_full_digest():
    with pytest.raises(ValueError, match="32 bytes"):
        convergent_key(SECRET, b"short")


def test_ctr_round_trip_and_known_answer(rng):
    data = rng.randbytes(1000)
    ciphertext = encrypt_ctr(KEY, data)
    assert len(ciphertext) == len(data) and ciphertext != data
    assert decrypt_ctr(KEY, ciphertext) == data
    # Counter starts at zero: the first keystream block is AES_K(0^128).
    from Crypto.Cipher import AES

    first_block = AES.new(KEY, AES.MODE_ECB).encrypt(bytes(16))
    assert encrypt_ctr(KEY, bytes(16)) == first_block


def test_ctr_is_deterministic_per_key():
    assert encrypt_ctr(KEY, b"same") == encrypt_ctr(KEY, b"same")


@pytest.mark.parametrize("start", [0, 1, 7, 15, 16, 17, 31, 33, 500, 999])
@pytest.mark.parametrize("length", [0, 1, 5, 16, 17, 100])
def test_ctr_range_decrypt_at_any_offset(rng, start, length):
    data = rng.randbytes(1100)
    ciphertext = encrypt_ctr(KEY, data)
    piece = ciphertext[start : start + length]
    assert decrypt_ctr(KEY, piece, offset=start) == data[start : start + length]
    assert encrypt_ctr(KEY, data[start : start + length], offset=start) == piece


def test_ctr_accepts_memoryview(rng):
    data = rng.randbytes(64)
    assert encrypt_ctr(KEY, memoryview(data)[3:40], offset=3) == encrypt_ctr(KEY, data)[3:40]


@pytest.mark.parametrize("bad_key", [b"", bytes(16), bytes(33)])
def test_ctr_rejects_non_256_bit_keys(bad_key):
    with pytest.raises(ValueError):
        encrypt_ctr(bad_key, b"x")


def test_ctr_rejects_negative_offset():
    with pytest.raises(ValueError):
        decrypt_ctr(KEY, b"x", offset=-1)


def test_seal_round_trip_with_random_nonce():
    blob = seal(KEY, b"manifest", associated=b"v1")
    assert len(blob) == len(b"manifest") + SEALED_OVERHEAD
    assert seal(KEY, b"manifest") != seal(KEY, b"manifest")
    assert open_sealed(KEY, blob, associated=b"v1") == b"manifest"
    assert open_sealed(KEY, seal(KEY, b"")) == b""


@pytest.mark.parametrize("position", [0, 11, 12, -17, -1])
def test_open_sealed_detects_any_flipped_bit(position):
    blob = bytearray(seal(KEY, b"some manifest bytes"))
    blob[position] ^= 0x01
    with pytest.raises(IntegrityError) as info:
        open_sealed(KEY, bytes(blob))
    assert isinstance(info.value, FludError)


def test_open_sealed_detects_wrong_key_associated_data_and_truncation():
    blob = seal(KEY, b"payload", associated=b"a")
    with pytest.raises(IntegrityError):
        open_sealed(bytes(32), blob, associated=b"a")
    with pytest.raises(IntegrityError):
        open_sealed(KEY, blob, associated=b"b")
    with pytest.raises(IntegrityError, match="truncated"):
        open_sealed(KEY, blob[: SEALED_OVERHEAD - 1])
    with pytest.raises(IntegrityError):
        open_sealed(KEY, blob[:-1])


def test_derive_key_per_purpose():
    manifest_key = derive_key(SECRET, PURPOSE_MANIFEST)
    assert len(manifest_key) == KEY_LENGTH
    assert derive_key(SECRET, PURPOSE_MANIFEST) == manifest_key
    assert derive_key(SECRET, PURPOSE_NAMES) != manifest_key
    assert derive_key(bytes(32), PURPOSE_MANIFEST) != manifest_key
    assert manifest_key != SECRET
    with pytest.raises(ValueError):
        derive_key(SECRET, "")


def test_derive_key_is_rfc5869_hkdf_sha256_with_labelled_info():
    # Pinned: changing the derivation would orphan every stored manifest.
    prk = hmac.new(bytes(32), SECRET, hashlib.sha256).digest()
    expected = hmac.new(prk, b"flud-derive-v1:manifest" + b"\x01", hashlib.sha256).digest()
    assert derive_key(SECRET, PURPOSE_MANIFEST) == expected


@pytest.mark.parametrize("offset,length", [(0, 0), (0, 1000), (5, 1000), (16, 33), (1 << 20, 4097)])
def test_crypt_ctr_in_place_matches_encrypt_ctr(offset, length):
    key = bytes(range(32))
    data = random.Random(offset + length).randbytes(length)
    buffer = bytearray(data)
    crypt_ctr_in_place(key, buffer, offset)
    assert bytes(buffer) == encrypt_ctr(key, data, offset)
    crypt_ctr_in_place(key, memoryview(buffer), offset)  # a view works too; twice is identity
    assert bytes(buffer) == data


@pytest.mark.parametrize("offset", [0, 7, (1 << 64) * 16 - 40, (1 << 32) * 16 - 3])
def test_openssls_ctr_is_pycryptodomes_keystream(offset, monkeypatch):
    """Bulk content goes through OpenSSL (twice as fast); the counter carries
    across 32 and 64 bits as pycryptodome's does, and without OpenSSL the
    fallback gives the same bytes."""
    from flud import crypto, libcrypto

    key = bytes(range(1, 33))
    data = random.Random(offset).randbytes(5000)
    fast = bytearray(data)
    crypto.crypt_ctr_in_place(key, fast, offset)
    assert crypto._openssl_ctr() is libcrypto.aes256_ctr_in_place
    monkeypatch.setattr(crypto, "_OPENSSL_CTR", [None])
    slow = bytearray(data)
    crypto.crypt_ctr_in_place(key, slow, offset)
    assert fast == slow == encrypt_ctr(key, data, offset) and fast != bytearray(data)


def test_ctr_is_nist_aes256_ctr_both_ways(monkeypatch):
    """SP 800-38A F.5.5 (CTR-AES256.Encrypt): our counter is the 128-bit
    block counter at offset // 16, so the vector's initial counter block is
    an offset; through OpenSSL and through pycryptodome."""
    from flud import crypto

    key = bytes.fromhex("603deb1015ca71be2b73aef0857d7781""1f352c073b6108d72d9810a30914dff4")
    offset = int("f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff", 16) * 16
    plaintext = bytes.fromhex("6bc1bee22e409f96e93d7e117393172a""ae2d8a571e03ac9c9eb76fac45af8e51")
    expected = bytes.fromhex("601ec313775789a5b7a7f504bbf3d228""f443e3ca4d62b59aca84e990cacaf5c5")
    for fast in (True, False):
        if not fast:
            monkeypatch.setattr(crypto, "_OPENSSL_CTR", [None])
        assert encrypt_ctr(key, plaintext, offset) == expected
        buffer = bytearray(plaintext)
        crypt_ctr_in_place(key, buffer, offset)
        assert bytes(buffer) == expected
        assert encrypt_ctr(key, plaintext[5:], offset + 5) == expected[5:]  # inside a block


def test_crypt_ctr_in_place_refuses_read_only_buffers():
    with pytest.raises(ValueError, match="writable"):
        crypt_ctr_in_place(bytes(32), b"abc")
