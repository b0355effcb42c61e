"""Argument checks shared by both store implementations, so both reject alike."""

from __future__ import annotations

from flud.storage.errors import BadKey, BadRange, TooLarge
from flud.storage.limits import (
    KEY_LENGTH,
    KIND_ARCHIVE,
    KIND_STREAMED_SHARE,
    KINDS,
    MAX_ARCHIVE_UPLOAD,
    MAX_SHARE_SIZE,
    OWNER_LENGTH,
)


def check_key(key: bytes) -> bytes:
    if not isinstance(key, (bytes, bytearray)) or len(key) != KEY_LENGTH:
        length = len(key) if isinstance(key, (bytes, bytearray)) else type(key).__name__
        raise BadKey(f"a key is exactly {KEY_LENGTH} bytes (a BLAKE3-256 digest), got {length}")
    return bytes(key)


def check_owner(owner: bytes) -> bytes:
    if not isinstance(owner, (bytes, bytearray)) or len(owner) != OWNER_LENGTH:
        length = len(owner) if isinstance(owner, (bytes, bytearray)) else type(owner).__name__
        raise BadKey(f"an owner id is exactly {OWNER_LENGTH} bytes, got {length}")
    return bytes(owner)


def check_upload_key(key: bytes | None, kind: str) -> bytes | None:
    """A streamed share's key comes after its data, so it is opened with None."""
    if kind != KIND_STREAMED_SHARE:
        return check_key(key)
    if key is not None:
        raise ValueError("a streamed share's key follows its data: open it with key None")
    return None


def check_upload(size: int, kind: str) -> None:
    """Kind is validated by the wire codec, so a bad one here is a programming error."""
    if kind not in KINDS:
        raise ValueError(f"upload kind must be one of {KINDS}, not {kind!r}")
    if size < 0:
        raise BadRange(f"an upload size cannot be negative ({size})")
    limit = MAX_ARCHIVE_UPLOAD if kind == KIND_ARCHIVE else MAX_SHARE_SIZE
    if size > limit:
        raise TooLarge(f"a {kind} upload may be at most {limit} bytes, this one declares {size}")


def check_range(total: int, offset: int, length: int | None) -> int:
    """Returns the effective length of [offset, offset+length) within `total` bytes."""
    if offset < 0 or offset > total:
        raise BadRange(f"offset {offset} is outside the share's {total} bytes")
    if length is None:
        return total - offset
    if length < 0 or offset + length > total:
        raise BadRange(f"range {offset}+{length} runs past the end of the share's {total} bytes")
    return length
