"""Typed errors of the share store.

Every error has a short, stable `code` that the node maps to a wire error in
one table; the message is written for the person who reads it in a log or a
client's output. No storage error carries a traceback's worth of internals.
"""

from __future__ import annotations


class StorageError(Exception):
    """Root of every error the store raises on purpose."""

    code: str = "storage_error"


class NotFound(StorageError):
    """Unknown key, or the caller is not one of its owners.

    Both cases share one class and one message so a non-owner cannot learn
    that a key exists. Use `NotFound.for_key()` rather than writing a message.
    """

    code = "not_found"
    MESSAGE = "no such share"

    @classmethod
    def for_key(cls) -> NotFound:
        return cls(cls.MESSAGE)


class HashMismatch(StorageError):
    """Uploaded bytes do not match their key, or not as many arrived as declared."""

    code = "hash_mismatch"


class NoSpace(StorageError):
    """The store's capacity is reached, or the disk itself is full (ENOSPC/EDQUOT)."""

    code = "no_space"


class UploadLimit(StorageError):
    """A new upload would take its owner (or its group: a connection) past the
    bytes or uploads it may hold in unfinished uploads. Not the node being
    full: what the sender already holds open is what stands in the way."""

    code = "upload_limit"


class BadKey(StorageError):
    """A key or owner id that is not exactly 32 bytes."""

    code = "bad_key"


class BadRange(StorageError):
    """An offset, length or size outside what the share holds."""

    code = "bad_range"


class TooLarge(StorageError):
    """More bytes written than declared, or a declared size over the limit."""

    code = "too_large"


class BadArchive(StorageError):
    """An archive upload that is not a tar of regular members named by their hash."""

    code = "bad_archive"


class UploadClosed(StorageError):
    """write/commit on an upload that was already committed or aborted."""

    code = "upload_closed"


class StoreClosed(StorageError):
    """A call on a store after close()."""

    code = "store_closed"


class FormatError(StorageError):
    """The store directory holds a format or schema this code does not know.

    Local only: raised when opening a store, never sent to a peer.
    """

    code = "unsupported_format"
