"""Capacity accounting: bytes stored plus bytes promised to uploads in flight.

An upload reserves its declared size when it opens, so two uploads cannot both
be promised the last free bytes; commit turns the reservation into the bytes
actually stored, abort gives it back.
"""

from __future__ import annotations

import threading

from storage.errors import NoSpace
from storage.limits import COMPACT_GARBAGE_RATIO, COMPACT_MIN_BYTES


class CapacityLedger:
    def __init__(self, capacity: int, used: int = 0) -> None:
        if capacity < 0:
            raise ValueError(f"capacity cannot be negative ({capacity})")
        self.capacity = capacity
        self._used = used
        self._reserved = 0
        self._lock = threading.Lock()  # a leaf lock: nothing is called while holding it

    def reserve(self, size: int) -> Reservation:
        with self._lock:
            free = self.capacity - self._used - self._reserved
            if size > free:
                raise NoSpace(f"this node is full: {max(free, 0)} bytes free, the upload needs {size}")
            self._reserved += size
        return Reservation(self, size)

    def add_used(self, size: int) -> None:
        with self._lock:
            self._used += size

    def remove_used(self, size: int) -> None:
        with self._lock:
            self._used -= size

    def snapshot(self) -> tuple[int, int]:
        """(used, reserved)."""
        with self._lock:
            return self._used, self._reserved

    def _settle(self, reserved: int, stored: int) -> None:
        with self._lock:
            self._reserved -= reserved
            self._used += stored


class Reservation:
    """Settled or released exactly once; later calls do nothing."""

    def __init__(self, ledger: CapacityLedger, size: int) -> None:
        self._ledger = ledger
        self.size = size
        self._open = True

    def settle(self, stored: int) -> None:
        """The upload is committed and now occupies `stored` bytes."""
        if self._open:
            self._open = False
            self._ledger._settle(self.size, stored)

    def release(self) -> None:
        self.settle(0)


def needs_compaction(archive_length: int, garbage_bytes: int) -> bool:
    """Rewrite an archive once it is big enough and mostly dead."""
    return archive_length > COMPACT_MIN_BYTES and garbage_bytes > COMPACT_GARBAGE_RATIO * archive_length
