"""A backup's large files: each in extents (flud/client/repository/extents.py), from
one segment's footprint per file used in two halves (see _extent_once).

Each segment is compressed in its own buffer before it is encrypted (its
key still from the plaintext) unless a sample says it will not compress or
it would save too little, as its extent's plan says (plans.py: made one
extent ahead, since a stream declares its size when it opens).

LargeFiles is a part of the backup run (run.py): it is given the job's
context, the run's content log and tallies, and nothing else of the run.
"""
import functools
import hashlib
import logging
import mmap
import os

from twisted.internet import defer
from twisted.python.failure import Failure

from flud.client.repository.extents import (BLOCK_HASH, MAX_EXTENT_ATTEMPTS, ExtentFailed, ExtentUpload,
                                 StreamHashes, segments_per_extent, stream_id)
from flud.client.gather import settle_all
from flud.client.backup.chunked import (PROBE_CHUNKS, ChunkFeeder, FeedingReader, FilePlan,
                                        chunk_file, chunk_id_key, knows_any)
from flud.client.backup.file_reading import (FileChanged, changed, file_reader, read_into,
                                             why_skipped)
from flud.client.backup.plans import ExtentPlans
from flud.client.records import (Extent, ExtentSegment, LargeContent, ShareHolder,
                                 challenges_to_wire, extent_id)
from flud.client.repository.segments import StoreFailed, add_parity, prepare_primaries
from flud.compression import compress_in_place
from flud.crypto import segment_convergence

log = logging.getLogger("flud.client")

# What one large file may hold: the ciphertext of a few segments and the
# parity of one (see _extent_once). 2 MiB segments (the default) at 4-of-8:
# 2 + 2 MiB, one segment at a time in two halves. 1 MiB ones: 3 x 1 + 1 MiB,
# so the next segments are read while one is coded (measured on 1 GiB: +7%
# up, but a restore then makes twice the RETRIEVEs: -20% down).
FILE_FOOTPRINT = 4 * 1024 * 1024
MAX_SEGMENT_WINDOW = 3
# Parity sets made for all the large files of a backup at most (ParitySets):
# two coding in the pool's two threads and two being taken by their streams.
MAX_PARITY_SETS = 4
EXTENT_PREFIX = "E"          # an extent's index row: "E" + its first segment's key


class _SegmentBuffers:
    """One large file's ciphertext buffers (`window` segments), used again
    for every segment. Made once per file: a fresh 2 MiB buffer (and its
    parity) per segment cost ~1.1 ms of page faults and zeroing, a tenth of
    the client's CPU per segment. Page aligned (anonymous maps), so O_DIRECT
    reads land in them directly.

    A buffer goes back only once the streams have taken it (the wire lets go
    of a fed buffer only then, FedSource); a failed extent's cancelled
    streams may still send a view of it, but those requests are cancelled
    and every stream is checked against its key before a node keeps it."""

    def __init__(self, window: int, segment_size: int):
        self.ciphertexts = [mmap.mmap(-1, segment_size) for _ in range(window)]

    def for_extent(self):
        """(the ciphertexts as a queue, the one-parity-at-a-time slot) for one extent."""
        reading = defer.DeferredQueue()
        for buffer in self.ciphertexts:
            reading.put(buffer)
        return reading, defer.DeferredSemaphore(1)


class ParitySets:
    """The parity buffers of a backup's large files, shared by them: a file
    holds a set only while it codes a segment's parity and its streams take
    it, and at most `count` sets are made. Each file holding a set of its own
    for its whole upload cost 2 MiB of RSS per file: 16 files at once peaked
    at 113 MB against 104 with buffers made per segment."""

    def __init__(self, count: int, parity_count: int, block_length: int):
        self.count, self._made = count, 0
        self._parity_count, self._block_length = parity_count, block_length
        self._free = defer.DeferredQueue()

    def get(self) -> defer.Deferred:
        if not self._free.pending and self._made < self.count:
            self._made += 1
            return defer.succeed([memoryview(mmap.mmap(-1, self._block_length))
                                  for _ in range(self._parity_count)])
        return self._free.get()

    def put(self, parity_set) -> None:
        self._free.put(parity_set)


class _SentExtent:
    """An extent whose streams are all fed; `committed` fires once every
    node has committed its stream (and the index knows the extent)."""

    def __init__(self, first, count, record, digests, committed):
        self.first, self.count = first, count
        self.record, self.digests, self.committed = record, digests, committed
        self.attempt = 1


