"""The records of a version-2 snapshot (docs/snapshots.md): snapshot and
directory records, the references between them (blob ids: where a blob is
stored is the holder map's business, client/repository/holder_map.py), and BlobRef, the
location of a blob in a bundle.

Each record has one canonical encoding (compact JSON, keys in a fixed order,
entries sorted by name), so an unchanged directory encodes to the same bytes
and seals to the same blob every time. Decoding checks everything a hostile or
corrupt record could use against a restore: the version (a newer one is
refused with a message that says to upgrade), every field's type, and every
name (one path component: never empty, `.`, `..`, nor holding `/` or NUL).
Names that are not UTF-8 travel as Python's surrogate escapes (os.fsdecode),
which JSON writes as \\udcXX and reads back unchanged.
"""
import json
import os
from typing import NamedTuple, Optional

from flud.client.records import (  # noqa: F401 (BlobRef, BadRecord, the kinds: read from here too)
    BLOCK_DEVICE, CHAR_DEVICE, DIRECTORY, FIFO, FILE, SPECIAL_KINDS, SYMLINK, BadRecord, BlobRef,
    _is_int, _need, is_hex)
from flud.client.repository.entry_meta import EMPTY_META, BadMeta, Meta
from flud.client.repository.record_format import (  # noqa: F401 (read from here too)
    CHUNKED_LARGE_VERSION, DIR_VERSION, FORMAT_VERSION, NewerFormat, record_head)

MAX_DIR_ENTRIES = 4096   # entries per directory record; more go to continuation records
SMALL_REF, LARGE_REF = "S", "L"
COMPRESSION_METHODS = ("", "zstd")

_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True).encode


def check_name(name) -> str:
    """A directory entry's name: one path component, or BadRecord."""
    _need(type(name) is str and name not in ("", ".", "..") and "/" not in name
          and "\0" not in name, f"a name that is not one path component: {name!r:.80}")
    return name


def name_order(name: str) -> bytes:
    """Entries sort by the bytes of their names, as the file system has them."""
    return os.fsencode(name)


class SmallRef(NamedTuple):
    """A small file's content: its convergent key, how it was compressed,
    and the bundle range it was first stored in (bundle id, offset, length:
    immutable once written; which nodes hold the bundle is the holder map's,
    and a map row for the key, written when prune repacks it, supersedes
    this range)."""
    key: str
    method: str = ""
    bundle: str = ""
    offset: int = 0
    length: int = 0

    def to_wire(self) -> list:
        return [SMALL_REF, self.key, self.method, self.bundle, self.offset, self.length]


class LargeRef(NamedTuple):
    """A large file's content: the blob id of its large-content record."""
    content: str

    def to_wire(self) -> list:
        return [LARGE_REF, self.content]


def _file_ref_from_wire(ref):
    if ref is None:
        return None
    _need(type(ref) is list and ref, "a bad file reference")
    if ref[0] == SMALL_REF:
        _need(len(ref) == 6 and is_hex(ref[1]) and ref[2] in COMPRESSION_METHODS
              and is_hex(ref[3]) and _is_int(ref[4]) and _is_int(ref[5]) and ref[5] > 0,
              "a bad small-file reference")
        return SmallRef(*ref[1:])
    _need(ref[0] == LARGE_REF and len(ref) == 2 and is_hex(ref[1]), "a bad file reference")
    return LargeRef(ref[1])


class DirEntry(NamedTuple):
    """One entry of a directory. ref: the blob id of its record (directory),
    None (empty file, or one all holes), SmallRef or LargeRef (file), the
    target (symlink), None (FIFO, device). meta: its metadata beyond mode
    and time (a meta.Meta; empty for a version-2 record). A file with holes
    has its whole length as size, and its content holds only its data
    ranges (meta.ranges), one after the other."""
    name: str
    kind: str
    mode: int
    mtime_ns: int
    size: int
    ref: object
    meta: Meta = EMPTY_META

    def to_wire(self) -> list:
        ref = self.ref
        if self.kind in (SYMLINK, DIRECTORY):
            wire_ref = ref
        else:
            wire_ref = None if ref is None else ref.to_wire()
        return [self.name, self.kind, self.mode, self.mtime_ns, self.size, wire_ref,
                self.meta.to_wire()]

    @classmethod
    def from_wire(cls, row, version: int = DIR_VERSION) -> "DirEntry":
        _need(type(row) is list and len(row) == (6 if version == 2 else 7),
              "a directory entry of the wrong shape")
        name, kind, mode, mtime_ns, size, ref = row[:6]
        check_name(name)
        meta = EMPTY_META
        if version > 2:
            try:
                meta = Meta.from_wire(row[6])
            except BadMeta as err:
                raise BadRecord(f"entry {name!r:.80}: {err}") from None
        _need(_is_int(mode) and type(mtime_ns) is int and _is_int(size),
              f"entry {name!r:.80}: bad mode, time or size")
        if kind == DIRECTORY:
            _need(is_hex(ref), f"entry {name!r:.80}: a directory without its record's id")
        elif kind == FILE:
            ref = _file_ref_from_wire(ref)
            _need(meta.ranges is None or meta.ranges_end() <= size,
                  f"entry {name!r:.80}: data ranges beyond its size")
            stored = size if meta.ranges is None else meta.packed_size()
            _need((ref is None) == (stored == 0),
                  f"entry {name!r:.80}: size and content disagree")
        elif kind in SPECIAL_KINDS and version > 2:
            _need(ref is None and size == 0, f"entry {name!r:.80}: a special file with content")
            _need((kind == FIFO) == (meta.device is None),
                  f"entry {name!r:.80}: a device without its numbers")
        elif kind == SYMLINK:
            _need(type(ref) is str and ref and "\0" not in ref,
                  f"entry {name!r:.80}: a bad symlink target")
        else:
            raise BadRecord(f"entry {name!r:.80}: unknown kind {kind!r:.20}")
        return cls(name, kind, mode, mtime_ns, size, ref, meta)


