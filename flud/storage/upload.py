"""The upload lifecycle both stores share: OPEN -> COMMITTED or ABORTED.

The base class hashes every chunk as it arrives (and scans archives as they
arrive), enforces the declared size and runs the state machine. A subclass only
says where chunks go (_store_pieces), how to make them visible (_publish) and how
to throw them away (_discard). Any error in write() or commit() aborts the
upload: the caller never has to clean up after a failure.

A streamed share is sent before its key is known, so its key follows its data:
the last KEY_LENGTH bytes written are set aside (never stored) and commit
checks the share against them, then publishes it as a share of that key.
"""

from __future__ import annotations

import enum

import blake3

from flud.storage.capacity import Reservation
from flud.storage.errors import HashMismatch, TooLarge, UploadClosed
from flud.storage.limits import KEY_LENGTH, KIND_ARCHIVE, KIND_STREAMED_SHARE
from flud.storage.tarscan import TarMember, TarScanner


class UploadState(enum.Enum):
    OPEN = "open"
    COMMITTED = "committed"
    ABORTED = "aborted"


class Upload:
    def __init__(self, key: bytes | None, owner: bytes, size: int, kind: str, reservation: Reservation) -> None:
        self.key = key  # None for a streamed share until commit has checked its trailer
        self.owner = owner
        self.size = size  # of the stored bytes: a streamed share's trailing key is not stored
        self.kind = kind
        self.received = 0  # stored bytes so far
        self._trailer = bytearray() if kind == KIND_STREAMED_SHARE else None
        self._expected = size + KEY_LENGTH if self._trailer is not None else size
        self.state = UploadState.OPEN
        self._reservation = reservation
        self._hasher = blake3.blake3()
        self._scanner = TarScanner() if kind == KIND_ARCHIVE else None

    def __enter__(self) -> Upload:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.abort()  # a no-op once committed

    def write(self, chunk: bytes | bytearray | memoryview) -> None:
        self.write_pieces((chunk,))

    def write_pieces(self, pieces) -> None:
        """Several buffers in order (a frame as it arrived in TLS records):
        each is hashed as it is, and the disk gets them in one call."""
        self._require_open("write to")
        try:
            views = [memoryview(piece).cast("B") for piece in pieces]
            length = sum(len(view) for view in views)
            if self._arrived + length > self._expected:
                raise TooLarge(f"upload of {self.label} sent more than the {self._expected} bytes it declared")
            if self._trailer is not None:
                views = self._set_trailer_aside(views)
                length = sum(len(view) for view in views)
            for view in views:
                self._hasher.update(view)
                if self._scanner is not None:
                    self._scanner.feed(view)
            self._store_pieces(views)
            self.received += length
        except Exception:
            self._fail()
            raise

    def commit(self) -> list[bytes]:
        """Check the bytes against the key and make them visible; returns the keys stored."""
        self._require_open("commit")
        try:
            if self._arrived != self._expected:
                raise HashMismatch(f"upload of {self.label} got {self._arrived} bytes, expected {self._expected}")
            key = self.key if self._trailer is None else bytes(self._trailer)
            if self._hasher.digest() != key:
                raise HashMismatch(
                    f"uploaded data does not match its key {key.hex()} (BLAKE3 is {self._hasher.hexdigest()})"
                )
            self.key = key
            if self._scanner is not None:
                members, body_length = self._scanner.finish()
                keys = self._publish_archive(members, body_length, self._reservation)
            else:
                keys = self._publish_share(self._reservation)
        except Exception:
            self._fail()
            raise
        self.state = UploadState.COMMITTED
        self._clean_up()  # an upload the store did not need (key already held) is dropped here
        return keys

    def abort(self) -> None:
        """Throw the upload away; after commit or a previous abort it does nothing."""
        if self.state is UploadState.OPEN:
            self._fail()

    @property
    def label(self) -> str:
        """The key in hex, for messages; a streamed share has none before commit."""
        return self.key.hex() if self.key is not None else "a streamed share"

    @property
    def _arrived(self) -> int:
        return self.received + (len(self._trailer) if self._trailer is not None else 0)

    def _set_trailer_aside(self, views: list[memoryview]) -> list[memoryview]:
        """The views' share bytes, uncopied; the bytes past `size` (at most the
        KEY_LENGTH of the key, write_pieces checked) are copied to the trailer."""
        room = self.size - self.received
        share = []
        for view in views:
            if len(view) <= room:
                share.append(view)
                room -= len(view)
                continue
            if room:
                share.append(view[:room])
            self._trailer += view[room:]
            room = 0
        return share

    def _require_open(self, action: str) -> None:
        if self.state is not UploadState.OPEN:
            raise UploadClosed(f"cannot {action} the upload of {self.label}: it is already {self.state.value}")

    def _fail(self) -> None:
        self.state = UploadState.ABORTED
        self._clean_up()

    def _clean_up(self) -> None:
        try:
            self._discard()
        finally:
            self._reservation.release()  # does nothing if the store settled it

    # --- for subclasses ------------------------------------------------------

    def _store_pieces(self, views: list[memoryview]) -> None:
        raise NotImplementedError

    def _publish_share(self, reservation: Reservation) -> list[bytes]:
        """Make the share visible and settle the reservation; atomic or raises."""
        raise NotImplementedError

    def _publish_archive(self, members: list[TarMember], body_length: int, reservation: Reservation) -> list[bytes]:
        """Append the first body_length bytes, index the members, settle; atomic or raises."""
        raise NotImplementedError

    def _discard(self) -> None:
        """Drop whatever the upload still holds (idempotent)."""
        raise NotImplementedError
