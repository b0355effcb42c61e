"""Claims: space an owner's linked node offers, proven before anyone stores
real data on it (in the manner of Samsara's storage claims; docs/quotas.md).

A node X that holds data for owner O asks O's linked node N to keep a
*claim*: bytes X derives from a secret only X knows and a claim id, so they
are incompressible and N cannot make them up when asked: it must keep them.
X keeps only the id and size, never the bytes: to spot check, X sends
VERIFY(nonce, offset, length) and computes the answer itself from the
secret, BLAKE3(nonce || bytes[offset:offset+length]) (the node's VERIFY
digest, docs/DESIGN.md). A claim counts towards O's credit on X only while
X's last check of it passed.

Pure: bytes in, bytes out (BLAKE3's keyed extendable output, which reads
any range without computing the ones before it).
"""
import os
import random
from dataclasses import dataclass

import blake3

CLAIM_ID_LENGTH = 16
NONCE_LENGTH = 16
# A spot check reads this much of a claim (or the whole, if smaller).
CHECK_SPAN = 64 * 1024
_SECRET_CONTEXT = "flud claims 2026-11 secret v1"
_GENERATE_PIECE = 1024 * 1024


def claim_secret(private_scalar: bytes) -> bytes:
    """The 32-byte key a node derives its claims from: a keyed derivation
    of its private key (nothing more to keep, and it never leaves)."""
    return blake3.blake3(private_scalar, derive_key_context=_SECRET_CONTEXT).digest()


def new_claim_id(rng: random.Random | None = None) -> bytes:
    return (rng.randbytes(CLAIM_ID_LENGTH) if rng is not None else os.urandom(CLAIM_ID_LENGTH))


def claim_bytes(secret: bytes, claim_id: bytes, offset: int, length: int) -> bytes:
    """Bytes [offset, offset+length) of the claim."""
    return blake3.blake3(claim_id, key=secret).digest(length=length, seek=offset)


def claim_content(secret: bytes, claim_id: bytes, size: int) -> tuple[bytes, bytes]:
    """(the claim's bytes, their content key: BLAKE3-256 of them, the key a
    node files them under)."""
    data = bytearray(size)
    hasher = blake3.blake3()
    for start in range(0, size, _GENERATE_PIECE):
        piece = claim_bytes(secret, claim_id, start, min(_GENERATE_PIECE, size - start))
        data[start:start + len(piece)] = piece
        hasher.update(piece)
    return bytes(data), hasher.digest()


@dataclass(frozen=True)
class SpotCheck:
    """One challenge of a claim and the answer only its holder can give."""
    nonce: bytes
    offset: int
    length: int
    expected: bytes


def spot_check(secret: bytes, claim_id: bytes, size: int, rng: random.Random) -> SpotCheck:
    """A random span of the claim, a fresh nonce, and the digest its holder
    must answer with."""
    length = min(CHECK_SPAN, size)
    offset = rng.randrange(0, size - length + 1)
    nonce = rng.randbytes(NONCE_LENGTH)
    expected = blake3.blake3(nonce + claim_bytes(secret, claim_id, offset, length)).digest()
    return SpotCheck(nonce, offset, length, expected)