class _ResendExtent(Exception):
    """An earlier run's extent no longer matches the file: send it anew."""


def _hash_blocks(hashes, shares, indexes):
    for i in indexes:
        hashes[i].update(shares[i])


def _squeeze(entry, plan, data):
    """A segment compressed in place as planned: (method, its stored bytes)."""
    method, stored = plan
    if compress_in_place(data, len(data)) != stored:
        raise FileChanged(f"{entry.path} changed while it was backed up")
    return method, data[:stored]


def segment_geometry(coder, segment_size: int):
    """(window, footprint) of one large file: it holds the ciphertext (the k
    primary shares are views of it) of up to `window` segments and the n-k
    parity shares of one."""
    parity = coder.block_length(segment_size) * (coder.n - coder.k)
    window = max(1, min(MAX_SEGMENT_WINDOW, (FILE_FOOTPRINT - parity) // segment_size))
    return window, window * segment_size + parity


class LargeFiles:
    """A backup's large files, up to `parallel_files` at once. contents: the
    run's ContentLog; counters and summary: the run's tallies (updated on
    the reactor thread only)."""

    def __init__(self, ctx, segment_size, parallel_files, contents, counters, summary,
                 chunk_sizes=None):
        self.ctx = ctx
        coder = ctx.coder
        self.k, self.n = coder.k, coder.n
        self.segment_size = segment_size
        self.parallel_files = parallel_files
        self.segment_window, self.segment_footprint = segment_geometry(coder, segment_size)
        # Parity buffers, shared by the large files (ParitySets): a file
        # holds a set only while its parity is coded and taken.
        self.parity_sets = ParitySets(min(parallel_files, MAX_PARITY_SETS), self.n - self.k,
                                      coder.block_length(segment_size))
        self.contents = contents
        self.counters = counters
        self.summary = summary
        # Content-defined chunks (chunked.py), or None: fixed extents only.
        self.chunk_sizes = chunk_sizes
        self._chunk_id_key = chunk_id_key(ctx.secret) if chunk_sizes is not None else None
        self._index_has_chunks = None   # asked once a run
        # extent id -> share holders of the extents this run stored (or
        # adopted from a killed run): the only ones its map page names. An
        # extent reused from a published run keeps whatever the map says
        # (repair may have moved it since).
        self.stored_extents = {}

    @defer.inlineCallbacks
    def send_all(self, large, content_of, skip):
        """Every large file in `large`; content_of[path] = its content id,
        or skip(path, why) if it could not be read."""
        slots = defer.DeferredSemaphore(self.parallel_files)

        @defer.inlineCallbacks
        def one(entry):
            try:
                content_of[entry.path] = yield self._large(entry)
            except (OSError, FileChanged) as err:
                skip(entry.path, why_skipped(err))

        yield settle_all([slots.run(one, e) for e in large])

    @defer.inlineCallbacks
    def _large(self, entry):
        """A large file goes in extents (flud/client/repository/extents.py), one after
        another, each from one segment's footprint (see _extent_once). An
        extent's nodes commit it while the next one is sent. Cut into
        chunks (chunked.py), only its new chunks are sent: its pack."""
        transfer = self.ctx.monitor.transfer("upload", entry.path)
        extents, digests = [], []
        chunked = feeder = None
        committing = []  # sent extents whose commit is still to be seen
        try:
            # The process budget, shared by every transfer: when it is spent
            # this waits instead of growing memory. Claimed whole, for the
            # file: a half claimed alone could wait on a budget its other
            # half holds.
            yield transfer.reserve(self.segment_footprint, "segment")
            # The chunk pass's read buffer (repository/chunk_ids.READ_PIECE) lives inside the
            # footprint just claimed: the segment buffers are made after it.
            # A file with holes is sent as its data ranges (client/sparse.py):
            # it keeps fixed extents (the chunk pass would read the holes).
            chunking = self.chunk_sizes is not None and getattr(entry, "ranges", None) is None
            if chunking and (yield self._seen(entry)):
                # backed up before: its known chunks are found first (a second read)
                chunks = yield self.ctx.pool.run(chunk_file, entry, self.ctx.secret,
                                                 self.chunk_sizes, self._chunk_id_key)
                chunked = FilePlan.make(entry.size, chunks, self.ctx.index)
                self.counters["bytes_known"] += chunked.known_bytes
                self.ctx.progress.bytes_done(chunked.known_bytes)
            elif chunking:   # new here: cut as it is sent
                feeder = ChunkFeeder(self.ctx.secret, self.chunk_sizes, self._chunk_id_key)
            sent = entry if chunked is None else chunked.pack_entry(entry)
            segments = -(-sent.size // self.segment_size)
            buffers = _SegmentBuffers(self.segment_window, self.segment_size)
            per_extent = segments_per_extent(self.segment_size)
            with file_reader(entry) as raw:
                f = raw if chunked is None else chunked.reader(raw)
                if feeder is not None:
                    f = FeedingReader(raw, feeder)
                plans = ExtentPlans(self.ctx.pool, sent, self.segment_size, per_extent,
                                    wrap=None if chunked is None else chunked.reader)
                try:
                    read = (sent, f, buffers, plans)
                    for first in range(0, segments, per_extent):
                        sent = yield self._extent(read, first, min(per_extent, segments - first))
                        digests.extend(sent.digests)
                        committing.append(sent)
                        if len(committing) > 1:
                            extents.append((yield self._committed(read, committing[0])).record)
                            committing.pop(0)
                    if committing:
                        extents.append((yield self._committed(read, committing[0])).record)
                        committing.pop(0)
                except GeneratorExit:
                    # the run was abandoned (a killed job's frames collected):
                    # nothing may be waited for any more
                    plans.close()
                    raise
                except BaseException:
                    yield plans.close()
                    raise
                yield plans.close()
            if changed(entry, os.stat(entry.path)):
                raise FileChanged(f"{entry.path} changed while it was backed up")
        except GeneratorExit:
            raise
        except BaseException:
            # Their commits still count: a run that is started again then
            # finds those extents sent.
            yield settle_all([s.committed for s in committing]).addErrback(lambda _: None)
            raise
        finally:
            transfer.close()
        self.ctx.progress.file_done(0)
        if feeder is not None:
            chunked = FilePlan.all_new(entry.size, feeder.finish())
        if chunked is not None:
            return self._chunked_content(chunked, extents)
        content_id = "L" + hashlib.sha256(b"".join(digests)).hexdigest()
        if content_id in self.contents:
            self.summary["dedup"] += 1
            return content_id
        return self.contents.remember(content_id, LargeContent(entry.size, extents=tuple(extents)))

    @defer.inlineCallbacks
    def _seen(self, entry):
        """Whether a large file may hold chunks stored before: backed up
        before under its path, or its first chunks are (chunked.py)."""
        if self._index_has_chunks is None:   # none yet (a new home, or one from
            # before chunks): no file can hold any, and none is read twice
            self._index_has_chunks = self.ctx.index.has_chunks()
        if not self._index_has_chunks:
            return False
        if self.ctx.index.has_file(entry.path):
            return True
        first = yield self.ctx.pool.run(chunk_file, entry, self.ctx.secret, self.chunk_sizes,
                                        self._chunk_id_key,
                                        PROBE_CHUNKS * self.chunk_sizes.average)
        return knows_any(self.ctx.index, first)

    def _chunked_content(self, plan, extents):
        """A chunked file's content id; its new chunks go to the index (they
        count once the run publishes: run_rows.py)."""
        extent_plain = segments_per_extent(self.segment_size) * self.segment_size
        self.ctx.index.add_segments(plan.chunk_rows(extents, extent_plain))
        content_id = plan.content_id()
        if content_id in self.contents:
            self.summary["dedup"] += 1
            return content_id
        return self.contents.remember(content_id, plan.content(extents, extent_plain))

    @defer.inlineCallbacks
    def _extent(self, read, first, count, attempt=1):
        """Segments first..first+count-1 sent as one extent (its commit still
        to come: _committed). One that fails is sent again from its start,
        to nodes that have not failed. read: (entry, its reader, its
        buffers, its ExtentPlans)."""
        entry, f = read[:2]
        resume = True
        while True:
            f.seek(first * self.segment_size)
            try:
                sent = yield self._extent_once(*read, first, count, resume)
            except _ResendExtent:
                resume = False
                continue
            except ExtentFailed as err:
                attempt = self._next_attempt(entry, attempt, err)
                continue
            sent.attempt = attempt
            return sent

    @defer.inlineCallbacks
    def _committed(self, read, sent):
        """Waits for a sent extent's commit; one that fails is sent again."""
        while True:
            try:
                yield sent.committed
                return sent
            except ExtentFailed as err:
                attempt = self._next_attempt(read[0], sent.attempt, err)
                sent = yield self._extent(read, sent.first, sent.count, attempt)

    def _next_attempt(self, entry, attempt, err):
        if err.newly_failed:
            # The attempt took nodes out of service that placement could not
            # have known were gone: not counted against the extent. Each such
            # retry takes at least one more node out, so they come to an end.
            log.warning("an extent of %s failed on %s (%d node(s) newly failed); sending it "
                        "again", entry.path, err, err.newly_failed)
            return attempt
        if attempt >= MAX_EXTENT_ATTEMPTS:
            raise StoreFailed(f"an extent of {entry.path} failed {attempt} times, last on "
                              f"{err}. Check the nodes (`flud testnet status`) and run the "
                              f"backup again.")
        log.warning("an extent of %s failed on %s; sending it again", entry.path, err)
        return attempt + 1

    @defer.inlineCallbacks
    def _extent_once(self, entry, f, buffers, plans, first, count, resume):
        """One segment's footprint, used in two halves: the next segment is
        read (into the ciphertext half) once this one's primary shares are
        taken by their streams and its parity is coded, while the parity is
        still being taken; its own parity is coded once that is done. So
        reading, coding and sending overlap, and the file still holds at
        most one segment's worth (ciphertext + parity)."""
        sizes = [min(self.segment_size, entry.size - j * self.segment_size)
                 for j in range(first, first + count)]
        reading, coding = buffers.for_extent()  # the ciphertexts; the parity half's turn
        plan = yield plans.get(first)  # [(method, stored length)] a segment
        stream_size = sum(self.ctx.coder.block_length(stored) for _, stored in plan)
        segs, digests, sending = [None] * count, [], []
        upload = hashes = None
        try:
            for pos, length in enumerate(sizes):
                buffer = yield reading.get()
                if any(d.called and isinstance(d.result, Failure) for d in sending):
                    break  # a segment failed: stop reading, report below
                prep = yield self.ctx.pool.run(self.read_segment, entry, f, buffer, length,
                                               hashes, plan[pos])
                digests.append(prep.digest)
                self.counters["bytes_read"] += length
                if pos == 0:
                    if resume:
                        record = yield self._resumed(entry, f, buffer, prep, sizes, digests)
                        if record is not None:
                            return _SentExtent(first, count, record, digests,
                                               defer.succeed(None))
                    nodes, hashes = self._extent_streams(prep, stream_size)
                    yield self.ctx.pool.run(_hash_blocks, hashes, prep.shares, range(self.k))
                    upload = ExtentUpload(self.ctx.network, nodes, stream_size, self.ctx.reactor)
                    yield upload.open()
                sending.append(self._feed_segment(upload, prep, hashes, reading, buffer, coding,
                                                  segs, pos))
                prep = buffer = None
            yield settle_all(sending)
        except BaseException:
            for d in sending:
                d.addErrback(lambda _: None)
            if upload is not None:
                upload.cancel()
            raise
        keys = [h.key.digest() for h in hashes]
        record = Extent(tuple(ShareHolder(i, key.hex(), node.hex()) for i, (key, node)
                              in enumerate(zip(keys, upload.nodes))), tuple(segs))
        committed = upload.finish(keys)
        committed.addCallback(self._extent_committed, record, keys, hashes, sum(sizes),
                              stream_size)
        return _SentExtent(first, count, record, digests, committed)

    def _extent_committed(self, _, record, keys, hashes, length, stream_size):
        # The record and its challenges are kept at once: a run that is
        # interrupted later does not send this extent again (the row counts
        # once this run publishes, else it is an orphan: run_rows.py).
        self.ctx.index.add_challenges([(key.hex(), challenges_to_wire(h.challenges()))
                                   for key, h in zip(keys, hashes)])
        wire = record.to_wire()
        self.ctx.index.add_segment(EXTENT_PREFIX + record.segments[0].key, wire)
        self.stored_extents[extent_id(wire)] = record.holders
        self.counters["stores"] += self.n
        self.counters["bytes_sent"] += self.n * stream_size
        self.ctx.progress.bytes_done(length)

    def _extent_streams(self, prep, stream_size):
        """The extent's n nodes (ranked by its first block) and stream hashes."""
        nodes = self.ctx.network.place(prep.share_keys[0], self.n)
        if len(nodes) < self.n:
            raise StoreFailed(f"only {len(nodes)} nodes are reachable; {self.n} are needed "
                              f"for a large file. Start more nodes or lower n"
                              f"{self.ctx.network.health.quota_note()}.")
        hashes = [StreamHashes(self.ctx.secret, stream_id(prep.share_keys[0], i), stream_size)
                  for i in range(self.n)]
        return nodes, hashes

    @defer.inlineCallbacks
    def _resumed(self, entry, f, buffer, prep, sizes, digests):
        """The record of this extent if an earlier (interrupted) run sent it
        and the file still reads the same (every segment's key matches);
        their digests are added to `digests`."""
        first_key = prep.key.hex()
        row = self.ctx.index.segment(EXTENT_PREFIX + first_key)
        orphan = row is None
        if orphan:   # stored by a killed run, named by no map: adopted if it matches
            row = self.ctx.index.orphan_extent(first_key)
        record = None if row is None else Extent.from_wire(row)
        if record is None or len(record.segments) != len(sizes):
            return None
        for pos in range(1, len(sizes)):
            # Into the first segment's buffer: that segment is settled either way.
            digest, key = yield self.ctx.pool.run(self._segment_key, entry, f, buffer, sizes[pos])
            if key.hex() != record.segments[pos].key:
                raise _ResendExtent()
            digests.append(digest)
        if orphan:
            self.ctx.index.adopt_extent(first_key, row)
            self.stored_extents[extent_id(row)] = record.holders
        self.ctx.progress.bytes_done(sum(sizes))
        return record

    def _segment_key(self, entry, f, buffer, length):
        return segment_convergence(self.ctx.secret, read_into(entry, f, buffer, length))

    def read_segment(self, entry, f, buffer, length, hashes, plan=(None, None)):
        """In the pool: the segment's next `length` bytes of `f` read into
        the file's `buffer`, compressed there if `plan` says so (plans.py),
        encrypted there (prepare_primaries) and its primary shares hashed
        into the streams' `hashes` (if known yet)."""
        data = read_into(entry, f, buffer, length)
        squeeze = None if plan[0] is None else functools.partial(_squeeze, entry, plan)
        prep = prepare_primaries(self.ctx.secret, self.ctx.coder, data, challenges=False,
                                 convergence=segment_convergence, squeeze=squeeze)
        if hashes is not None:
            _hash_blocks(hashes, prep.shares, range(self.k))
        return prep

    def _parity_hashed(self, prep, hashes, parity):
        add_parity(self.ctx.secret, self.ctx.coder, prep, challenges=False, out=parity)
        _hash_blocks(hashes, prep.shares, range(self.k, self.n))

    @defer.inlineCallbacks
    def _feed_segment(self, upload, prep, hashes, reading, buffer, coding, segs, pos):
        """The primaries go to their streams now; the parity once coded."""
        primaries = upload.feed(prep.shares, range(self.k))
        parity = None
        try:
            yield coding.acquire()
            parity_set = None
            try:
                parity_set = yield self.parity_sets.get()
                yield self.ctx.pool.run(self._parity_hashed, prep, hashes, parity_set)
                parity = upload.feed(prep.shares, range(self.k, self.n))
            finally:
                (parity or defer.succeed(None)).addBoth(self._parity_freed, coding, parity_set)
            yield primaries
        except BaseException:
            if parity is not None:
                parity.addErrback(lambda _: None)  # the first failure is reported
            raise
        finally:
            primaries.addErrback(lambda _: None)
            # The primaries are views of the segment's buffer: it is read
            # into again while the parity is still being taken.
            for i in range(min(self.k, len(prep.shares))):
                prep.shares[i] = None
            self._slot_freed(None, reading, buffer)
        yield parity
        segs[pos] = ExtentSegment(prep.key.hex(), prep.length, prep.block_length,
                                  b"".join(key[:BLOCK_HASH] for key in prep.share_keys).hex(),
                                  prep.method, prep.stored if prep.method else None)

    def _slot_freed(self, result, queue, buffer):
        # The buffer goes back (and the next segment is read into it) once
        # the call stack that delivered this answer has unwound.
        self.ctx.reactor.callLater(0, queue.put, buffer)
        return result

    def _parity_freed(self, result, coding, parity_set):
        if parity_set is not None:
            self.ctx.reactor.callLater(0, self.parity_sets.put, parity_set)
        self.ctx.reactor.callLater(0, coding.release)
        return result
