"""A large file cut into content-defined chunks: only new chunks are sent.

A large file this home backed up before (under its path) is read once in
the pool before it is sent (`chunk_file`): the chunker (flud/chunker.py)
cuts it where its content says, and each chunk is named by a keyed BLAKE3
of its plaintext (client/repository/chunk_ids.py: restore cuts a file in
place the same way to check it). The client index knows the chunks of
the extents this home published ("C" + chunk id -> where its bytes are: an
extent's row and a range of its plaintext, in one or two extents), so a
file changed by an insert, an append or a moved region is planned as
(`FilePlan`):

- runs of known chunks: ranges of extents already stored (their own
  earlier version's, or any other file's), named again and not sent;
- the new chunks, back to back: the file's *pack*, sent as extents like
  any large file (large_files.py) but read through a `PackReader`, which maps
  the pack's offsets to the file's. Full segments, one segment's footprint.

A file seen for the first time whose first chunks (PROBE_CHUNKS x the
average: one read of 2 MiB, where the first cut falls ~95% of the time) are
all new, or any file while the index holds no chunk at all, is sent whole, as before
chunks, and cut as it is read for sending (`FeedingReader`): one read, not
two, and its chunks are known for the next backup. A new path whose first
chunks are known (a copy, a rename) is read first like a changed file.

The content record lists every extent the file uses and its runs
(records.LargeContent, version-3 large record): restore writes each run's
range of its extent at its place in the file.

A chunk is only found in extents whose row the index holds: published
ones ("E"), never those of a killed run (rolled back) nor those prune has
begun to delete (ClientIndex.drop_stored removes their rows first); and a
chunk's row names its extent's id too, so a row left pointing at another
extent of the same first segment is not used.
"""
import dataclasses
from bisect import bisect_right

from flud.chunker import ChunkSizes
from flud.client.backup.file_reading import FileChanged
from flud.client.records import Extent, LargeContent, extent_id
from flud.client.repository import chunk_ids
from flud.client.repository.chunk_ids import (ChunkFeeder, ShortRead, chunk_id_key,  # noqa: F401
                                              chunked_content_id)

CHUNK_PREFIX = "C"          # a chunk's index row: "C" + its id (hex)
EXTENT_PREFIX = "E"         # as large_files.py's: "E" + its first segment's key
PROBE_CHUNKS = 2            # a new file's first bytes looked up: this x the average


class FeedingReader:
    """A file read as SequentialReader reads it, every byte also fed to a
    ChunkFeeder: a file seen for the first time is cut into chunks as it is
    sent (one read), not read once more before."""

    def __init__(self, raw, feeder: ChunkFeeder):
        self._raw, self._feeder, self._at = raw, feeder, 0

    def seek(self, offset: int) -> None:
        self._raw.seek(offset)
        self._at = offset

    def readinto(self, buffer) -> int:
        got = self._raw.readinto(buffer)
        with memoryview(buffer) as view:
            self._feeder.feed(self._at, view.cast("B")[:got])
        self._at += got
        return got

    def close(self) -> None:
        self._raw.close()


def chunk_file(entry, secret: bytes, sizes: ChunkSizes, id_key: bytes, limit=None) -> list:
    """(pool) [(offset, length, chunk id)] of the scanned file (the chunk
    pass of client/repository/chunk_ids.py). limit: only the whole chunks
    of its first `limit` bytes (a probe)."""
    try:
        return chunk_ids.chunk_file(entry.path, entry.size, secret, sizes, id_key, limit)
    except ShortRead:
        raise FileChanged(f"{entry.path} changed while it was backed up") from None


def knows_any(index, chunks) -> bool:
    """Whether the index holds any of these chunks in an extent it still has."""
    rows = {}
    return any(_known(index, cid, length, rows) is not None for _, length, cid in chunks)


