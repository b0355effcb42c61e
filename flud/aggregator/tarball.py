"""A minimal, fast POSIX ustar writer and header walker, in memory.

tarfile builds each header through TarInfo, pax checks and string encodings:
tens of microseconds per member. Members here are always plain files with
short ASCII names (64 hex characters), so one precomputed header template
with three variable fields does the same job in a few microseconds, and any
tar reader still lists the result.
"""

from __future__ import annotations

import struct

BLOCK_SIZE = 512
END_OF_ARCHIVE = b"\0" * (2 * BLOCK_SIZE)  # two zero blocks close a tar
MAX_NAME_LENGTH = 100       # ustar name field, without the prefix field
MAX_MEMBER_SIZE = 8 ** 11 - 1  # 11 octal digits in the size field
MAX_MTIME = 8 ** 11 - 1
FILE_MODE = 0o644
REGULAR_FILE_TYPES = (b"0", b"\0")  # "\0" is the pre-POSIX spelling
USTAR_MAGICS = (b"ustar\x0000", b"ustar  ")  # POSIX, and old GNU

# Field layout of a ustar header, in order; sizes sum to 512.
_HEADER = struct.Struct(
    "100s"  # name
    "8s"    # mode
    "8s"    # uid
    "8s"    # gid
    "12s"   # size
    "12s"   # mtime
    "8s"    # checksum
    "1s"    # type flag
    "100s"  # link name
    "6s"    # magic
    "2s"    # version
    "32s"   # user name
    "32s"   # group name
    "8s"    # device major
    "8s"    # device minor
    "155s"  # name prefix
    "12s"   # padding
)
assert _HEADER.size == BLOCK_SIZE
_CHECKSUM_OFFSET = 148
_CHECKSUM_LENGTH = 8
_BLANK_CHECKSUM = b" " * _CHECKSUM_LENGTH  # counted as spaces when summing
_NUMBER_OFFSETS = {"size": (124, 12), "mtime": (136, 12)}
_TYPE_OFFSET = 156
_MAGIC_SLICE = slice(257, 265)
_PREFIX_SLICE = slice(345, 500)


def _octal(value: int, width: int) -> bytes:
    """`width`-1 zero-padded octal digits and a NUL, as ustar wants."""
    return b"%0*o\0" % (width - 1, value)


# Every field but name, size, mtime and checksum is the same for all members,
# so their contribution to the checksum is summed once.
_FIXED_FIELDS = dict(
    mode=_octal(FILE_MODE, 8), uid=_octal(0, 8), gid=_octal(0, 8),
    type=b"0", link=b"", magic=b"ustar\0", version=b"00",
    user=b"", group=b"", major=_octal(0, 8), minor=_octal(0, 8),
    prefix=b"", pad=b"",
)
_FIXED_SUM = sum(b"".join(_FIXED_FIELDS.values())) + sum(_BLANK_CHECKSUM)


def _header(name: bytes, size: int, mtime: int) -> bytes:
    size_field = _octal(size, 12)
    mtime_field = _octal(mtime, 12)
    checksum = _FIXED_SUM + sum(name) + sum(size_field) + sum(mtime_field)
    f = _FIXED_FIELDS
    return _HEADER.pack(
        name, f["mode"], f["uid"], f["gid"], size_field, mtime_field,
        b"%06o\0 " % checksum, f["type"], f["link"], f["magic"],
        f["version"], f["user"], f["group"], f["major"], f["minor"],
        f["prefix"], f["pad"])


