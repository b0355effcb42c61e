"""Content encryption: convergent keys, AES-256-CTR for content, AES-256-GCM for
small sealed records (manifests, names), HKDF for purpose keys.

Content is encrypted with a key derived from the user's secret and the
plaintext digest (convergent, per user): the same file backed up twice by one
user gives the same ciphertext and dedups; without the user's secret nobody
can compute the key, so nobody can confirm that a user stores a known file.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import secrets

import sys

import blake3


def _pycryptodome_on_ctypes() -> None:
    """pycryptodome binds its C parts with cffi where cffi is installed
    (cryptography brings it), and cffi's inline mode parses every module's
    C declarations with pycparser at import: ~100 ms of every command's
    start-up (profiled, issue 27), against ~20 ms through ctypes, which it
    uses where cffi cannot be imported. It picks once, at its first import:
    cffi is hidden for that moment only."""
    if "Crypto.Util._raw_api" in sys.modules:
        return
    saved = sys.modules.get("cffi")
    sys.modules["cffi"] = None   # `from cffi import FFI` raises ImportError
    try:
        import Crypto.Util._raw_api  # noqa: F401
    finally:
        if saved is None:
            del sys.modules["cffi"]
        else:
            sys.modules["cffi"] = saved


_pycryptodome_on_ctypes()

from Crypto.Cipher import AES  # noqa: E402
from Crypto.Hash import SHA256  # noqa: E402
from Crypto.Protocol.KDF import HKDF  # noqa: E402

from flud import libcrypto  # noqa: E402
from flud.errors import IntegrityError  # noqa: E402

__all__ = [
    "IntegrityError",
    "KEY_LENGTH",
    "DIGEST_LENGTH",
    "USER_SECRET_LENGTH",
    "PURPOSE_MANIFEST",
    "PURPOSE_NAMES",
    "new_user_secret",
    "content_digest",
    "convergent_key",
    "encrypt_ctr",
    "decrypt_ctr",
    "seal",
    "open_sealed",
    "SEALED_OVERHEAD",
    "derive_key",
]

KEY_LENGTH = 32
DIGEST_LENGTH = 32
USER_SECRET_LENGTH = 32
AES_BLOCK = 16
GCM_NONCE_LENGTH = 12
GCM_TAG_LENGTH = 16
SEALED_OVERHEAD = GCM_NONCE_LENGTH + GCM_TAG_LENGTH  # bytes seal() adds
CONVERGENT_LABEL = b"flud-convergent-v1"
# A large file's segments: their digest is BLAKE3, not SHA-256 (see
# segment_convergence); another label, so the two kinds of key never meet.
SEGMENT_CONVERGENT_LABEL = b"flud-convergent-v2"
DERIVE_LABEL = b"flud-derive-v1:"
PURPOSE_MANIFEST = "manifest"
PURPOSE_NAMES = "names"
# CTR with an all-zero 128-bit counter start: safe only because every content
# key encrypts exactly one plaintext (the key is a function of that plaintext).
_CTR_NONCE = b""


def new_user_secret() -> bytes:
    """32 random bytes, made once at client init; keep it with the exported key."""
    return secrets.token_bytes(USER_SECRET_LENGTH)


def content_digest(data: bytes | memoryview) -> bytes:
    """SHA-256 of the plaintext.

    Input of convergent_key(); it is also stored (encrypted) in the manifest
    and checked after a restore, so a restored file is known to be the
    original, not just something that decrypted.
    """
    return hashlib.sha256(data).digest()


def convergent_key(user_secret: bytes, plaintext_digest: bytes) -> bytes:
    """HMAC-SHA256(user_secret, label + digest): same content and user, same key."""
    if len(plaintext_digest) != DIGEST_LENGTH:
        raise ValueError(f"plaintext digest must be {DIGEST_LENGTH} bytes, got {len(plaintext_digest)}")
    return hmac.new(user_secret, CONVERGENT_LABEL + plaintext_digest, hashlib.sha256).digest()


def file_convergence(secret: bytes, data) -> tuple[bytes, bytes]:
    """(digest, key) of a small file or a bundle: content_digest, convergent_key."""
    digest = content_digest(data)
    return digest, convergent_key(secret, digest)


def segment_convergence(secret: bytes, data) -> tuple[bytes, bytes]:
    """(digest, key) of a large file's segment: BLAKE3 of the plaintext, then
    HMAC-SHA256(secret, label + digest).

    The digest is on one file's serial path, once per segment: BLAKE3 takes
    0.3 ms per 2 MiB here against SHA-256's 1.2 ms. Nothing recomputes it at
    restore (each block has its own BLAKE3), so it is not in the manifest's
    format: segments stored with SHA-256 digests restore as before, and only
    dedup between a segment stored before and the same bytes now is lost."""
    digest = blake3.blake3(data).digest()
    return digest, segment_key(secret, digest)


def segment_key(secret: bytes, digest: bytes) -> bytes:
    """A large file's segment key from its plaintext's BLAKE3 digest (made
    piece by piece where the plaintext is not in one buffer)."""
    return hmac.new(secret, SEGMENT_CONVERGENT_LABEL + digest, hashlib.sha256).digest()


def _check_key(key: bytes) -> None:
    if len(key) != KEY_LENGTH:
        raise ValueError(f"AES-256 key must be {KEY_LENGTH} bytes, got {len(key)}")


def encrypt_ctr(key: bytes, data: bytes | memoryview, offset: int = 0) -> bytes:
    """AES-256-CTR of data that sits at byte `offset` of the whole plaintext.

    offset lets a caller work on any byte range: the counter starts at the
    block holding `offset` and the keystream bytes before it are skipped.
    """
    out = bytearray(data)  # a copy, then in place: still faster (OpenSSL)
    crypt_ctr_in_place(key, out, offset)
    return bytes(out)


def decrypt_ctr(key: bytes, data: bytes | memoryview, offset: int = 0) -> bytes:
    """Inverse of encrypt_ctr (CTR is symmetric); `offset` as there."""
    return encrypt_ctr(key, data, offset)


def crypt_ctr_in_place(key: bytes, buffer, offset: int = 0) -> None:
    """encrypt_ctr / decrypt_ctr into the writable `buffer` itself: no second
    buffer of the same size (a restore decrypts each share where it landed)."""
    _check_key(key)
    if offset < 0:
        raise ValueError(f"offset must be >= 0, got {offset}")
    view = memoryview(buffer).cast("B")
    if view.readonly:
        raise ValueError("crypt_ctr_in_place needs a writable buffer")
    if not len(view):
        return
    counter, skip = divmod(offset, AES_BLOCK)
    openssl_ctr = _openssl_ctr()
    if openssl_ctr is not None:  # the same keystream, twice as fast
        openssl_ctr(key, view, counter, skip)
        return
    cipher = AES.new(key, AES.MODE_CTR, nonce=_CTR_NONCE, initial_value=counter)
    if skip:
        cipher.encrypt(bytes(skip))
    cipher.encrypt(view, output=view)


_OPENSSL_CTR = []


def _openssl_ctr():
    """flud.libcrypto's AES-256-CTR, or None where OpenSSL 3 is missing."""
    if not _OPENSSL_CTR:
        try:
            libcrypto._lib()
            _OPENSSL_CTR.append(libcrypto.aes256_ctr_in_place)
        except libcrypto.LibcryptoUnavailable:
            _OPENSSL_CTR.append(None)
    return _OPENSSL_CTR[0]