class FilePlan:
    """What one large file is, in chunks: known ranges of stored extents
    and the new chunks (its pack). Made on the reactor thread from
    chunk_file's list and the index."""

    def __init__(self, size: int):
        self.size = size
        self.pieces = []      # in file order: [extent id, offset, length] or [None, pack offset, length]
        self.extents = {}     # extent id -> extent record as written (the known ones)
        self.spans = []       # the pack: (file offset, length), back to back
        self.new_chunks = []  # (chunk id, pack offset, length)
        self.pack_size = 0
        self.chunk_ids = []   # every chunk's id, in order (the content id)
        self.known_bytes = 0

    @classmethod
    def all_new(cls, size: int, chunks) -> "FilePlan":
        """A file sent whole (its pack is the file), cut as it was sent."""
        if sum(length for _, length, _ in chunks) != size:
            raise FileChanged(f"a file of {size} bytes was read as "
                              f"{sum(length for _, length, _ in chunks)}: it changed")
        plan = cls(size)
        plan.chunk_ids = [cid for _, _, cid in chunks]
        plan.new_chunks = [(cid, offset, length) for offset, length, cid in chunks]
        plan.pieces = [[None, 0, size]] if size else []
        plan.spans = [(0, size)]
        plan.pack_size = size
        return plan

    @classmethod
    def make(cls, size: int, chunks, index) -> "FilePlan":
        plan = cls(size)
        rows = {}     # row key -> extent record (or None), read once per file
        in_pack = {}  # chunk id -> pack offset: a chunk twice in the file is sent once
        for offset, length, cid in chunks:
            plan.chunk_ids.append(cid)
            parts = _known(index, cid, length, rows)
            if parts is not None:
                for extent, start, take in parts:
                    plan.extents[extent_id(extent)] = extent
                    plan._add([extent_id(extent), start, take])
                plan.known_bytes += length
            elif cid in in_pack:
                plan._add([None, in_pack[cid], length])
                plan.known_bytes += length
            else:
                in_pack[cid] = plan.pack_size
                plan.new_chunks.append((cid, plan.pack_size, length))
                plan._add([None, plan.pack_size, length])
                if plan.spans and sum(plan.spans[-1]) == offset:
                    plan.spans[-1] = (plan.spans[-1][0], plan.spans[-1][1] + length)
                else:
                    plan.spans.append((offset, length))
                plan.pack_size += length
        return plan

    def _add(self, piece) -> None:
        last = self.pieces[-1] if self.pieces else None
        if last is not None and last[0] == piece[0] and last[1] + last[2] == piece[1]:
            last[2] += piece[2]
        else:
            self.pieces.append(piece)

    def pack_entry(self, entry):
        """The scan entry the extents are sent from: the pack's size."""
        return dataclasses.replace(entry, size=self.pack_size)

    def reader(self, raw) -> "PackReader":
        return PackReader(raw, self.spans)

    def content_id(self) -> str:
        return chunked_content_id(self.chunk_ids)

    def content(self, sent, extent_plain: int) -> LargeContent:
        """The file's content record: `sent` are the Extent records of its
        pack, in order, each `extent_plain` bytes of it (the last less)."""
        used, positions = [], {}

        def position(xid, record):
            if xid not in positions:
                positions[xid] = len(used)
                used.append(record)
            return positions[xid]

        runs = []
        sent_ids = [extent_id(e.to_wire()) for e in sent]
        for xid, start, length in self.pieces:
            if xid is not None:
                runs.append([position(xid, Extent.from_wire(self.extents[xid])), start, length])
                continue
            while length > 0:   # a range of the pack: in one or more of the sent extents
                number, at = divmod(start, extent_plain)
                take = min(length, extent_plain - at)
                runs.append([position(sent_ids[number], sent[number]), at, take])
                start, length = start + take, length - take
        merged = []
        for run in runs:
            if merged and merged[-1][0] == run[0] and sum(merged[-1][1:]) == run[1]:
                merged[-1][2] += run[2]
            else:
                merged.append(run)
        return LargeContent(self.size, extents=tuple(used), runs=tuple(map(tuple, merged)),
                            chunked_id=self.content_id())

    def chunk_rows(self, sent, extent_plain: int) -> list:
        """The index rows of the new chunks: ("C" + id hex, [[extent row
        key, extent id, offset, length], ...]) (a chunk may straddle two
        extents)."""
        rows = []
        for cid, start, length in self.new_chunks:
            parts = []
            while length > 0:
                number, at = divmod(start, extent_plain)
                take = min(length, extent_plain - at)
                extent = sent[number]
                parts.append([EXTENT_PREFIX + extent.segments[0].key,
                              extent_id(extent.to_wire()), at, take])
                start, length = start + take, length - take
            rows.append((CHUNK_PREFIX + cid.hex(), parts))
        return rows


def _known(index, cid: bytes, length: int, rows: dict):
    """[(extent record, offset, length)] where the index says the chunk is,
    or None if it knows no such chunk in an extent it still holds."""
    found = index.segment(CHUNK_PREFIX + cid.hex())
    if not found:
        return None
    parts = []
    for row_key, xid, start, take in found:
        if row_key not in rows:
            rows[row_key] = index.segment(row_key)
        extent = rows[row_key]
        if extent is None or not extent.get("shares") or extent_id(extent) != xid:
            return None
        if start + take > sum(seg[1] for seg in extent["segs"]):
            return None
        parts.append((extent, start, take))
    if sum(p[2] for p in parts) != length:
        return None
    return parts


class PackReader:
    """The pack (a file's new chunks, back to back) read like a file:
    seek(pack offset), readinto(buffer) across the file's spans."""

    def __init__(self, raw, spans):
        self._raw = raw
        self._spans = spans
        self._starts = []
        at = 0
        for _, length in spans:
            self._starts.append(at)
            at += length
        self._size = at
        self._at = 0

    def seek(self, offset: int) -> None:
        self._at = offset

    def readinto(self, buffer) -> int:
        view = memoryview(buffer).cast("B")
        filled = 0
        while filled < len(view) and self._at < self._size:
            number = bisect_right(self._starts, self._at) - 1
            file_offset, length = self._spans[number]
            inside = self._at - self._starts[number]
            take = min(len(view) - filled, length - inside)
            self._raw.seek(file_offset + inside)
            got = self._raw.readinto(view[filled:filled + take])
            filled += got
            self._at += got
            if got != take:
                break
        return filled

    def close(self) -> None:
        self._raw.close()
