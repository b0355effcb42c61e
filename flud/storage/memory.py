"""MemoryShareStore: the share store's semantics without a disk, for fast tests.

Same contract as the disk ShareStore (tests/contract runs both): the same
validation, capacity accounting, owner isolation, archive appends, garbage
accounting and compaction. Archives are bytearrays that only grow, until a
compaction replaces them with a new bytearray (readers keep the old one).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from zope.interface import implementer

from flud.storage.capacity import CapacityLedger, Reservation, ReservationGroup, needs_compaction
from flud.storage.errors import NotFound, StoreClosed
from flud.storage.interfaces import IShareStore
from flud.storage.limits import KIND_SHARE
from flud.storage.reader import BytesReader, Reader, verify_digest
from flud.storage.tarscan import TAR_BLOCK, TarMember, member_span
from flud.storage.upload import Upload
from flud.storage.validation import check_key, check_owner, check_range, check_upload, check_upload_key


@dataclass
class _Place:
    length: int
    archive_offset: int | None = None  # None: the standalone share


@dataclass
class _Archive:
    data: bytearray = field(default_factory=bytearray)
    garbage: int = 0


class _MemoryUpload(Upload):
    def __init__(self, store: MemoryShareStore, *args: object) -> None:
        super().__init__(*args)
        self._store = store
        self._buffer = bytearray()

    def _store_pieces(self, views: list[memoryview]) -> None:
        for view in views:
            self._buffer += view

    def _publish_share(self, reservation: Reservation) -> list[bytes]:
        return self._store._publish_share(self.key, self.owner, bytes(self._buffer), reservation)

    def _publish_archive(self, members: list[TarMember], body_length: int, reservation: Reservation) -> list[bytes]:
        body = memoryview(self._buffer)[:body_length]
        return self._store._publish_archive(self.owner, body, members, reservation)

    def _discard(self) -> None:
        self._buffer = bytearray()


def unique_keys(members: list[TarMember]) -> list[bytes]:
    return list(dict.fromkeys(member.key for member in members))


@implementer(IShareStore)
class MemoryShareStore:
    def __init__(self, capacity: int) -> None:
        self._lock = threading.RLock()  # delete -> compact re-enters
        self._ledger = CapacityLedger(capacity)
        self._shares: dict[bytes, bytes] = {}
        self._places: dict[tuple[bytes, bytes], _Place] = {}
        self._archives: dict[bytes, _Archive] = {}
        self._closed = False

    def open_upload(self, key: bytes | None, owner: bytes, size: int, kind: str = KIND_SHARE,
                    group: ReservationGroup | None = None) -> Upload:
        key, owner = check_upload_key(key, kind), check_owner(owner)
        check_upload(size, kind)
        self._require_open()
        return _MemoryUpload(self, key, owner, size, kind, self._ledger.reserve(size, owner, group))

    def put(self, key: bytes, owner: bytes, data: bytes, kind: str = KIND_SHARE) -> list[bytes]:
        with self.open_upload(key, owner, len(data), kind) as upload:
            upload.write(data)
            return upload.commit()

    def _publish_share(self, key: bytes, owner: bytes, data: bytes, reservation: Reservation) -> list[bytes]:
        with self._lock:
            self._require_open()
            if (key, owner) not in self._places:
                stored = 0
                if key not in self._shares:
                    self._shares[key] = data
                    stored = len(data)
                self._places[(key, owner)] = _Place(len(data))
                reservation.settle(stored)
        return [key]

    def _publish_archive(
        self, owner: bytes, body: memoryview, members: list[TarMember], reservation: Reservation
    ) -> list[bytes]:
        if not body:
            return []  # a tar of nothing: nothing to append
        with self._lock:
            self._require_open()
            archive = self._archives.setdefault(owner, _Archive())
            base = len(archive.data)
            archive.data += body
            for member in members:
                if (member.key, owner) in self._places:
                    archive.garbage += member_span(member.length)
                else:
                    self._places[(member.key, owner)] = _Place(member.length, base + member.data_offset)
            reservation.settle(len(body))
        return unique_keys(members)

    def _find(self, key: bytes, owner: bytes) -> _Place:
        key, owner = check_key(key), check_owner(owner)
        self._require_open()
        place = self._places.get((key, owner))
        if place is None:
            raise NotFound.for_key()
        return place

    def size(self, key: bytes, owner: bytes) -> int:
        with self._lock:
            return self._find(key, owner).length

    def open_reader(self, key: bytes, owner: bytes, offset: int = 0, length: int | None = None) -> Reader:
        with self._lock:
            place = self._find(key, owner)
            length = check_range(place.length, offset, length)
            if place.archive_offset is None:
                return BytesReader(self._shares[key], offset, length)
            return BytesReader(self._archives[owner].data, place.archive_offset + offset, length)

    def verify(self, key: bytes, owner: bytes, nonce: bytes, offset: int, length: int) -> bytes:
        return verify_digest(self.open_reader(key, owner, offset, length), nonce)

    def delete(self, key: bytes, owner: bytes, compact: bool = True) -> None:
        with self._lock:
            place = self._find(key, owner)
            del self._places[(key, owner)]
            if place.archive_offset is None:
                if not self._share_holders(key):
                    del self._shares[key]
                    self._ledger.remove_used(place.length)
                return
            archive = self._archives[owner]
            archive.garbage += member_span(place.length)
            if compact and needs_compaction(len(archive.data), archive.garbage):
                self.compact(owner)

    def compactions_due(self) -> list[bytes]:
        with self._lock:
            return [owner for owner, archive in self._archives.items()
                    if needs_compaction(len(archive.data), archive.garbage)]

    def _share_holders(self, key: bytes) -> list[bytes]:
        return [o for (k, o), p in self._places.items() if k == key and p.archive_offset is None]

    def owners(self, key: bytes) -> set[bytes]:
        key = check_key(key)
        with self._lock:
            return {o for (k, o) in self._places if k == key}

    def keys(self, owner: bytes) -> list[bytes]:
        owner = check_owner(owner)
        with self._lock:
            return sorted(k for (k, o) in self._places if o == owner)

    def owner_bytes(self, owner: bytes) -> int:
        owner = check_owner(owner)
        with self._lock:
            return sum(p.length for (k, o), p in self._places.items() if o == owner)

    def compact(self, owner: bytes) -> int:
        owner = check_owner(owner)
        with self._lock:
            self._require_open()
            archive = self._archives.get(owner)
            if archive is None or archive.garbage == 0:
                return 0
            live = sorted(
                ((key, place) for (key, o), place in self._places.items() if o == owner and place.archive_offset is not None),
                key=lambda item: item[1].archive_offset,
            )
            new = bytearray()
            for _key, place in live:
                header = place.archive_offset - TAR_BLOCK
                new_header = len(new)
                new += archive.data[header : header + member_span(place.length)]
                place.archive_offset = new_header + TAR_BLOCK
            reclaimed = len(archive.data) - len(new)
            archive.data, archive.garbage = new, 0  # a new buffer: open readers keep the old one
            self._ledger.remove_used(reclaimed)
            return reclaimed

    def stats(self) -> dict[str, int]:
        with self._lock:
            used, reserved = self._ledger.snapshot()
            return {
                "shares": len(self._shares),
                "members": sum(1 for p in self._places.values() if p.archive_offset is not None),
                "bytes_stored": used,
                "capacity": self._ledger.capacity,
                "free": max(self._ledger.capacity - used - reserved, 0),
                "reserved": reserved,
                "garbage_bytes": sum(a.garbage for a in self._archives.values()),
                "archives": len(self._archives),
            }

    def close(self) -> None:
        self._closed = True

    def _require_open(self) -> None:
        if self._closed:
            raise StoreClosed("the share store is closed")
