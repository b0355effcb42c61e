"""Capacity accounting: bytes stored plus bytes promised to uploads in flight.

An upload reserves its declared size when it opens, so two uploads cannot both
be promised the last free bytes; commit turns the reservation into the bytes
actually stored, abort gives it back.

A promise costs its sender nothing until it sends, so what one party may hold
in promises is bounded (storage/limits.py says why these numbers): per owner,
a share of the capacity; per group, which the node makes one per connection,
a fixed number of bytes and uploads. The store knows nothing of what a group
stands for.
"""

from __future__ import annotations

import threading

from flud.storage.errors import NoSpace, UploadLimit
from flud.storage.limits import (COMPACT_GARBAGE_RATIO, COMPACT_MIN_BYTES, MAX_GROUP_RESERVED,
                            MAX_GROUP_UPLOADS, OWNER_RESERVED_DIVISOR)


def owner_reserve_limit(capacity: int) -> int:
    """Bytes one owner's unfinished uploads may hold on a node of `capacity`."""
    return max(capacity // OWNER_RESERVED_DIVISOR, MAX_GROUP_RESERVED)


class ReservationGroup:
    """Reservations counted together against bounds of their own, beside
    their owner's. Its counters change only under its ledger's lock."""

    def __init__(self, max_bytes: int = MAX_GROUP_RESERVED, max_uploads: int = MAX_GROUP_UPLOADS,
                 name: str = "this group") -> None:
        self.max_bytes = max_bytes
        self.max_uploads = max_uploads
        self.name = name  # for messages: "this connection"
        self.reserved = 0
        self.uploads = 0


class CapacityLedger:
    def __init__(self, capacity: int, used: int = 0, owner_limit: int | None = None) -> None:
        if capacity < 0:
            raise ValueError(f"capacity cannot be negative ({capacity})")
        self.capacity = capacity
        self.owner_limit = owner_reserve_limit(capacity) if owner_limit is None else owner_limit
        self._used = used
        self._reserved = 0
        self._by_owner: dict[bytes, int] = {}  # owners with reservations open: bytes
        self._lock = threading.Lock()  # a leaf lock: nothing is called while holding it

    def reserve(self, size: int, owner: bytes | None = None,
                group: ReservationGroup | None = None) -> Reservation:
        """NoSpace if the node cannot promise `size` more bytes; UploadLimit if
        the owner or the group already holds as much as it may."""
        with self._lock:
            free = self.capacity - self._used - self._reserved
            if size > free:
                raise NoSpace(f"this node is full: {max(free, 0)} bytes free, the upload needs {size}")
            held = self._by_owner.get(owner, 0)
            if owner is not None and held + size > self.owner_limit:
                raise UploadLimit(
                    f"you already have {held} bytes in unfinished uploads on this node and one "
                    f"sender may hold at most {self.owner_limit} at once; this upload needs {size} "
                    f"more: finish or cancel some first")
            if group is not None:
                self._check_group(group, size)
                group.reserved += size
                group.uploads += 1
            if owner is not None and size:
                self._by_owner[owner] = held + size
            self._reserved += size
        return Reservation(self, size, owner, group)

    @staticmethod
    def _check_group(group: ReservationGroup, size: int) -> None:
        if group.uploads >= group.max_uploads or group.reserved + size > group.max_bytes:
            raise UploadLimit(
                f"{group.name} already has {group.uploads} unfinished uploads holding "
                f"{group.reserved} bytes, and may hold at most {group.max_uploads} uploads and "
                f"{group.max_bytes} bytes at once (this upload needs {size}): finish or cancel "
                f"some first")

    def remove_used(self, size: int) -> None:
        with self._lock:
            self._used -= size

    def snapshot(self) -> tuple[int, int]:
        """(used, reserved)."""
        with self._lock:
            return self._used, self._reserved

    def _settle(self, reservation: Reservation, stored: int) -> None:
        size, owner, group = reservation.size, reservation.owner, reservation.group
        with self._lock:
            self._reserved -= size
            self._used += stored
            if owner is not None and size:
                left = self._by_owner[owner] - size
                if left:
                    self._by_owner[owner] = left
                else:  # the map holds only owners with something open
                    del self._by_owner[owner]
            if group is not None:
                group.reserved -= size
                group.uploads -= 1


class Reservation:
    """Settled or released exactly once; later calls do nothing."""

    def __init__(self, ledger: CapacityLedger, size: int, owner: bytes | None = None,
                 group: ReservationGroup | None = None) -> None:
        self._ledger = ledger
        self.size = size
        self.owner = owner
        self.group = group
        self._open = True

    def settle(self, stored: int) -> None:
        """The upload is committed and now occupies `stored` bytes."""
        if self._open:
            self._open = False
            self._ledger._settle(self, stored)

    def release(self) -> None:
        self.settle(0)


def needs_compaction(archive_length: int, garbage_bytes: int) -> bool:
    """Rewrite an archive once it is big enough and mostly dead."""
    return archive_length > COMPACT_MIN_BYTES and garbage_bytes > COMPACT_GARBAGE_RATIO * archive_length
