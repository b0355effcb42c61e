"""A small file's stored bytes, both ways: compressed when that saves enough
(flud/compression.py), then encrypted with its convergent key.

The key and the content id come from the plaintext's digest, so identical
files deduplicate whether or not they were compressed; the record says
whether they were (SmallContent.method), since the ciphertexts differ.
"""
from flud.compression import check_method, compress_if_worth, decompress
from flud.crypto import content_digest, convergent_key, crypt_ctr_in_place, decrypt_ctr
from flud.errors import BadCompressedData, FludError


class ContentCheckFailed(FludError):
    """Bytes fetched for a file are not its content: they do not decompress,
    or their plaintext does not match the file's convergent key."""

    code = "CONTENT_CHECK"


def seal_small(key: bytes, data: bytearray):
    """`data` (a file's plaintext) becomes the bytes to store, in place:
    compressed if worth it, encrypted with `key`. Returns the compression
    method (None: stored as it is). In place, so a worker holds the file and
    its compressed copy at most, never a third buffer."""
    method, stored = compress_if_worth(data)
    if method is not None:
        data[:len(stored)] = stored
        del data[len(stored):]
    crypt_ctr_in_place(key, data)
    return method


def open_small(secret: bytes, content, ciphertext) -> bytes:
    """The plaintext of a SmallContent from its stored bytes: decrypted,
    decompressed if the record says so, checked against the convergent key.
    ContentCheckFailed if the bytes are wrong; UnknownCompression (before
    anything is decrypted) if the record names a method this flud lacks."""
    check_method(content.method)
    key = bytes.fromhex(content.key)
    plain = decrypt_ctr(key, ciphertext)
    if content.method is not None:
        try:
            plain = decompress(content.method, plain, content.size)
        except BadCompressedData as err:
            raise ContentCheckFailed(str(err)) from None
    if convergent_key(secret, content_digest(plain)) != key:
        raise ContentCheckFailed("the content does not match its key")
    return plain