class TarWriter:
    """Appends plain-file members to an in-memory ustar archive."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._member_count = 0
        self._sealed = False

    @property
    def size(self) -> int:
        """Bytes so far (headers, data, padding), without the end blocks."""
        return len(self._buffer)

    @property
    def member_count(self) -> int:
        return self._member_count

    def add(self, name: str, data: bytes, mtime: int = 0) -> tuple[int, int]:
        """Append one member; return (offset of its data, its length)."""
        if self._sealed:
            raise ValueError("cannot add to a sealed tar")
        encoded = _check_name(name)
        length = len(data)
        if length > MAX_MEMBER_SIZE:
            raise ValueError(f"member {name!r} is {length} bytes; a ustar "
                             f"member holds at most {MAX_MEMBER_SIZE}")
        if not 0 <= mtime <= MAX_MTIME:
            raise ValueError(f"mtime must be in [0, {MAX_MTIME}], got {mtime}")
        buffer = self._buffer
        buffer += _header(encoded, length, mtime)
        offset = len(buffer)
        buffer += data
        remainder = length % BLOCK_SIZE
        if remainder:
            buffer += bytes(BLOCK_SIZE - remainder)
        self._member_count += 1
        return offset, length

    def seal(self) -> bytearray:
        """Close the archive and return its bytes; the writer is then done.

        The buffer itself is handed over, not copied (a copy would double a
        4 MiB tar for a moment): do not change it afterwards."""
        if self._sealed:
            raise ValueError("tar already sealed")
        self._sealed = True
        self._buffer += END_OF_ARCHIVE
        data, self._buffer = self._buffer, bytearray()
        return data


def _check_name(name: str) -> bytes:
    try:
        encoded = name.encode("ascii")
    except UnicodeEncodeError:
        raise ValueError(f"member name must be ASCII, got {name!r}") from None
    if not encoded or len(encoded) > MAX_NAME_LENGTH or b"\0" in encoded:
        raise ValueError(f"member name must be 1..{MAX_NAME_LENGTH} ASCII "
                         f"characters without NUL, got {name!r}")
    return encoded


def parse_members(tar_bytes: bytes) -> list[tuple[str, int, int]]:
    """List (name, data_offset, length) of every member, walking headers.

    Stops at the first zero block (end of archive). Raises ValueError on a
    bad checksum, a truncated archive, or a member that is not a plain file.
    """
    view = memoryview(tar_bytes)
    members = []
    offset = 0
    total = len(view)
    while True:
        if offset + BLOCK_SIZE > total:
            raise ValueError(f"tar truncated: no header or end block at "
                             f"offset {offset}")
        block = view[offset:offset + BLOCK_SIZE]
        raw = bytes(block)
        if raw.count(0) == BLOCK_SIZE:
            return members
        _check_checksum(raw, offset)
        if raw[_MAGIC_SLICE] not in USTAR_MAGICS:
            raise ValueError(f"not a ustar header at offset {offset}")
        if raw[_TYPE_OFFSET:_TYPE_OFFSET + 1] not in REGULAR_FILE_TYPES:
            raise ValueError(f"member at offset {offset} is not a plain file "
                             f"(type {raw[_TYPE_OFFSET:_TYPE_OFFSET + 1]!r})")
        name = _field_text(raw[0:MAX_NAME_LENGTH])
        prefix = _field_text(raw[_PREFIX_SLICE])
        if prefix:
            name = prefix + "/" + name
        length = _number(raw, "size", offset)
        data_offset = offset + BLOCK_SIZE
        if data_offset + length > total:
            raise ValueError(f"tar truncated: member {name!r} needs "
                             f"{length} bytes at offset {data_offset}")
        members.append((name, data_offset, length))
        offset = data_offset + -(-length // BLOCK_SIZE) * BLOCK_SIZE


def _check_checksum(raw: bytes, offset: int) -> None:
    stored = _number(raw, "checksum", offset)
    unsigned = (sum(raw[:_CHECKSUM_OFFSET]) + sum(_BLANK_CHECKSUM)
                + sum(raw[_CHECKSUM_OFFSET + _CHECKSUM_LENGTH:]))
    if stored != unsigned:
        raise ValueError(f"bad tar header checksum at offset {offset}: "
                         f"stored {stored}, computed {unsigned}")


def _number(raw: bytes, field: str, offset: int) -> int:
    start, width = ((_CHECKSUM_OFFSET, _CHECKSUM_LENGTH) if field == "checksum"
                    else _NUMBER_OFFSETS[field])
    text = raw[start:start + width].split(b"\0", 1)[0].strip(b" ")
    try:
        return int(text, 8) if text else 0
    except ValueError:
        raise ValueError(f"bad {field} field {text!r} in tar header at "
                         f"offset {offset}") from None


def _field_text(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("ascii", "replace")
