"""A reader of the tars the aggregator writes, for the tests alone: the
nodes read archives with their own scanner (flud/storage/tarscan.py)."""
from flud.aggregator.tarball import (_BLANK_CHECKSUM, _CHECKSUM_LENGTH, _CHECKSUM_OFFSET,
                                     BLOCK_SIZE, MAX_NAME_LENGTH)

REGULAR_FILE_TYPES = (b"0", b"\0")  # "\0" is the pre-POSIX spelling
USTAR_MAGICS = (b"ustar\x0000", b"ustar  ")  # POSIX, and old GNU
_NUMBER_OFFSETS = {"size": (124, 12), "mtime": (136, 12)}
_TYPE_OFFSET = 156
_MAGIC_SLICE = slice(257, 265)
_PREFIX_SLICE = slice(345, 500)


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
