"""AES-256-SIV through OpenSSL (flud/libcrypto.py, issue 27): the records a
backup seals are byte for byte what pycryptodome sealed before, so every
stored record still opens, and a changed bit never opens."""
import os
import random

import pytest
from Crypto.Cipher import AES

from flud import crypto, libcrypto
from flud.errors import IntegrityError

needs_siv = pytest.mark.skipif(not libcrypto.siv_available(),
                               reason="this libcrypto has no AES-256-SIV")


def _pycryptodome_seal(key, data, associated):
    cipher = AES.new(key, AES.MODE_SIV)
    if associated:
        cipher.update(associated)
    ciphertext, tag = cipher.encrypt_and_digest(data)
    return tag + ciphertext


@needs_siv
@pytest.mark.parametrize("size", [1, 15, 16, 17, 1000, 70_000])
@pytest.mark.parametrize("associated", [b"", b"context"])
def test_openssl_siv_seals_the_bytes_pycryptodome_sealed(size, associated):
    rng = random.Random(size)
    key, data = rng.randbytes(64), rng.randbytes(size)
    sealed = crypto.seal_deterministic(key, data, associated)
    assert sealed == _pycryptodome_seal(key, data, associated)
    assert crypto.open_deterministic(key, sealed, associated) == data
    for flip in (0, 16, len(sealed) - 1):   # the tag, the first and last ciphertext byte
        bad = bytearray(sealed)
        bad[flip] ^= 0x40
        with pytest.raises(IntegrityError):
            crypto.open_deterministic(key, bytes(bad), associated)
    with pytest.raises(IntegrityError):
        crypto.open_deterministic(key, sealed, associated + b"x")


def test_an_empty_record_still_seals_and_opens():
    key = os.urandom(64)
    sealed = crypto.seal_deterministic(key, b"")
    assert sealed == _pycryptodome_seal(key, b"", b"")
    assert crypto.open_deterministic(key, sealed) == b""
