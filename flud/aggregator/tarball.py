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
        self._sealed = False

    @property
    def size(self) -> int:
        """Bytes so far (headers, data, padding), without the end blocks."""
        return len(self._buffer)

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
