"""A directory entry's metadata beyond its mode and time (docs/snapshots.md,
directory record version 3): owner and group, extended attributes (ACLs
among them: system.posix_acl_access and _default are xattrs), the hard
link it shares, the data ranges of a file with holes, a device's numbers.

Pure: the record, its one wire form and the checks a hostile or corrupt
record meets on the way in. Reading it from a file is backup/meta_reading.py's,
applying it restore/meta_restore.py's.

Wire form: an object with only the fields that are set, in this order:

    "o": [uid, gid, user name, group name]     (a name "" where none was known)
    "x": [[xattr name, base64 value], ...]     (sorted by name)
    "h": path in the snapshot of the link this file is one of (its first)
    "s": [[offset, length], ...]               (data ranges; the rest holes)
    "d": [major, minor]                         (a character or block device)
"""
import base64
import binascii
from typing import NamedTuple, Optional

# Data ranges of one file a record may hold. sparse.py merges nearer ones to
# stay within it (its MAX_RANGES: the same number, test_meta_records holds
# them equal); defined here, so the record formats stand on nothing else.
MAX_RANGES = 4096

MAX_XATTR_BYTES = 64 * 1024   # names and values of one entry's xattrs (Linux: 64 KiB a value)
_FIELDS = ("o", "x", "h", "s", "d")


class BadMeta(ValueError):
    """An entry's metadata that is not what the format says."""


def _need(condition, what: str) -> None:
    if not condition:
        raise BadMeta(what)


def _count(value) -> bool:
    return type(value) is int and value >= 0


class Owner(NamedTuple):
    uid: int
    gid: int
    user: str = ""    # the names as the backed-up machine had them ("" if none)
    group: str = ""


class Meta(NamedTuple):
    owner: Optional[Owner] = None
    xattrs: tuple = ()              # ((name, value bytes), ...) sorted by name
    link: Optional[str] = None      # the snapshot path of the first of its hard links
    ranges: Optional[tuple] = None  # ((offset, length), ...): a file with holes
    device: Optional[tuple] = None  # (major, minor)

    def packed_size(self) -> int:
        """How many bytes the content holds: its data ranges, end to end."""
        return sum(length for _, length in self.ranges or ())

    def ranges_end(self) -> int:
        return self.ranges[-1][0] + self.ranges[-1][1] if self.ranges else 0

    def to_wire(self) -> dict:
        value = {}
        if self.owner is not None:
            value["o"] = list(self.owner)
        if self.xattrs:
            value["x"] = [[name, base64.b64encode(data).decode("ascii")]
                          for name, data in self.xattrs]
        if self.link is not None:
            value["h"] = self.link
        if self.ranges is not None:
            value["s"] = [list(r) for r in self.ranges]
        if self.device is not None:
            value["d"] = list(self.device)
        return value

    @classmethod
    def from_wire(cls, value) -> "Meta":
        _need(type(value) is dict and all(k in _FIELDS for k in value), "bad metadata")
        owner = value.get("o")
        if owner is not None:
            _need(type(owner) is list and len(owner) == 4 and _count(owner[0])
                  and _count(owner[1]) and type(owner[2]) is str and type(owner[3]) is str
                  and len(owner[2]) < 256 and len(owner[3]) < 256, "a bad owner")
            owner = Owner(*owner)
        xattrs = tuple(_xattrs(value.get("x", [])))
        link = value.get("h")
        if link is not None:
            _need(type(link) is str and link and all(
                part not in ("", ".", "..") and "\0" not in part for part in link.split("/")),
                "a bad hard link path")
        ranges = value.get("s")
        if ranges is not None:
            ranges = tuple(_ranges(ranges))
        device = value.get("d")
        if device is not None:
            _need(type(device) is list and len(device) == 2 and all(map(_count, device)),
                  "bad device numbers")
            device = tuple(device)
        return cls(owner, xattrs, link, ranges, device)


def _xattrs(rows):
    _need(type(rows) is list, "bad xattrs")
    total, last = 0, None
    for row in rows:
        _need(type(row) is list and len(row) == 2 and type(row[0]) is str and row[0]
              and "\0" not in row[0] and len(row[0]) < 256 and type(row[1]) is str,
              "a bad xattr")
        name = row[0]
        _need(last is None or name > last, "xattrs not sorted, or repeated")
        try:
            data = base64.b64decode(row[1], validate=True)
        except (binascii.Error, ValueError):
            raise BadMeta(f"xattr {name!r:.80}: a value that is not base64") from None
        total += len(name) + len(data)
        _need(total <= MAX_XATTR_BYTES, "xattrs over their bound")
        last = name
        yield name, data


def _ranges(rows):
    _need(type(rows) is list and len(rows) <= MAX_RANGES, "bad data ranges")
    end = 0
    for row in rows:
        _need(type(row) is list and len(row) == 2 and _count(row[0]) and _count(row[1])
              and row[1] > 0 and row[0] >= end, "data ranges out of order or empty")
        end = row[0] + row[1]
        yield row[0], row[1]


EMPTY_META = Meta()
