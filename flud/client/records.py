"""The client's records, and the one place their JSON shapes are read and written.

A manifest, the client index and the root record hold these records as
compact JSON. On the wire most of them are positional lists (short: a
manifest is mostly hex keys), so reading one by position anywhere else is a
format change waiting to be missed. Here each record is a named, immutable
type with `to_wire()` (the exact JSON value written today) and `from_wire()`
(which also reads every manifest written before). A change of format is a
change of this module.

Shapes (all hex strings are lower case):

    entry            [rel, kind, mode, mtime_ns, size, content id | link target | ""]
    empty content    {"t": "E", "size": 0}
    small content    {"t": "S", "size", "key": convergent key, "b": bundle id,
                      "o": offset in the bundle, "l": length stored}
                     and "z": compression method ("zstd"), only if it was compressed
                     ("size" is the plaintext's; written without "z" before compression)
    large content    {"t": "L", "size", "ext": [extent, ...]}
                     or, written before extents, {"t": "L", "size", "segs": [stored segment]}
                     or, cut into content-defined chunks (backup/chunked.py),
                     {"t": "L", "size", "ext": [extent, ...], "runs": [run, ...]}: the
                     extents it uses (its own and earlier files'), and the file is its
                     runs' bytes back to back
    run              [extent's position in "ext", offset, length]: plaintext bytes
                     offset..offset+length of the extent (its segments back to back)
    extent           {"shares": [share holder, ...], "segs": [extent segment, ...]}
    extent segment   [key, length, block length, BLAKE3 prefix of each block, joined, hex]
                     or, compressed before it was encrypted,
                     [key, length, block length, block hashes, method ("zstd"), stored length]
                     ("length" is the plaintext's; the blocks hold the stored bytes;
                     written with four fields before compression, and still with four
                     for a segment stored as it is)
    stored segment   [key, length, block length, [share holder, ...]]
    manifest ref     {"size": sealed bytes, "segs": [stored segment, ...]}
    share holder     [share index, share key, node id]
    bundle           {"len", "k", "n", "bl": block length, "shares": [share holder, ...]}
    challenge        [offset, span, expected digest]            (a share's: nonce derived)
                     [offset, span, expected digest, nonce]     (a stream's: nonce recorded)

A block holder (a block at an offset of an extent's stream) is never written:
it is made from an extent when a segment is fetched (SegmentFetch).
"""
from typing import NamedTuple, Optional, Tuple

import blake3

from flud.errors import BadRecord, FludError  # noqa: F401 (BadRecord: re-exported)

EMPTY, SMALL, LARGE = "E", "S", "L"
# One set of kinds for every entry held in memory (a scan's, a version-1
# manifest's, a version-2 directory record's): the letters version-2 records
# write. Version-1 manifests and the JSON outputs spell them out (KIND_NAMES);
# Entry.from_wire / to_wire translate.
DIRECTORY, FILE, SYMLINK = "d", "f", "l"
FIFO, CHAR_DEVICE, BLOCK_DEVICE = "p", "c", "b"
SPECIAL_KINDS = (FIFO, CHAR_DEVICE, BLOCK_DEVICE)
KIND_NAMES = {DIRECTORY: "dir", FILE: "file", SYMLINK: "symlink", FIFO: "fifo",
              CHAR_DEVICE: "chardev", BLOCK_DEVICE: "blockdev"}
_KIND_OF_NAME = {name: kind for kind, name in KIND_NAMES.items()}


def kind_of_name(name: str) -> str:
    """The kind a version-1 manifest spells `name` ("file", "dir", ...)."""
    try:
        return _KIND_OF_NAME[name]
    except (KeyError, TypeError):
        raise BadRecord(f"an entry of unknown kind {name!r:.40}") from None


class Entry(NamedTuple):
    """One path of a snapshot. `last`: the content id of a file, the target
    of a symlink, "" for a directory."""
    rel: str
    kind: str
    mode: int
    mtime_ns: int
    size: int
    last: str

    @property
    def is_file(self) -> bool:
        return self.kind == FILE

    def to_wire(self) -> list:
        return [self.rel, KIND_NAMES[self.kind], self.mode, self.mtime_ns, self.size, self.last]

    @classmethod
    def from_wire(cls, row) -> "Entry":
        rel, name, mode, mtime_ns, size, last = row
        return cls(rel, kind_of_name(name), mode, mtime_ns, size, last)


