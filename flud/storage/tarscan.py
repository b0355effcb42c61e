"""Incremental, strict scanner for the POSIX ustar / GNU tars of archive uploads.

Fed the upload as it streams in, it checks every header and hashes every
member's data on the fly, so commit needs no second pass over the bytes and a
bad tar is refused at the first bad block. It records where each member's data
starts: the store indexes members by (offset, length) and never scans again.

Accepted: regular members (typeflag '0' or NUL) named by the 64 lowercase hex
BLAKE3-256 of their data, one 512-byte header each (such a name always fits the
100-byte name field, so no long-name or pax records are needed or allowed),
optionally followed by zero blocks up to the end.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

import blake3

from flud.storage.errors import BadArchive
from flud.storage.limits import KEY_HEX_LENGTH

TAR_BLOCK = 512

_NAME = slice(0, 100)
_SIZE = slice(124, 136)
_CHECKSUM = slice(148, 156)
_TYPEFLAG = 156
_MAGIC_AND_VERSION = slice(257, 265)
_PREFIX = slice(345, 500)
_USTAR_MAGIC = b"ustar\x0000"
_GNU_MAGIC = b"ustar  \x00"
_REGULAR_TYPES = (ord("0"), 0)
_CHECKSUM_FIELD_AS_SPACES = 8 * ord(" ")
_HEX_NAME = re.compile(rb"[0-9a-f]{%d}" % KEY_HEX_LENGTH)
_ZERO_BLOCK = bytes(TAR_BLOCK)


def padded(length: int) -> int:
    """Length rounded up to whole tar blocks."""
    return -(-length // TAR_BLOCK) * TAR_BLOCK


def member_span(length: int) -> int:
    """Bytes a member occupies in a tar: its header block plus padded data."""
    return TAR_BLOCK + padded(length)


@dataclass(frozen=True)
class TarMember:
    key: bytes
    data_offset: int  # from the start of the tar; the header is the block before
    length: int


class _State(enum.Enum):
    HEADER = "header"
    DATA = "data"
    PADDING = "padding"
    TRAILER = "trailer"  # after the first zero block: only zeros may follow


def _octal(field: bytes, what: str) -> int:
    digits = field.rstrip(b"\x00 ").lstrip(b" ")
    if not digits or any(c not in b"01234567" for c in digits):
        raise BadArchive(f"tar header has an unreadable {what} field {field!r}")
    return int(digits, 8)


def _signed_sum(body: bytes) -> int:
    # Some old tars summed signed chars; accept that too, as tarfile does.
    return sum(b - 256 if b > 127 else b for b in body) + _CHECKSUM_FIELD_AS_SPACES


def parse_header(block: bytes, position: int) -> tuple[bytes, int]:
    """(key, data length) of one header block; BadArchive if it is not acceptable."""
    where = f"tar header at byte {position}"
    stored = _octal(block[_CHECKSUM], "checksum")
    body = block[: _CHECKSUM.start] + block[_CHECKSUM.stop :]
    if stored != sum(body) + _CHECKSUM_FIELD_AS_SPACES and stored != _signed_sum(body):
        raise BadArchive(f"{where} has a bad checksum (damaged or not a tar)")
    magic = block[_MAGIC_AND_VERSION]
    if magic not in (_USTAR_MAGIC, _GNU_MAGIC):
        raise BadArchive(f"{where} is not POSIX ustar or GNU format")
    if block[_TYPEFLAG] not in _REGULAR_TYPES:
        raise BadArchive(f"{where} is not a regular file (type {chr(block[_TYPEFLAG])!r}); only regular members are stored")
    # In GNU headers these bytes hold times, in ustar a path prefix we do not allow.
    if magic == _USTAR_MAGIC and any(block[_PREFIX]):
        raise BadArchive(f"{where} has a path prefix; member names must be bare hex keys")
    name = block[_NAME].split(b"\x00", 1)[0]
    if not _HEX_NAME.fullmatch(name):
        raise BadArchive(
            f"{where}: member name {name[:80]!r} is not the {KEY_HEX_LENGTH} lowercase hex chars of its key"
        )
    return bytes.fromhex(name.decode("ascii")), _octal(block[_SIZE], "size")


class TarScanner:
    """Feed it the tar in chunks of any size, then call finish()."""

    def __init__(self) -> None:
        self._state = _State.HEADER
        self._position = 0
        self._header = bytearray()
        self._remaining = 0  # bytes left in the current DATA or PADDING run
        self._member: TarMember | None = None
        self._hasher: blake3.blake3 | None = None
        self._end: int | None = None  # offset of the first zero block
        self.members: list[TarMember] = []

    def feed(self, chunk: bytes | memoryview) -> None:
        view = memoryview(chunk)
        while view:
            used = self._step(view)
            self._position += used
            view = view[used:]

    def _step(self, view: memoryview) -> int:
        """Consume a prefix of view; returns how many bytes were used."""
        if self._state is _State.HEADER:
            used = min(len(view), TAR_BLOCK - len(self._header))
            self._header += view[:used]
            if len(self._header) == TAR_BLOCK:
                self._on_header(bytes(self._header), self._position + used - TAR_BLOCK)
                self._header.clear()
            return used
        if self._state is _State.TRAILER:
            if view.tobytes().count(0) != len(view):
                raise BadArchive(f"non-zero bytes after the end-of-archive marker (near byte {self._position})")
            return len(view)
        used = min(len(view), self._remaining)
        if self._state is _State.DATA:
            self._hasher.update(view[:used])
        self._remaining -= used
        if self._remaining == 0:
            self._on_run_done()
        return used

    def _on_header(self, block: bytes, header_offset: int) -> None:
        if block == _ZERO_BLOCK:
            self._end = header_offset
            self._state = _State.TRAILER
            return
        key, length = parse_header(block, header_offset)
        self._member = TarMember(key, header_offset + TAR_BLOCK, length)
        self._hasher = blake3.blake3()
        self._remaining = length
        self._state = _State.DATA
        if length == 0:
            self._on_run_done()

    def _on_run_done(self) -> None:
        if self._state is _State.DATA:
            member = self._member
            if self._hasher.digest() != member.key:
                raise BadArchive(f"member {member.key.hex()} does not match its name (its data hashes differently)")
            self.members.append(member)
            self._remaining = padded(member.length) - member.length
            self._state = _State.PADDING
            if self._remaining:
                return
        self._state = _State.HEADER

    def finish(self) -> tuple[list[TarMember], int]:
        """(members in order, length of the member blocks without trailing zeros)."""
        if self._state is _State.TRAILER:
            if self._position % TAR_BLOCK:
                raise BadArchive("the tar does not end on a 512-byte block boundary")
            return self.members, self._end
        if self._state is not _State.HEADER or self._header:
            raise BadArchive(f"the tar is truncated: it ends inside a member (at byte {self._position})")
        return self.members, self._position
