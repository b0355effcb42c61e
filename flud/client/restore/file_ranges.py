"""Reading a file of a version-2 snapshot by range (for `flud mount`).

A small file comes whole (it is small: its bundle range, checked against
its convergent key) and the last SMALL_CACHE_BYTES of them are kept. A large
file is read segment by segment: a read of [offset, offset+size) fetches
only the segments it touches (from their holders, checked, decoded,
decrypted and decompressed as a restore does), and the next READ_AHEAD
segments start coming while the reader consumes this one, so a sequential
reader (cat, cp) finds them waiting. Segments are kept in a cache of at
most SEGMENT_CACHE_BYTES; content records (a large file's segment table) in
one of CONTENT_RECORDS. Memory is bounded by those numbers, never by the
size of a file.
"""
import bisect
import collections

from twisted.internet import defer

from flud.client.records import SmallContent, content_from_wire
from flud.client.restore.small_fetch import SmallFetch
from flud.client.restore.tree_restore import TreeContents
from flud.client.repository.segments import fetch_segment
from flud.client.repository.tree_records import LargeRef, SmallRef
from flud.compression import decompress

SMALL_CACHE_BYTES = 8 * 1024 * 1024
SEGMENT_CACHE_BYTES = 48 * 1024 * 1024
CONTENT_RECORDS = 64
READ_AHEAD = 8


class _Segments:
    """A large file's pieces (records.LargeContent.pieces: whole segments,
    or for a file cut into chunks ranges of them): where each starts in the
    file, its segment's fetch, and the range of that segment it is."""

    def __init__(self, content):
        self.starts, self.fetches, self.cuts = [], [], []
        position = 0
        for fetch, start, length in content.pieces():
            self.starts.append(position)
            self.fetches.append(fetch)
            self.cuts.append((start, length))
            position += length
        self.size = position

    def covering(self, offset: int, end: int) -> range:
        first = bisect.bisect_right(self.starts, offset) - 1
        last = bisect.bisect_left(self.starts, end) - 1
        return range(max(first, 0), max(last, first) + 1)


class FileReader:
    """ctx: a JobContext (network, pool, coder, secret); repo: an open
    Repository (its holder map: where blobs and moved shares are)."""

    def __init__(self, ctx, repo, report_bad=lambda node, key, why: None):
        self.ctx = ctx
        self.repo = repo
        self.contents = TreeContents(repo)
        self._small = SmallFetch(ctx, repo.bundles, ctx.coder, report_bad, lambda n: None)
        self._report_bad = report_bad
        self._small_cache = collections.OrderedDict()   # key -> plaintext
        self._small_bytes = 0
        self._records = collections.OrderedDict()       # content id -> _Segments
        self._segments = collections.OrderedDict()      # (content id, i) -> Deferred | bytes
        self._segment_bytes = 0

    @defer.inlineCallbacks
    def read(self, entry, offset: int, size: int):
        """Bytes [offset, offset+size) of a file's DirEntry (fewer at its end)."""
        end = min(offset + size, entry.size)
        if offset >= end or entry.ref is None:
            return b""
        if isinstance(entry.ref, SmallRef):
            data = yield self._small_file(entry)
            return bytes(data[offset:end])
        if not isinstance(entry.ref, LargeRef):
            raise ValueError("not a file")
        segments = yield self._segment_table(entry.ref)
        wanted = segments.covering(offset, end)
        parts = []
        for i in wanted:
            data = yield self._segment(entry.ref.content, segments, i)
            cut, length = segments.cuts[i]
            if cut or length != len(data):
                data = memoryview(data)[cut:cut + length]
            start = segments.starts[i]
            parts.append(bytes(data[max(offset - start, 0):end - start]))
        for i in range(wanted.stop, min(wanted.stop + READ_AHEAD, len(segments.fetches))):
            self._segment(entry.ref.content, segments, i)   # read ahead: not waited for
        return parts[0] if len(parts) == 1 else b"".join(parts)

    @defer.inlineCallbacks
    def _small_file(self, entry):
        ref = entry.ref
        cached = self._small_cache.get(ref.key)
        if cached is not None:
            self._small_cache.move_to_end(ref.key)
            return cached
        record = self.contents.small(ref, entry.size)
        content = content_from_wire(record)
        assert isinstance(content, SmallContent)
        data = yield self._small.fetch(content)
        if data is None:
            raise IOError(f"{entry.name}: its bytes do not match their key")
        if len(data) <= SMALL_CACHE_BYTES // 4:
            self._small_cache[ref.key] = data
            self._small_bytes += len(data)
            while self._small_bytes > SMALL_CACHE_BYTES:
                _, old = self._small_cache.popitem(last=False)
                self._small_bytes -= len(old)
        return data

    @defer.inlineCallbacks
    def _segment_table(self, ref):
        table = self._records.get(ref.content)
        if table is not None:
            self._records.move_to_end(ref.content)
            return table
        record = yield self.contents.large(ref)
        table = _Segments(content_from_wire(record))
        self._records[ref.content] = table
        while len(self._records) > CONTENT_RECORDS:
            self._records.popitem(last=False)
        return table

    def _segment(self, content_id: str, segments: _Segments, i: int):
        """Deferred: the plaintext of piece i's whole segment (one fetch
        however many ask; pieces of one segment share it)."""
        key = (content_id, segments.fetches[i].key)
        held = self._segments.get(key)
        if held is not None:
            self._segments.move_to_end(key)
            return held.wait() if isinstance(held, _Pending) else defer.succeed(held)
        fetch = segments.fetches[i]
        self._make_room(fetch.length)
        pending = self._segments[key] = _Pending(fetch.length)
        self._segment_bytes += fetch.length

        def opened(stored):
            if fetch.method is not None:   # decompressed in the pool, off the reactor
                return self.ctx.pool.run(decompress, fetch.method, bytes(stored), fetch.length)
            # fetch_segment joined its pieces into bytes already: no copy
            return stored if isinstance(stored, bytes) else bytes(stored)

        def got(data):
            if self._segments.get(key) is pending:
                self._segments[key] = data
            pending.fire(data)

        def failed(failure):
            if self._segments.get(key) is pending:
                del self._segments[key]
                self._segment_bytes -= pending.size
            pending.fail(failure)   # a read-ahead nobody waits for is dropped quietly

        d = fetch_segment(self.ctx.network, self.ctx.pool, self.ctx.coder, self.ctx.secret,
                          fetch, self._report_bad)
        d.addCallback(opened)
        d.addCallbacks(got, failed)
        return pending.wait()

    def _make_room(self, size: int) -> None:
        """Drop the least recently used segments that have come (never one
        still coming) until `size` more bytes fit."""
        for key in list(self._segments):
            if self._segment_bytes + size <= SEGMENT_CACHE_BYTES:
                return
            held = self._segments[key]
            if not isinstance(held, _Pending):
                del self._segments[key]
                self._segment_bytes -= len(held)


class _Pending:
    """A segment being fetched: each reader waits on a Deferred of its own
    (a Deferred hands its result on to one chain only)."""

    def __init__(self, size: int):
        self.size = size
        self._waiting = []

    def wait(self) -> defer.Deferred:
        d = defer.Deferred()
        self._waiting.append(d)
        return d

    def fire(self, data) -> None:
        waiting, self._waiting = self._waiting, []
        for d in waiting:
            d.callback(data)

    def fail(self, failure) -> None:
        waiting, self._waiting = self._waiting, []
        for d in waiting:
            d.errback(failure)
