"""The share store's contract, implemented by ShareStore (disk) and MemoryShareStore.

Keys are 32-byte BLAKE3-256 digests of the bytes they name; owners are 32-byte
ids. Only an owner may read, verify or delete a key: anyone else gets NotFound,
exactly as for a key that does not exist. Every method is thread-safe.
tests/contract/test_share_store.py runs one suite against both implementations.
"""

from __future__ import annotations

from zope.interface import Attribute, Interface


class IReader(Interface):
    """A byte range of one stored share or archive member. Context manager."""

    remaining = Attribute("bytes left in the range")

    def read(n=-1):
        """Up to n bytes (all remaining if n < 0); b"" once the range is exhausted."""

    def close():
        """Release the file handle; idempotent."""


class IUpload(Interface):
    """An upload in progress: OPEN -> COMMITTED | ABORTED. Any error aborts it.

    As a context manager it aborts on exit unless committed.
    """

    def write(chunk):
        """Append bytes (bytes or memoryview). TooLarge past the declared size;
        BadArchive as soon as an archive's bytes stop being an acceptable tar;
        NoSpace if the disk is full."""

    def write_pieces(pieces):
        """write() of several buffers in order, as one write to the disk."""

    def commit():
        """Check size and BLAKE3 against the key (HashMismatch; for a streamed
        share, the key its data ended with) and, for an archive,
        every member (BadArchive), make it visible durably, return the keys
        stored: [key] for a share, the member keys in tar order for an archive.
        UploadClosed if already committed or aborted."""

    def abort():
        """Discard the bytes and release the reservation; no-op once finished."""


class IShareStore(Interface):
    def open_upload(key, owner, size, kind="share", group=None):
        """Start an upload of `size` bytes; kind "share", "archive" or "streamed share".

        BadKey (key or owner not 32 bytes), TooLarge (size over MAX_SHARE_SIZE,
        or MAX_ARCHIVE_UPLOAD for an archive), NoSpace (capacity; `size` bytes
        are reserved until commit or abort), UploadLimit (the owner's open
        reservations would pass owner_reserve_limit(capacity), or those of
        `group`, a capacity.ReservationGroup, its bounds). Returns an IUpload.

        A share whose key exists already only gains the owner. An archive is a
        ustar/GNU tar whose members are named by the hex BLAKE3 of their data;
        they are appended to the owner's archive and become readable by their
        own keys. Members the owner already holds are skipped (stored as garbage).

        A "streamed share" is opened with key None: its data is `size` bytes of
        share then its 32-byte key, which is not stored. Committed, it is a
        share of that key like any other. (Its sender only knows the key once
        it has sent the share.)
        """

    def put(key, owner, data, kind="share"):
        """open_upload + write + commit, for data already in memory."""

    def size(key, owner):
        """Length of the stored bytes. NotFound."""

    def open_reader(key, owner, offset=0, length=None):
        """An IReader over [offset, offset+length) (length None: to the end).
        NotFound; BadRange if the range leaves the share."""

    def verify(key, owner, nonce, offset, length):
        """BLAKE3(nonce || bytes[offset:offset+length]).digest(). NotFound, BadRange."""

    def delete(key, owner, compact=True):
        """Drop owner's ownership. The last owner's delete frees a share's space;
        an archive member becomes garbage, and (compact=True) the archive is
        compacted when its garbage passes COMPACT_GARBAGE_RATIO (and it is over
        COMPACT_MIN_BYTES). compact=False leaves that to the caller
        (compactions_due): a node compacts once a burst of DELETEs is over."""

    def compactions_due():
        """Owners whose archive is past the compaction threshold."""

    def owners(key):
        """Set of owner ids holding key (for tests and stats)."""

    def keys(owner):
        """Sorted list of keys owner holds."""

    def owner_bytes(owner):
        """Bytes of data held for owner (its shares and archive members):
        what a node's quota counts (docs/quotas.md)."""

    def stats():
        """Dict: shares, members, bytes_stored, capacity, free, reserved,
        garbage_bytes, archives (the disk store adds leases, trashed_owners
        and trashed_bytes: storage/leases.py)."""

    def compact(owner):
        """Rewrite owner's archive without its garbage; returns bytes reclaimed."""

    def close():
        """Release the store's resources; later calls raise StoreClosed."""
