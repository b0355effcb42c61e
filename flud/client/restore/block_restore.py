"""A large file restored block by block.

A full segment's k primary blocks are fetched, checked and written each on
its own: a block is asked for as soon as one of the file's block buffers is
free (BlockBuffers: the window of segments, counted in blocks); a writer
thread checks its hash, decrypts it where it landed (CTR: a block decrypts
alone, from its offset) and writes it at its offset in the file
(PositionalWriter: O_DIRECT, any order); then its buffer goes back. No
block waits for its segment's slowest sibling, or for the blocks before it
to be written.

A segment with a block that fails (its node, or its hash) is restored whole
once its other blocks settle, the segment's way (fetch_segment_pieces: more
holders, zfec decode) into fresh buffers reserved from the budget, one such
repair at a time, and written again whole. So is a segment that is not a
full one (the file's last) or not in an extent, in the window's room.

A segment compressed before it was encrypted is restored whole in the
window's room too: it decompresses only whole. It holds as many block
buffers as its stored bytes take, in place of the pieces fetched, and then
k more for its plaintext (decompressed into them in the pool, then written
block by block as a full segment's are: aligned, O_DIRECT). Those are taken
once its fetch has started, so the next segment is fetched while this one
is decompressed and written. Its plaintext is checked against its key
before any of it is written.
"""
import functools
import logging

import blake3
from twisted.internet import defer

from flud.client.gather import gather
from flud.client.records import BlockHolder
from flud.client.restore.block_buffers import BlockBuffers
from flud.client.restore.block_writer import BlockWriter
from flud.client.repository.segments import FetchFailed, fetch_segment_pieces
from flud.compression import check_method, decompress_pieces
from flud.crypto import crypt_ctr_in_place, segment_key
from flud.errors import BadCompressedData

log = logging.getLogger("flud.client")


def _open_block(data, holder, key, index, block_length, cut=None):
    """The block decrypted where it landed (its bytes cut[0]:cut[1], where
    the file uses only those), or None if it is not the block the manifest
    recorded (pool)."""
    if len(data) != block_length or not holder.fits(data):
        return None
    view = memoryview(data)
    crypt_ctr_in_place(key, view, index * block_length)
    return view if cut is None else view[cut[0]:cut[1]]


def _cut_pieces(pieces, start: int, length: int) -> list:
    """Views of bytes start..start+length of a segment's plaintext, given as
    `pieces` in order (a chunked file uses a range of a segment)."""
    out, at = [], 0
    for piece in pieces:
        view = memoryview(piece)
        lo, hi = max(start - at, 0), min(start + length - at, len(view))
        if lo < hi:
            out.append(view[lo:hi])
        at += len(view)
    return out


