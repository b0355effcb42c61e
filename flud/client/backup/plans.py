"""A large file's extents planned one ahead of the one being sent.

An extent's streams declare their sizes when they open, before its first
segment is sent, and a compressed segment's blocks are as long as its
compressed bytes: so each segment's compression is planned first (method,
stored length: compression.plan_pieces), from the file, while the extent
before it is being sent. A plan reads a sample of each segment (~32 KiB)
and, if that compresses, the whole segment a SEGMENT_PIECE at a time
through a reader and a buffer of its own (O_DIRECT where the filesystem
allows: the page cache is not touched), compressing without writing: zstd's
output is deterministic, so the sending pass gives the same lengths (a
file that changed in between gives another length: FileChanged). A
compressible extent so costs two reads and two compressions, the first
beside the sending of the one before; one the sample calls incompressible
costs ~0.1 ms a segment.
"""
import mmap

from twisted.internet import defer
from twisted.python.failure import Failure

from flud.client.backup.file_reading import FileChanged, file_reader
from flud.compression import SEGMENT_PIECE, plan_pieces, sample_spans


class ExtentPlans:
    """get(first) fires with [(method, stored length)] of the extent whose
    first segment is `first`; each plan is made in the pool, one at a time,
    and the next extent's is started as soon as one is asked for. close()
    once the file is done (it waits for a plan still running)."""

    def __init__(self, pool, entry, segment_size: int, per_extent: int):
        self.pool, self.entry = pool, entry
        self.segment_size, self.per_extent = segment_size, per_extent
        self.segments = -(-entry.size // segment_size)
        self._reader = file_reader(entry)
        self._piece = mmap.mmap(-1, SEGMENT_PIECE)
        self._made = {}      # first segment -> plans, or the Failure of making them
        self._waiting = {}   # first segment -> [Deferred]
        self._running = None  # the Deferred of the plan being made
        self._closed = False

    def get(self, first: int) -> defer.Deferred:
        if first in self._made:
            self._start(first + self.per_extent)
            made = self._made[first]
            return defer.fail(made) if isinstance(made, Failure) else defer.succeed(made)
        waiter = defer.Deferred()
        self._waiting.setdefault(first, []).append(waiter)
        self._start(first)
        return waiter

    def close(self) -> defer.Deferred:
        self._closed = True
        running = self._running or defer.succeed(None)
        done = defer.Deferred()
        running.addBoth(lambda _: self._close(done))
        return done

    def _close(self, done):
        self._reader.close()
        self._piece = None  # unmapped once no view of it is left (a plan stopped early)
        for waiters in self._waiting.values():
            for waiter in waiters:
                waiter.errback(FileChanged(f"{self.entry.path}: the backup of it stopped"))
        self._waiting.clear()
        done.callback(None)

    def _start(self, first: int) -> None:
        if (self._running is not None or self._closed or first >= self.segments
                or first in self._made):
            return
        count = min(self.per_extent, self.segments - first)
        self._running = self.pool.run(self._plan, first, count)
        self._running.addBoth(self._planned, first)

    def _planned(self, result, first):
        self._running = None
        self._made[first] = result
        waiters = self._waiting.pop(first, [])
        for waiter in waiters:
            if isinstance(result, Failure):
                waiter.errback(result)
            else:
                waiter.callback(result)
        if self._waiting:
            self._start(min(self._waiting))
        elif waiters:  # the sender is at this extent: the next one is planned now
            self._start(first + self.per_extent)
        return None  # a failure is kept for get(), never left unhandled

    def _plan(self, first: int, count: int) -> list:
        """(pool) The plans of segments first..first+count-1."""
        plans = []
        for segment in range(first, first + count):
            start = segment * self.segment_size
            length = min(self.segment_size, self.entry.size - start)
            plans.append(plan_pieces(self._sample(start, length),
                                     lambda: self._pieces(start, length), length))
        return plans

    def _read(self, offset: int, view) -> None:
        self._reader.seek(offset)
        if self._reader.readinto(view) != len(view):
            raise FileChanged(f"{self.entry.path} changed while it was backed up")

    def _sample(self, start: int, length: int) -> bytes:
        view = memoryview(self._piece)
        parts = []
        for offset, size in sample_spans(length):
            self._read(start + offset, view[:size])
            parts.append(bytes(view[:size]))
        return b"".join(parts)

    def _pieces(self, start: int, length: int):
        view = memoryview(self._piece)
        for offset in range(0, length, SEGMENT_PIECE):
            size = min(SEGMENT_PIECE, length - offset)
            self._read(start + offset, view[:size])
            yield view[:size]