def seal(key: bytes, plaintext: bytes, associated: bytes = b"") -> bytes:
    """AES-256-GCM: nonce (12, random) | ciphertext | tag (16).

    A random nonce is fine here: sealed records are few per key, far from the
    2**32 where random 96-bit nonces start to risk a collision.
    """
    nonce = secrets.token_bytes(GCM_NONCE_LENGTH)
    ciphertext, tag = _gcm(key, nonce, associated).encrypt_and_digest(plaintext)
    return nonce + ciphertext + tag


def open_sealed(key: bytes, blob: bytes, associated: bytes = b"") -> bytes:
    """Inverse of seal(); IntegrityError if anything was changed or the key is wrong."""
    _check_sealed_length(blob)
    cipher = _gcm(key, bytes(blob[:GCM_NONCE_LENGTH]), associated)
    try:
        return cipher.decrypt_and_verify(blob[GCM_NONCE_LENGTH:-GCM_TAG_LENGTH],
                                         blob[-GCM_TAG_LENGTH:])
    except ValueError:
        raise IntegrityError(_ALTERED) from None


_ALTERED = "sealed record failed its integrity check: it was altered, or the key is wrong"


def _gcm(key: bytes, nonce: bytes, associated: bytes):
    _check_key(key)
    cipher = AES.new(key, AES.MODE_GCM, nonce=nonce, mac_len=GCM_TAG_LENGTH)
    cipher.update(associated)
    return cipher