def entries_from_wire(rows) -> list:
    make = Entry.from_wire
    return [make(row) for row in rows]


class ShareHolder(NamedTuple):
    """A whole share on a node: it matches its key (BLAKE3 of the share)."""
    index: int
    key: str
    node: str

    def to_wire(self) -> list:
        return [self.index, self.key, self.node]

    @classmethod
    def from_wire(cls, row) -> "ShareHolder":
        return cls._make(row)

    def retrieve_range(self, block_length: int) -> tuple:
        """RETRIEVE's (offset, length) arguments: none, the whole share."""
        return ()

    def fits(self, data) -> bool:
        return blake3.blake3(data).hexdigest() == self.key


class BlockHolder(NamedTuple):
    """A segment's block at `offset` in an extent's share stream `key`: it
    matches its recorded hash prefix (`block_hash`)."""
    index: int
    key: str
    node: str
    offset: int
    block_hash: str

    def retrieve_range(self, block_length: int) -> tuple:
        return (self.offset, block_length)

    def fits(self, data) -> bool:
        return blake3.blake3(data).digest()[:len(self.block_hash) // 2].hex() == self.block_hash


def holders_to_wire(holders) -> list:
    return [h.to_wire() for h in holders]


def holders_from_wire(rows) -> tuple:
    make = ShareHolder._make
    return tuple(make(row) for row in rows)


class StoredSegment(NamedTuple):
    """A segment stored share by share (a manifest's, or a large file's
    before extents)."""
    key: str
    length: int
    block_length: int
    holders: Tuple[ShareHolder, ...]

    def to_wire(self) -> list:
        return [self.key, self.length, self.block_length, holders_to_wire(self.holders)]

    @classmethod
    def from_wire(cls, row) -> "StoredSegment":
        key, length, block_length, holders = row
        return cls(key, length, block_length, holders_from_wire(holders))

    def fetch(self) -> "SegmentFetch":
        return SegmentFetch(self.key, self.length, self.block_length, self.holders)


def manifest_ref_segments(manifest_ref) -> list:
    return [StoredSegment.from_wire(s) for s in manifest_ref["segs"]]


class BadSegmentRecord(FludError):
    """An extent's segment written in a shape this flud does not know (by a
    newer flud, or damaged)."""

    code = "BAD_SEGMENT_RECORD"


class ExtentSegment(NamedTuple):
    """A segment of an extent: its blocks are in the extent's streams, one
    per share, and `block_hashes` holds each block's hash prefix in order.
    `length` is the plaintext's; a segment compressed before it was
    encrypted (`method`) stored `stored` bytes in its blocks instead."""
    key: str
    length: int
    block_length: int
    block_hashes: str
    method: Optional[str] = None
    stored: Optional[int] = None

    def to_wire(self) -> list:
        if self.method is None:  # as written before compression: the same bytes
            return [self.key, self.length, self.block_length, self.block_hashes]
        return [self.key, self.length, self.block_length, self.block_hashes, self.method,
                self.stored]

    @classmethod
    def from_wire(cls, row) -> "ExtentSegment":
        if len(row) not in (4, 6):
            raise BadSegmentRecord(
                f"a large file's segment record has {len(row)} fields where this flud knows "
                f"4 or 6: it was written by a newer flud (upgrade to restore it) or is damaged")
        return cls(*row)


class Extent(NamedTuple):
    """Consecutive segments of a file sent as one stream per node."""
    holders: Tuple[ShareHolder, ...]
    segments: Tuple[ExtentSegment, ...]

    def to_wire(self) -> dict:
        return {"shares": holders_to_wire(self.holders),
                "segs": [s.to_wire() for s in self.segments]}

    @classmethod
    def from_wire(cls, record) -> "Extent":
        make = ExtentSegment.from_wire
        return cls(holders_from_wire(record["shares"]),
                   tuple(make(row) for row in record["segs"]))

    def fetch(self, position: int, offset: int) -> "SegmentFetch":
        """Segment `position`, whose blocks start at `offset` in the streams."""
        seg = self.segments[position]
        width = len(seg.block_hashes) // len(self.holders)
        holders = tuple(BlockHolder(h.index, h.key, h.node, offset,
                                    seg.block_hashes[h.index * width:(h.index + 1) * width])
                        for h in self.holders)
        return SegmentFetch(seg.key, seg.length, seg.block_length, holders, seg.method,
                            seg.stored)


def stored_bytes(content_wire) -> int:
    """What a content record (as written) stores before n/k: a small file's
    stored length, a large file's segments' stored lengths (compressed or not)."""
    if content_wire["t"] == SMALL:
        return content_wire["l"]
    if content_wire["t"] != LARGE:
        return 0
    return sum(extent_stored_bytes(extent) for extent in content_wire.get("ext", ()))


def unique_stored_bytes(content_maps) -> int:
    """What several snapshots' files store, each content once and each
    extent once (chunked files share extents): content_maps are their
    {content id: content record as written}."""
    seen, extents, total = set(), set(), 0
    for contents in content_maps:
        for content_id, record in contents.items():
            if content_id in seen:
                continue
            seen.add(content_id)
            if record["t"] != LARGE:
                total += stored_bytes(record)
                continue
            for extent in record.get("ext", ()):
                name = extent_id(extent) if extent.get("shares") else id(extent)
                if name not in extents:
                    extents.add(name)
                    total += extent_stored_bytes(extent)
    return total


def extent_stored_bytes(extent_wire) -> int:
    """What an extent's segments store (each stream holds a k-th of it)."""
    return sum(seg.stored if seg.method is not None else seg.length
               for seg in map(ExtentSegment.from_wire, extent_wire["segs"]))


def stream_length(extent: Extent) -> int:
    """The length of each of an extent's share streams: block i of every
    segment, back to back."""
    return sum(segment.block_length for segment in extent.segments)


def holder_rows(record) -> list:
    """The [share index, share key, node id] rows of a bundle or extent
    record as written ([] for one that has none)."""
    return record.get("shares") or []


def set_holder_rows(record, rows) -> None:
    """Put newer holder rows (the map's, after a repair) in a record as written."""
    record["shares"] = rows


def extents_of(content_wire) -> tuple:
    """A content record's extents as written (none for a small or empty
    file, nor for a large one written before extents)."""
    return content_wire.get("ext", ())


def stored_segments_of(content_wire) -> tuple:
    """A large content record's segments stored share by share (written
    before extents; none otherwise)."""
    return content_wire.get("segs", ())


def extent_stream_length(extent_wire) -> int:
    """stream_length of an extent record as written, without making it."""
    return sum(ExtentSegment.from_wire(row).block_length for row in extent_wire["segs"])


def bundle_block_length(bundle_wire) -> int:
    """The block length of a bundle record as written."""
    return bundle_wire["bl"]


def extent_id_or_none(extent_wire) -> Optional[str]:
    """extent_id, or None for an extent record without holders."""
    return extent_wire["shares"][0][1] if extent_wire.get("shares") else None


def extent_id(extent_wire) -> str:
    """An extent's name in the holder map: the key of its first stream
    (share 0: the BLAKE3 of a stream that holds every segment's block 0, so
    no two different extents share it)."""
    return extent_wire["shares"][0][1]


class SegmentFetch(NamedTuple):
    """What fetching one segment needs: its key, lengths and holders (share
    holders, or block holders of an extent). Made from the records, never
    written. `length`: the plaintext's; `method`, `stored`: as ExtentSegment's."""
    key: str
    length: int
    block_length: int
    holders: tuple
    method: Optional[str] = None
    stored: Optional[int] = None

    @property
    def stored_length(self) -> int:
        """The bytes its blocks hold (the plaintext's length unless compressed)."""
        return self.length if self.method is None else self.stored


class EmptyContent(NamedTuple):
    size: int = 0
    kind = EMPTY

    def to_wire(self) -> dict:
        return {"t": EMPTY, "size": self.size}


class SmallContent(NamedTuple):
    """A small file: bytes offset..offset+length of its bundle, compressed
    with `method` before they were encrypted (None: stored as they are)."""
    size: int
    key: str
    bundle: str
    offset: int
    length: int
    method: Optional[str] = None
    kind = SMALL

    def to_wire(self) -> dict:
        record = {"t": SMALL, "size": self.size, "key": self.key, "b": self.bundle,
                  "o": self.offset, "l": self.length}
        if self.method is not None:  # a file stored as it is keeps its record's bytes
            record["z"] = self.method
        return record


class LargeContent(NamedTuple):
    """A large file: its extents, or (written before extents) its segments.
    With `runs` (a file cut into content-defined chunks), the file is the
    runs' bytes back to back, each run (extent position, offset, length)
    a range of an extent's plaintext; without, every segment in order.
    chunked_id: a chunked file's content id (client/repository/chunk_ids.py:
    the hash of its chunk ids), so a restore can check a file in place by
    cutting it again; None in records written before it was kept."""
    size: int
    extents: Optional[Tuple[Extent, ...]] = None
    segments: Optional[Tuple[StoredSegment, ...]] = None
    runs: Optional[Tuple[Tuple[int, int, int], ...]] = None
    chunked_id: Optional[str] = None
    kind = LARGE

    def to_wire(self) -> dict:
        if self.extents is None:
            return {"t": LARGE, "size": self.size,
                    "segs": [s.to_wire() for s in self.segments]}
        record = {"t": LARGE, "size": self.size, "ext": [e.to_wire() for e in self.extents]}
        if self.runs is not None:
            record["runs"] = [list(run) for run in self.runs]
            if self.chunked_id is not None:
                record["cid"] = self.chunked_id
        return record

    def segment_fetches(self):
        """Every segment, in order, as a SegmentFetch, each made when asked for."""
        for record, _, _ in self.pieces():
            yield record

    def pieces(self):
        """The file in order, as (SegmentFetch, start, length): plaintext
        bytes start..start+length of that segment (a whole segment, unless
        the content has runs)."""
        if self.extents is None:
            for seg in self.segments:
                yield seg.fetch(), 0, seg.length
            return
        if self.runs is None:
            for extent in self.extents:
                offset = 0
                for position, seg in enumerate(extent.segments):
                    yield extent.fetch(position, offset), 0, seg.length
                    offset += seg.block_length
            return
        for position, start, length in self.runs:
            extent = self.extents[position]
            plain = blocks = 0   # where each segment starts: in the plaintext, in the streams
            for index, seg in enumerate(extent.segments):
                if length <= 0:
                    break
                end = plain + seg.length
                if start < end:
                    take = min(end - start, length)
                    yield extent.fetch(index, blocks), start - plain, take
                    start, length = start + take, length - take
                plain, blocks = end, blocks + seg.block_length
            if length > 0:
                raise BadSegmentRecord("a large file's run goes past the end of its extent: "
                                       "the record is damaged")

    def first_segment_length(self) -> int:
        """What a full segment of this file holds: its extents' first
        segments (no record's later segment sizes a restore's buffers)."""
        if self.extents is None:
            return self.segments[0].length if self.segments else 0
        return max((e.segments[0].length for e in self.extents if e.segments), default=0)

    def segments_length(self) -> int:
        """The plaintext bytes of all the segments (of the runs: the file's)."""
        if self.extents is None:
            return sum(s.length for s in self.segments)
        if self.runs is not None:
            return sum(run[2] for run in self.runs)
        return sum(s.length for e in self.extents for s in e.segments)

    def holders(self):
        """Every share holder the content uses."""
        for extent in self.extents or ():
            yield from extent.holders
        for seg in self.segments or ():
            yield from seg.holders


def content_from_wire(record):
    kind = record["t"]
    if kind == SMALL:
        return SmallContent(record["size"], record["key"], record["b"], record["o"],
                            record["l"], record.get("z"))
    if kind == LARGE:
        if "segs" in record:
            return LargeContent(record["size"],
                                segments=tuple(StoredSegment.from_wire(s)
                                               for s in record["segs"]))
        extents = tuple(Extent.from_wire(e) for e in record["ext"])
        runs = _runs_from_wire(record.get("runs"), len(extents))
        chunked_id = record.get("cid") if runs is not None else None
        if chunked_id is not None and (type(chunked_id) is not str or len(chunked_id) > 80):
            raise BadSegmentRecord("a chunked file's content id is not a short string: the "
                                   "record is damaged")
        return LargeContent(record["size"], extents=extents, runs=runs, chunked_id=chunked_id)
    if kind == EMPTY:
        return EmptyContent(record["size"])
    raise ValueError(f"unknown content record kind {kind!r}")


def _runs_from_wire(rows, extents: int):
    """A chunked file's runs, checked for shape (None: a file without)."""
    if rows is None:
        return None
    ok = type(rows) is list and all(
        type(row) is list and len(row) == 3 and all(type(v) is int and v >= 0 for v in row)
        and row[0] < extents and row[2] > 0 for row in rows)
    if not ok:
        raise BadSegmentRecord("a large file's runs are not [extent, offset, length] rows of "
                               "its extents: the record is damaged")
    return tuple(tuple(row) for row in rows)


def content_kind(record) -> str:
    """EMPTY, SMALL or LARGE, of a content record as written."""
    return record["t"]


def content_size(record) -> int:
    """The plaintext size a content record as written gives its file."""
    return record.get("size", 0)


def bundle_of(record) -> Optional[str]:
    """The bundle id a content record as written is in, if any."""
    return record.get("b") if record["t"] == SMALL else None


class Bundle(NamedTuple):
    """Small files coded together: k-of-n shares of `length` bytes."""
    length: int
    k: int
    n: int
    block_length: int
    holders: Tuple[ShareHolder, ...]

    def to_wire(self) -> dict:
        return {"len": self.length, "k": self.k, "n": self.n, "bl": self.block_length,
                "shares": holders_to_wire(self.holders)}

    @classmethod
    def from_wire(cls, record) -> "Bundle":
        return cls(record["len"], record["k"], record["n"], record["bl"],
                   holders_from_wire(record["shares"]))

    @staticmethod
    def holders_from_wire(record) -> tuple:
        """Only the holders of a bundle record as written."""
        return holders_from_wire(record["shares"])

    def moved(self, index: int, node: str) -> "Bundle":
        """The same bundle with share `index` on `node` instead."""
        return self._replace(holders=tuple(h._replace(node=node) if h.index == index else h
                                           for h in self.holders))


class Challenge(NamedTuple):
    """A VERIFY challenge: BLAKE3(nonce + share[offset:offset+span]) should
    start with `digest`. A share's nonce derives from its key (nonce None);
    a stream's is recorded."""
    offset: int
    span: int
    digest: str
    nonce: Optional[str] = None

    def to_wire(self) -> list:
        if self.nonce is None:
            return [self.offset, self.span, self.digest]
        return [self.offset, self.span, self.digest, self.nonce]

    @classmethod
    def from_wire(cls, row) -> "Challenge":
        return cls(*row)  # three fields or four


def challenges_to_wire(challenges) -> list:
    return [c.to_wire() for c in challenges]


# --- shared with the version-2 records (repository/tree_records.py) -----------
# BlobRef is here, not there, so the local index (which keeps them) reads
# it as it reads every other record: the client's floor imports no room above.

def _need(condition, what: str) -> None:
    if not condition:
        raise BadRecord(what)


def _is_int(value) -> bool:
    return type(value) is int and value >= 0


def is_hex(value, length: int = 64) -> bool:
    if type(value) is not str or len(value) != length:
        return False
    try:
        bytes.fromhex(value)
    except ValueError:
        return False
    return True


class BlobRef(NamedTuple):
    """Where a blob is: its id and the range of a bundle's data holding it."""
    blob_id: str
    bundle: str
    offset: int
    length: int

    def to_wire(self) -> list:
        return [self.blob_id, self.bundle, self.offset, self.length]

    @classmethod
    def from_wire(cls, row) -> "BlobRef":
        _need(type(row) is list and len(row) == 4 and is_hex(row[0]) and is_hex(row[1])
              and _is_int(row[2]) and _is_int(row[3]) and row[3] > 0, "a bad blob reference")
        return cls(*row)