class DirectoryRecord(NamedTuple):
    """One directory's entries (sorted by name, at most MAX_DIR_ENTRIES) and
    the blob ids of the continuation records of a larger directory."""
    entries: tuple
    more: tuple = ()

    def encode(self) -> bytes:
        value = {"v": DIR_VERSION, "t": "dir", "e": [e.to_wire() for e in self.entries]}
        if self.more:
            value["more"] = list(self.more)
        return _encode(value).encode("ascii")

    @classmethod
    def decode(cls, data: bytes) -> "DirectoryRecord":
        value = record_head(data, "dir")
        rows, more = value.get("e"), value.get("more", [])
        _need(type(rows) is list and len(rows) <= MAX_DIR_ENTRIES and type(more) is list,
              "a directory record of the wrong shape")
        version = value["v"]
        entries = tuple(DirEntry.from_wire(row, version) for row in rows)
        order = [name_order(e.name) for e in entries]
        _need(all(a < b for a, b in zip(order, order[1:])),
              "a directory record whose names are not sorted, or repeat")
        _need(all(is_hex(blob_id) for blob_id in more), "a bad continuation record id")
        return cls(entries, tuple(more))


def directory_records(entries) -> list:
    """The records of one directory's entries (any order): the first holds
    MAX_DIR_ENTRIES entries, each continuation record the next ones. The
    caller stores the continuations, then the first with
    `first._replace(more=their blob ids)`."""
    ordered = sorted(entries, key=lambda e: name_order(e.name))
    for a, b in zip(ordered, ordered[1:]):
        if a.name == b.name:
            raise BadRecord(f"two entries named {a.name!r:.80} in one directory")
    chunks = [tuple(ordered[i:i + MAX_DIR_ENTRIES])
              for i in range(0, len(ordered), MAX_DIR_ENTRIES)] or [()]
    return [DirectoryRecord(chunk) for chunk in chunks]


class SnapshotRecord(NamedTuple):
    """A snapshot: when, where from, and the root directory's record."""
    snapshot_id: int
    time: float
    host: str
    paths: tuple
    tags: tuple
    protected: bool
    parent: Optional[str]
    tree: str
    stats: dict

    def encode(self) -> bytes:
        return _encode({
            "v": FORMAT_VERSION, "t": "snapshot", "id": self.snapshot_id, "time": self.time,
            "host": self.host, "paths": list(self.paths), "tags": list(self.tags),
            "protected": self.protected,
            "parent": self.parent, "tree": self.tree, "stats": self.stats}).encode("ascii")

    @classmethod
    def decode(cls, data: bytes) -> "SnapshotRecord":
        value = record_head(data, "snapshot")
        try:
            paths, tags = value["paths"], value["tags"]
            _need(_is_int(value["id"]) and type(value["time"]) in (int, float)
                  and type(value["host"]) is str and type(value["protected"]) is bool
                  and type(value["stats"]) is dict, "a snapshot record with a bad field")
            _need(type(paths) is list and all(type(p) is str and p.startswith("/") for p in paths)
                  and type(tags) is list and all(type(t) is str for t in tags),
                  "a snapshot record with bad paths or tags")
            parent, tree = value["parent"], value["tree"]
            _need((parent is None or is_hex(parent)) and is_hex(tree),
                  "a snapshot record with a bad parent or tree id")
            return cls(value["id"], value["time"], value["host"], tuple(paths), tuple(tags),
                       value["protected"], parent, tree, value["stats"])
        except KeyError as err:
            raise BadRecord(f"a snapshot record without {err.args[0]!r}") from None


class LargeRecord(NamedTuple):
    """A large file's content record: its extents and segments as version 1
    writes them (records.LargeContent's wire form). The node ids in it say
    where the shares were first stored; a holder-map row for an extent
    (written by repair) supersedes them, so the record never changes."""
    content: dict

    def encode(self) -> bytes:
        # A file cut into chunks (its content has runs) is version 3: a flud
        # that knows no runs would restore its extents back to back, not the
        # file, so it must refuse the record (NewerFormat), not misread it.
        version = CHUNKED_LARGE_VERSION if "runs" in self.content else FORMAT_VERSION
        return _encode({"v": version, "t": "large", "c": self.content}).encode("ascii")

    @classmethod
    def decode(cls, data: bytes) -> "LargeRecord":
        value = record_head(data, "large", CHUNKED_LARGE_VERSION)
        content = value.get("c")
        _need(type(content) is dict and content.get("t") == "L" and _is_int(content.get("size")),
              "a large-content record with a bad content")
        _need(("runs" in content) == (value["v"] == CHUNKED_LARGE_VERSION),
              "a large-content record whose version does not match its content")
        return cls(content)
