"""Blobs: the sealed, content-addressed records of a snapshot (docs/snapshots.md).

A blob is a record's bytes sealed deterministically (AES-SIV) under a key
derived from the user secret, and addressed by a keyed BLAKE3 of the sealed
bytes. Equal records are equal blobs with equal ids, so an unchanged
directory is stored once however many snapshots hold it, and nothing but the
key's owner can tell which blobs hold which records. Opening checks the id
first (a damaged or foreign blob is named without decrypting), then the seal.
"""
import json
import zlib

import blake3

from flud.compression import compress_if_worth, decompress_bounded
from flud.crypto import (SIV_KEY_LENGTH, derive_key, open_deterministic, open_sealed,
                         seal_deterministic)
from flud.errors import BadCompressedData, FludError, IntegrityError

BLOB_ID_LENGTH = 32
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
# The largest record: a map page of 4,096 objects with their challenges, or
# an index of 4,096 pages, is a few MB; more is damage or a hostile writer.
MAX_RECORD_BYTES = 64 * 1024 * 1024
PURPOSE_SEAL = "blob-seal-v2"
PURPOSE_ID = "blob-id-v2"


class BlobDamaged(FludError):
    """A blob does not match its address or fails its seal."""

    code = "BLOB_DAMAGED"


class BlobSealer:
    """Seals and opens one user's blobs (the keys come from the user secret)."""

    def __init__(self, secret: bytes):
        self._seal_key = derive_key(secret, PURPOSE_SEAL, SIV_KEY_LENGTH)
        self._id_key = derive_key(secret, PURPOSE_ID)

    def blob_id(self, sealed) -> bytes:
        return blake3.blake3(sealed, key=self._id_key).digest()

    def seal(self, plain) -> tuple:
        """(blob id, sealed bytes) of a record's plain bytes (JSON: it starts
        with '{'), zstd-compressed first when that saves (at a fixed level,
        so an unchanged record is the same blob; a zstd frame's magic number
        tells the two apart when it is opened)."""
        method, stored = compress_if_worth(plain)
        sealed = seal_deterministic(self._seal_key, bytes(stored))
        return self.blob_id(sealed), sealed

    def open(self, blob_id: bytes, sealed) -> bytes:
        """The plain bytes of a blob fetched for blob_id; BlobDamaged if it is
        not that blob (altered, truncated, or sealed under another key)."""
        if self.blob_id(sealed) != blob_id:
            raise BlobDamaged(f"record {blob_id.hex()[:16]} does not match its address: "
                              f"damaged, or not sealed with this key")
        try:
            plain = open_deterministic(self._seal_key, sealed)
        except IntegrityError:
            raise BlobDamaged(f"record {blob_id.hex()[:16]} failed its seal check") from None
        if plain[:4] != ZSTD_MAGIC:
            return plain
        try:
            return decompress_bounded(plain, MAX_RECORD_BYTES)
        except BadCompressedData as err:
            raise BlobDamaged(f"record {blob_id.hex()[:16]}: {err}") from None


def open_json(secret: bytes, purpose: str, blob: bytes):
    """A sealed, compressed JSON record (a root record, a version-1 manifest):
    opened under the key derived for `purpose`."""
    return json.loads(zlib.decompress(open_sealed(derive_key(secret, purpose), blob)))