def _decompress_into(secret, record, pieces, slots):
    """The plaintext of a compressed segment's decrypted `pieces`, written
    into the `slots` (block buffers, one block of plaintext each, in order)
    and checked against the segment's key (pool). Returns the views of the
    slots that hold it. FetchFailed if it does not decompress or match."""
    size = len(slots[0])
    if record.length > size * len(slots):  # a record that lies: never past the slots
        raise FetchFailed(f"a compressed segment of the file claims {record.length} bytes, "
                          f"more than a segment")
    digest = blake3.blake3()
    filled = 0
    try:
        for chunk in decompress_pieces(record.method, pieces, record.length):
            digest.update(chunk)
            view = memoryview(chunk)
            while len(view):
                slot, at = divmod(filled, size)
                take = min(len(view), size - at)
                slots[slot][at:at + take] = view[:take]
                view = view[take:]
                filled += take
    except BadCompressedData as err:
        raise FetchFailed(f"a compressed segment of the file is damaged: {err}") from None
    if segment_key(secret, digest.digest()).hex() != record.key:
        raise FetchFailed("a compressed segment of the file does not match its key once "
                          "decompressed")
    return [memoryview(slots[i])[:min(size, record.length - i * size)]
            for i in range(-(-record.length // size))]


class _Segment:
    """A segment's part of the file: bytes start..start+length of its
    plaintext (all of it, but in a chunked file) at `offset` in the file."""
    __slots__ = ("record", "offset", "start", "length", "left", "failed", "done")

    def __init__(self, record, offset, start, length, left):
        self.record, self.offset, self.left = record, offset, left
        self.start, self.length = start, length
        self.failed = False
        self.done = defer.Deferred()  # fires once all of it is with the writer

    def whole(self) -> bool:
        return self.start == 0 and self.length == self.record.length

    def blocks(self, k: int) -> list:
        """The primary blocks that hold its part."""
        bl = self.record.block_length
        return [i for i in range(k)
                if i * bl < self.start + self.length and (i + 1) * bl > self.start]


class BlockRestore:
    """One large file's contents (a LargeContent) into a PositionalWriter
    `out`, its memory counted on `transfer`, a window of `window_bytes`.

    ctx: the job's context (its coder: the segments'). report_bad(node hex,
    key hex, why): a block or share that failed; count_retrieves(n):
    RETRIEVEs asked for. block_writer(reactor, out): what writes the blocks
    (BlockWriter's threads, or InlineBlockWriter). block_buffers(size,
    count): the window's buffers. by_blocks: False restores every segment
    whole (the way of a last or damaged segment)."""

    def __init__(self, ctx, content, out, transfer, window_bytes, report_bad, count_retrieves,
                 block_writer=BlockWriter, block_buffers=BlockBuffers, by_blocks=True):
        self.ctx = ctx
        self.content = content
        self.out = out
        self.transfer = transfer
        self.window_bytes = window_bytes
        self.coder = ctx.coder
        self._report_bad = report_bad
        self._count_retrieves = count_retrieves
        self._make_writer = block_writer
        self._make_buffers = block_buffers
        self._by_blocks_allowed = by_blocks
        self.error = None
        # Segments repaired (a block failed) one at a time: each reserves a
        # segment beside the window, so a node that is down costs one more
        # segment's memory, not one per segment it held a block of.
        self._repair_turn = defer.DeferredSemaphore(1)

    @defer.inlineCallbacks
    def run(self, skip=frozenset()):
        """skip: positions of segments the file already holds (a resumed
        restore, restore/in_place.py): not fetched, not written."""
        k = self.coder.k
        for record, _, _ in self.content.pieces():
            check_method(record.method)  # UnknownCompression before anything is fetched
        largest = self.content.first_segment_length()
        window = max(2, self.window_bytes // max(1, largest))
        # A plain full segment's block (a compressed segment's are shorter).
        self.buffers = self._make_buffers(self.coder.block_length(largest), k * window)
        size = self.content.segments_length()
        yield self.transfer.reserve(min(self.buffers.footprint, size), "segments")
        self.writer = self._make_writer(self.ctx.reactor, self.out)
        pending = set()  # segments not yet all with the writer (or failed)
        try:
            offset = 0
            for position, (record, start, length) in enumerate(self.content.pieces()):
                segment = _Segment(record, offset, start, length, k)
                offset += length
                if position in skip:   # only whole segments are skipped (in_place.py)
                    continue
                pending.add(segment.done)
                segment.done.addBoth(lambda result, d=segment.done: pending.discard(d))
                if not self._by_blocks(record):
                    self._count_retrieves(k)
                    # Its memory comes out of the window too: k block slots,
                    # held (not used) until its pieces are written. A
                    # compressed one: slots for its stored bytes now, and
                    # k for its plaintext once its fetch is on its way.
                    plain = None if record.method is None else defer.Deferred()
                    slots = yield self._take_slots(self._slots_for(record))
                    self._whole(segment, slots, plain)
                    if plain is not None:
                        try:
                            more = yield self._take_slots(k)
                        except BaseException as err:
                            plain.errback(err)
                            raise
                        plain.callback(more)
                    continue
                needed = segment.blocks(k)
                segment.left = len(needed)
                self._count_retrieves(len(needed))
                for index in needed:
                    buffer = yield self.buffers.get()
                    self._check()
                    self._block(segment, index, buffer)
            yield gather(list(pending))
            self._check()
            yield self.writer.finish(size)
        except BaseException:  # (a segment's `done` never fails: errors go to self.error)
            self.writer.stop()
            raise

    def _check(self):
        if self.error is None and self.writer.error is not None:
            self.error = self.writer.error
        if self.error is not None:
            raise self.error

    @defer.inlineCallbacks
    def _take_slots(self, count):
        slots = []
        try:
            for _ in range(count):
                slots.append((yield self.buffers.get()))
                self._check()
        except BaseException:
            self.buffers.give_back(slots)
            raise
        return slots

    def _slots_for(self, record) -> int:
        """Block buffers a segment restored whole holds from the start: k,
        or for a compressed one as many as its stored bytes (the pieces
        fetched; k more come for its plaintext)."""
        if record.method is None:
            return self.coder.k
        return -(-record.stored_length // self.buffers.size)

    def _by_blocks(self, record) -> bool:
        """A full segment of an extent whose blocks fit the file's buffers,
        stored as it is, with no primary on a node that failed this run (that
        one is fetched whole from other holders at once, in the window: by
        blocks, it would wait for the repair turn, one segment at a time, and
        fetch its good blocks twice)."""
        if not self._by_blocks_allowed or record.method is not None:
            return False
        failed = self.ctx.network.failed
        primaries = {h.index for h in record.holders if isinstance(h, BlockHolder)
                     and bytes.fromhex(h.node) not in failed}
        return (record.block_length == self.buffers.size
                and record.length == self.coder.k * record.block_length
                and all(i in primaries for i in range(self.coder.k)))

    def _block(self, segment, index, buffer):
        holder = next(h for h in segment.record.holders if h.index == index)
        key_hex, node_hex = holder.key, holder.node
        bl = segment.record.block_length
        d = self.ctx.network.retrieve(bytes.fromhex(node_hex), bytes.fromhex(key_hex),
                                  *holder.retrieve_range(bl), into=buffer)

        lo = max(index * bl, segment.start)
        hi = min((index + 1) * bl, segment.start + segment.length)
        cut = None if segment.whole() else (lo - index * bl, hi - index * bl)

        def arrived(data):
            opener = functools.partial(_open_block, holder=holder,
                                       key=bytes.fromhex(segment.record.key), index=index,
                                       block_length=bl, cut=cut)
            done = functools.partial(self._block_done, segment, holder, buffer)
            self.writer.write(segment.offset + lo - segment.start, data, done, opener)

        def failed(failure):
            self.buffers.abandon(buffer)  # the connection may still write into it
            self._report_bad(node_hex, key_hex, failure.getErrorMessage())
            segment.failed = True
            self._settled(segment)

        d.addCallbacks(arrived, failed)
        d.addErrback(self._fail)  # a bug, not a peer: fail the file

    def _block_done(self, segment, holder, buffer, written, data):
        # The answer's own buffer, and the one offered (the same, unless a
        # peer answered more than asked): the request is over, both are free.
        self.buffers.give_back([data, buffer])
        if written is None:
            if self.writer.error is None:  # refused: not the block the manifest recorded
                self._report_bad(holder.node, holder.key, "corrupt (hash mismatch)")
            segment.failed = True
        else:
            self.ctx.progress.bytes_done(len(written))
        self._settled(segment)

    def _settled(self, segment):
        segment.left -= 1
        if segment.left:
            return
        if segment.failed and self.error is None and self.writer.error is None:
            self._repair_turn.run(self._whole, segment)
        else:
            segment.done.callback(None)

    @defer.inlineCallbacks
    def _whole(self, segment, slots=None, plain=None):
        """The segment's way: any k holders, decoded if need be, fresh buffers.

        slots: block buffers of the window it holds in their place (a segment
        that is not a full one of an extent); without them (a repair, while
        the window is in use) it reserves its size from the budget. plain: a
        compressed segment's: fires with k more slots for its plaintext."""
        length = 0 if slots else segment.record.length
        # [pieces not yet written, bytes reserved, slots]: all go back at the last
        left = [0, length, slots or []]
        try:
            if length:
                yield self.transfer.reserve(length, "segment")
            record = segment.record
            pieces = yield fetch_segment_pieces(self.ctx.network, self.ctx.pool, self.coder,
                                                self.ctx.secret, record, self._report_bad)
            if plain is not None:  # compressed: always with slots, never by blocks
                more, plain = (yield plain), None
                left[2] = left[2] + more
                pieces = yield self.ctx.pool.run(_decompress_into, self.ctx.secret, record,
                                                 pieces, more)
            if not segment.whole():
                pieces = _cut_pieces(pieces, segment.start, segment.length)
            left[0] = len(pieces)
            position = segment.offset
            for piece in pieces:
                self.writer.write(position, piece, functools.partial(self._whole_done, left))
                position += len(piece)
        except BaseException as err:
            self._fail(err)
            self._whole_done(left, None, b"")  # what it held goes back
            if plain is not None:  # its plaintext's slots, when they come, go back too
                plain.addCallbacks(self.buffers.give_back, lambda _: None)
        segment.done.callback(None)

    def _fail(self, failure_or_error):
        err = getattr(failure_or_error, "value", failure_or_error)
        if self.error is None:
            self.error = err if isinstance(err, (FetchFailed, OSError)) else FetchFailed(str(err))
            if not isinstance(err, (FetchFailed, OSError)):
                log.error("restoring a large file failed: %r", err)

    def _whole_done(self, left, written, piece):
        """left: [pieces of the segment not yet written, bytes reserved, slots]."""
        left[0] -= 1
        if left[0] <= 0:
            if left[1] and not self.transfer.closed:
                self.transfer.unreserve(left[1], "segment")
            self.buffers.give_back(left[2])
            left[1], left[2] = 0, []
        if written is not None:
            self.ctx.progress.bytes_done(len(written))