def _check_sealed_length(blob) -> None:
    if len(blob) < SEALED_OVERHEAD:
        raise IntegrityError(f"sealed record is {len(blob)} bytes, shorter than its own header: truncated")


def derive_key(user_secret: bytes, purpose: str, length: int = KEY_LENGTH) -> bytes:
    """HKDF-SHA256 key for one purpose (PURPOSE_MANIFEST, PURPOSE_NAMES, ...).

    Different purposes give independent keys from the one user secret.
    """
    if not purpose:
        raise ValueError("derive_key needs a non-empty purpose")
    return _derived(bytes(user_secret), purpose, length)


@functools.lru_cache(maxsize=64)
def _derived(user_secret: bytes, purpose: str, length: int) -> bytes:
    """derive_key's HKDF, kept for the few (secret, purpose) pairs a process
    uses: every root a node answers with was opened under a key derived
    anew (HKDF-SHA256 in Python: a ninth of a lifecycle simulation's time,
    profiled). The process holds the secret itself anyway."""
    return HKDF(user_secret, length, None, SHA256, context=DERIVE_LABEL + purpose.encode("utf-8"))


# ---- deterministic sealing (AES-SIV) ---------------------------------------
#
# A record that must be the same bytes every time it is written (a snapshot's
# directory record: unchanged, it is stored once) cannot take a random nonce.
# AES-SIV (RFC 5297) derives its IV from the plaintext: equal plaintexts seal
# equal, and a repeated plaintext reveals only that it repeats, which is the
# point. It takes two AES-256 keys (64 bytes).

SIV_KEY_LENGTH = 64
SIV_TAG_LENGTH = 16


def _openssl_siv() -> bool:
    if not _OPENSSL_SIV:
        _OPENSSL_SIV.append(libcrypto.siv_available())
    return _OPENSSL_SIV[0]


_OPENSSL_SIV = []   # OpenSSL's AES-SIV: the same bytes as pycryptodome's, ~9x faster a record


def seal_deterministic(key: bytes, plaintext, associated: bytes = b"") -> bytes:
    """AES-256-SIV: tag (16) | ciphertext; the same input gives the same bytes."""
    plaintext = bytes(plaintext)
    if plaintext and len(key) == SIV_KEY_LENGTH and _openssl_siv():
        tag, ciphertext = libcrypto.aes256_siv(key, plaintext, associated)
        return tag + ciphertext
    cipher = _siv(key, associated)
    ciphertext, tag = cipher.encrypt_and_digest(plaintext)
    return tag + ciphertext


def open_deterministic(key: bytes, blob, associated: bytes = b"") -> bytes:
    """Inverse of seal_deterministic(); IntegrityError if anything changed."""
    if len(blob) < SIV_TAG_LENGTH:
        raise IntegrityError(f"sealed record is {len(blob)} bytes, shorter than its own "
                             f"header: truncated")
    if len(blob) > SIV_TAG_LENGTH and len(key) == SIV_KEY_LENGTH and _openssl_siv():
        plain = libcrypto.aes256_siv(key, bytes(blob[SIV_TAG_LENGTH:]), associated,
                                     bytes(blob[:SIV_TAG_LENGTH]))
        if plain is None:
            raise IntegrityError(_ALTERED)
        return plain
    cipher = _siv(key, associated)
    try:
        return cipher.decrypt_and_verify(bytes(blob[SIV_TAG_LENGTH:]), bytes(blob[:SIV_TAG_LENGTH]))
    except ValueError:
        raise IntegrityError(_ALTERED) from None


def _siv(key: bytes, associated: bytes):
    if len(key) != SIV_KEY_LENGTH:
        raise ValueError(f"an AES-SIV key is {SIV_KEY_LENGTH} bytes, not {len(key)}")
    cipher = AES.new(key, AES.MODE_SIV)
    if associated:
        cipher.update(associated)
    return cipher
