"""ShareStore: the node's share store on a local disk.

Standalone shares are files named by their key; archive uploads are appended
to one tar per sender; sqlite indexes both (see layout.py, index.py,
archives.py). Every upload lands in incoming/ first and becomes visible only
after its bytes are fsynced and its index transaction committed, so a commit
that returned survives a crash, and a crash leaves nothing half-visible.

Threads: every method may be called from any thread. One lock guards the
sqlite connection and the renames that must agree with it; a per-owner lock
serialises appends to and compactions of one archive. Lock order: owner lock,
then the store lock, then the capacity ledger's. Hashing, fsync of upload
data and archive copies run outside the store lock.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import threading
from collections.abc import Iterator

from zope.interface import implementer

from flud.storage.archives import STEP_INDEXED, STEP_RENAMED, STEP_SYNCED, ArchiveFiles, FaultHook
from flud.storage.capacity import CapacityLedger, Reservation, ReservationGroup, needs_compaction
from flud.storage.errors import NotFound, StorageError, StoreClosed
from flud.storage.fileio import (STREAMED_MIN, disk_full_as_no_space, drop_cached, fsync_dir,
                            make_dirs_durably, start_writeback, write_all_pieces)
from flud.storage.index import Holding, Index
from flud.storage.interfaces import IShareStore
from flud.storage.layout import Layout, check_or_claim_format
from flud.storage.leases import StoreLeases
from flud.storage.limits import KIND_SHARE
from flud.storage.reader import FileReader, Reader, StreamingFileReader, verify_digest
from flud.storage.recovery import recover
from flud.storage.tarscan import TarMember, member_span
from flud.storage.upload import Upload
from flud.storage.validation import check_key, check_owner, check_range, check_upload, check_upload_key

log = logging.getLogger(__name__)


# An upload past this many unsynced bytes starts their writeback at once.
WRITEBACK_STEP = 8 * 1024 * 1024


def _no_fault(step: str) -> None:
    pass


class _DiskUpload(Upload):
    """Streams into its own file in incoming/."""

    def __init__(self, store: ShareStore, *args: object) -> None:
        super().__init__(*args)
        self._store = store
        # A streamed share's key is known only at commit: its temp file is "streamed.*".
        prefix = self.key.hex()[:16] if self.key is not None else "streamed"
        self.fd, self.path = tempfile.mkstemp(dir=store._layout.incoming, prefix=prefix + ".")
        self._flushed = 0  # bytes already handed to start_writeback

    def _store_pieces(self, views: list[memoryview]) -> None:
        with disk_full_as_no_space("receiving an upload"):
            write_all_pieces(self.fd, views)
        if self._store._durable:
            written = self.received + sum(len(view) for view in views)
            if written - self._flushed >= WRITEBACK_STEP:
                start_writeback(self.fd, self._flushed, written - self._flushed)
                self._flushed = written

    def _publish_share(self, reservation: Reservation) -> list[bytes]:
        return self._store._publish_share(self, reservation)

    def _publish_archive(self, members: list[TarMember], body_length: int, reservation: Reservation) -> list[bytes]:
        return self._store._publish_archive(self, members, body_length, reservation)

    def close_file(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def _discard(self) -> None:
        self.close_file()
        if self.path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
            self.path = None


@implementer(IShareStore)
class ShareStore:
    def __init__(self, root: str | os.PathLike, capacity: int, fsync: bool = True, *, fault_hook: FaultHook | None = None) -> None:
        """Open (creating if new) the store at root and recover from any crash.

        fsync=False skips every fsync (tests only: a crash may then lose data).
        fault_hook(step) is called at each named compaction step (crash tests).
        """
        self._layout = Layout(root)
        self.root = self._layout.root
        self._durable = fsync
        os.makedirs(self._layout.root, exist_ok=True)
        check_or_claim_format(self._layout, fsync)
        for directory in (self._layout.incoming, self._layout.shares, self._layout.archives):
            os.makedirs(directory, exist_ok=True)
        self._layout.make_fan_out(fsync)
        self._fault = fault_hook or _no_fault
        self._index = Index(self._layout.index_file, fsync)
        self._files = ArchiveFiles(self._layout, fsync, self._fault)
        self._lock = threading.Lock()
        self._owner_locks: dict[bytes, threading.Lock] = {}
        self._unlinked: list[bytes] = []  # pending_unlinks rows whose files are gone
        self._closed = False
        try:
            recover(self._layout, self._index, self._files)
            self._ledger = CapacityLedger(capacity, self._index.used_bytes())
            # Owners whose data is in the trash: not served (storage/leases.py).
            self._trashed = self._index.trashed_owners()
            self.leases = StoreLeases(self)
        except BaseException:
            self._index.close()
            raise

    # --- uploads -------------------------------------------------------------

    def open_upload(self, key: bytes | None, owner: bytes, size: int, kind: str = KIND_SHARE,
                    group: ReservationGroup | None = None) -> Upload:
        key, owner = check_upload_key(key, kind), check_owner(owner)
        check_upload(size, kind)
        self._require_open()
        reservation = self._ledger.reserve(size, owner, group)
        try:
            with disk_full_as_no_space("starting an upload"):
                return _DiskUpload(self, key, owner, size, kind, reservation)
        except BaseException:
            reservation.release()
            raise

    def put(self, key: bytes, owner: bytes, data: bytes, kind: str = KIND_SHARE) -> list[bytes]:
        with self.open_upload(key, owner, len(data), kind) as upload:
            upload.write(data)
            return upload.commit()

    def _publish_share(self, upload: _DiskUpload, reservation: Reservation) -> list[bytes]:
        key, owner = upload.key, upload.owner
        if self._durable:
            with disk_full_as_no_space("saving a share"):
                os.fsync(upload.fd)
            if upload.size >= STREAMED_MIN:
                drop_cached(upload.fd)  # clean now: its pages go back to be reused
        upload.close_file()
        final = self._layout.share_path(key)
        with self._locked():
            if self._index.holding(key, owner) is not None:
                return [key]  # already held: the upload is discarded, the reservation released
            length = self._index.share_length(key)
            if length is not None:
                with self._index.transaction():
                    self._index.add_share_owner(key, owner, length)
                    self._index.ensure_lease(owner)
                return [key]
            # Renamed under the lock so a concurrent delete of the same key cannot interleave.
            with disk_full_as_no_space("saving a share"):
                make_dirs_durably(os.path.dirname(final), self._layout.shares, self._durable)
            os.replace(upload.path, final)
            upload.path = None
            try:
                if self._durable:
                    fsync_dir(os.path.dirname(final))
                with self._index.transaction():
                    self._index.add_share(key, upload.size)
                    self._index.add_share_owner(key, owner, upload.size)
                    self._index.ensure_lease(owner)
            except Exception:
                os.unlink(final)
                raise
            reservation.settle(upload.size)
        return [key]

    def _publish_archive(
        self, upload: _DiskUpload, members: list[TarMember], body_length: int, reservation: Reservation
    ) -> list[bytes]:
        owner = upload.owner
        if body_length == 0:
            return []  # a tar of nothing: nothing to append
        with self._owner_lock(owner):
            with self._locked():
                row = self._index.archive(owner)
            committed = row.committed_length if row else 0
            self._files.append(owner, committed, upload.fd, body_length)
            try:
                with self._locked(), self._index.transaction():
                    archive_id = row.id if row else self._index.create_archive(owner)
                    fresh, garbage = {}, 0
                    for m in members:
                        if m.key in fresh or self._index.holding(m.key, owner) is not None:
                            garbage += member_span(m.length)  # the owner has it already
                        else:
                            fresh[m.key] = (m.key, committed + m.data_offset, m.length)
                    self._index.add_members(archive_id, owner, fresh.values())
                    self._index.set_committed_length(archive_id, committed + body_length)
                    self._index.add_garbage(archive_id, garbage)
                    self._index.ensure_lease(owner)
            except Exception:
                self._files.truncate(owner, committed)
                raise
            reservation.settle(body_length)
        return list(dict.fromkeys(m.key for m in members))

    # --- reads ---------------------------------------------------------------

    def _find(self, key: bytes, owner: bytes) -> Holding:
        """Caller holds the lock. Unknown key, non-owner and an owner whose data
        is in the trash look exactly alike."""
        holding = self._index.holding(key, owner)
        if holding is None or owner in self._trashed:
            raise NotFound.for_key()
        return holding

    def size(self, key: bytes, owner: bytes) -> int:
        key, owner = check_key(key), check_owner(owner)
        with self._locked():
            return self._find(key, owner).length

    def open_reader(self, key: bytes, owner: bytes, offset: int = 0, length: int | None = None) -> Reader:
        key, owner = check_key(key), check_owner(owner)
        with self._locked():
            holding = self._find(key, owner)
            length = check_range(holding.length, offset, length)
            # Opened under the lock: the fd then pins bytes that match the offsets read.
            if holding.archive_id is None:
                fd = os.open(self._layout.share_path(key), os.O_RDONLY)
                if length >= STREAMED_MIN:
                    # A range that leaves more behind it: likely a restore's block.
                    ahead = min(length, holding.length - offset - length)
                    return StreamingFileReader(fd, offset, length, ahead)
                return FileReader(fd, offset, length)
            return FileReader(self._files.open_for_read(owner), holding.data_offset + offset, length)

    def verify(self, key: bytes, owner: bytes, nonce: bytes, offset: int, length: int) -> bytes:
        return verify_digest(self.open_reader(key, owner, offset, length), nonce)

    def owners(self, key: bytes) -> set[bytes]:
        key = check_key(key)
        with self._locked():
            return self._index.owners(key)

    def keys(self, owner: bytes) -> list[bytes]:
        owner = check_owner(owner)
        with self._locked():
            return self._index.keys(owner)

    def owner_bytes(self, owner: bytes) -> int:
        """Bytes held for owner (its shares and archive members)."""
        owner = check_owner(owner)
        with self._locked():
            return self._index.owner_bytes(owner)

    def stats(self) -> dict[str, int]:
        """Counts come from sqlite COUNT(*): cheap, but not free on a huge index."""
        with self._locked():
            counts = self._index.counts()
            counts.update(self._index.trash_counts())
        used, reserved = self._ledger.snapshot()
        capacity = self._ledger.capacity
        return {**counts, "bytes_stored": used, "capacity": capacity, "free": max(capacity - used - reserved, 0), "reserved": reserved}

    # --- delete and compaction -----------------------------------------------

    def delete(self, key: bytes, owner: bytes, compact: bool = True) -> None:
        key, owner = check_key(key), check_owner(owner)
        with self._locked():
            holding = self._find(key, owner)
            if holding.archive_id is None:
                self._delete_shares_locked(owner, [(key, holding.length)])
                return
            with self._index.transaction():
                self._index.remove_holding(key, owner)
                row = self._index.add_garbage(holding.archive_id, member_span(holding.length))
        if compact and needs_compaction(row.committed_length, row.garbage_bytes):
            try:
                self.compact(owner)
            except (StorageError, OSError) as exc:  # the delete itself succeeded
                log.warning("compaction of %s's archive failed, will retry on a later delete: %s", owner.hex(), exc)

    def compactions_due(self) -> list[bytes]:
        with self._locked():
            return [row.owner for row in self._index.all_archives()
                    if needs_compaction(row.committed_length, row.garbage_bytes)]

    def _delete_shares_locked(self, owner: bytes, shares: list[tuple[bytes, int]]) -> int:
        """Drop owner from each (key, length); free the shares it was the last
        owner of. Caller holds the lock. Returns the bytes freed."""
        freed: list[tuple[bytes, int]] = []
        with self._index.transaction():
            self._index.forget_unlinks(self._unlinked)
            self._unlinked.clear()
            for key, length in shares:
                self._index.remove_holding(key, owner)
                if not self._index.share_has_owner(key):
                    self._index.remove_share(key)
                    freed.append((key, length))
        total = 0
        for key, length in freed:
            try:
                os.unlink(self._layout.share_path(key))
            except FileNotFoundError:
                pass
            except OSError as exc:  # left in pending_unlinks: retried at the next open
                log.warning("could not remove share file %s: %s", key.hex(), exc)
                continue
            self._unlinked.append(key)
            self._ledger.remove_used(length)
            total += length
        return total

    def compact(self, owner: bytes) -> int:
        """Rewrite owner's archive without garbage; returns the bytes reclaimed.

        Crash-safe: until the index commits the new offsets, the old archive and
        old offsets are the truth and the .compact file is discarded at open;
        from then on, the new offsets are, and open finishes the rename.
        Slow (copies every live member): call it off the reactor thread.
        """
        owner = check_owner(owner)
        with self._owner_lock(owner):
            with self._locked():
                row = self._index.archive(owner)
                if row is None or row.garbage_bytes == 0:
                    return 0
                members = self._index.live_members(row.id)
            new_length, moves = self._files.write_compacted(owner, members)
            with self._locked():
                try:
                    with self._index.transaction():
                        moved = sum(m.span for m in moves if self._index.move_member(row.id, m.key, m.old_offset, m.new_offset))
                        self._index.set_archive_lengths(row.id, new_length, new_length - moved)
                        self._index.record_compaction(row.id)
                except Exception:
                    self._files.discard_compacted(owner)
                    raise
                self._fault(STEP_INDEXED)
                # Under the lock: no reader can pair the new offsets with the old file.
                self._files.swap(owner)
            self._fault(STEP_RENAMED)
            self._files.sync_directory()
            self._fault(STEP_SYNCED)
            with self._locked(), self._index.transaction():
                self._index.clear_compaction(row.id)
            reclaimed = row.committed_length - new_length
            self._ledger.remove_used(reclaimed)
            return reclaimed

    # --- lifecycle -----------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            with contextlib.suppress(StorageError):
                with self._index.transaction():
                    self._index.forget_unlinks(self._unlinked)
            self._index.close()

    def _require_open(self) -> None:
        if self._closed:
            raise StoreClosed("the share store is closed")

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with self._lock:
            self._require_open()
            yield

    def _owner_lock(self, owner: bytes) -> threading.Lock:
        with self._lock:
            return self._owner_locks.setdefault(owner, threading.Lock())
