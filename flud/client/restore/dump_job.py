"""`flud dump`: one path of a snapshot written to a stream (stdout): a file
as its bytes, a directory (or a symlink) as a tar stream.

Memory stays bounded whatever the size: a large file is fetched one segment
at a time (fetch_segment_pieces: any k holders, decoded if need be,
decrypted where its shares landed), and the next segment is asked for only
while fewer than QUEUE_BYTES wait to be written. A small file comes whole
(it is at most the home's small-file limit). Everything fetched is checked
as a restore checks it: a share against its hash, a small file against its
convergent key, a compressed segment's plaintext against its key.

The stream is written by a thread of its own (StreamWriter), so a slow
reader (`| ssh`, a full pipe) holds up the fetches through the bound, never
the reactor. Directories go out as tar (tarfile in streaming mode, "w|",
PAX format: long names, exact mtimes), a member's bytes read by tarfile
from the same bounded queue as they arrive.
"""
import logging
import queue
import tarfile
import threading

import blake3
from twisted.internet import defer

from flud.client.repository.snapshot_paths import snapshot_paths
from flud.client.records import (DIRECTORY, EMPTY, FILE, LARGE, SMALL, content_from_wire,
                                 content_kind, entries_from_wire)
from flud.client.restore.tree_restore import TreeContents
from flud.client.restore.small_fetch import SmallFetch
from flud.client.repository.segments import FetchFailed, fetch_segment_pieces
from flud.compression import check_method, decompress_pieces
from flud.crypto import segment_key
from flud.errors import BadCompressedData, FludError

log = logging.getLogger("flud.client")

QUEUE_BYTES = 4 * 1024 * 1024   # fetched and not yet written: two segments at the defaults

_MEMBER, _DATA, _END = "member", "data", "end"


class DumpError(FludError):
    """The path cannot be dumped (nothing matches it, the stream is a terminal)."""

    code = "DUMP"


class _QueueReader:
    """A member's bytes for tarfile, read from the writer's queue (thread)."""

    def __init__(self, take):
        self._take = take
        self._chunk = memoryview(b"")

    def read(self, size: int) -> bytes:
        """Exactly `size` bytes (tarfile asks for no more than the member
        holds, and takes a short read for a truncated member)."""
        out = bytearray()
        while len(out) < size:
            if not len(self._chunk):
                self._chunk = memoryview(self._take())
            n = min(size - len(out), len(self._chunk))
            out += self._chunk[:n]
            self._chunk = self._chunk[n:]
        return bytes(out)


class StreamWriter:
    """Writes to `out` (a binary file) on a thread of its own: raw bytes, or
    a tar stream of members. write() and member() return a Deferred that
    fires once what waits to be written is under QUEUE_BYTES again."""

    def __init__(self, reactor, out, as_tar: bool, limit: int = QUEUE_BYTES):
        self._reactor = reactor
        self._out = out
        self._as_tar = as_tar
        self._limit = limit
        self._queue = queue.SimpleQueue()
        self._queued = 0            # bytes handed over and not yet written (reactor)
        self._waiting = []          # Deferreds waiting for room
        self.error = None           # what stopped the thread (BrokenPipeError...)
        self.written = 0
        self._done = defer.Deferred()
        self._thread = threading.Thread(target=self._run, name="flud-dump-writer", daemon=True)
        self._thread.start()

    def member(self, info: tarfile.TarInfo):
        self._check()
        self._queue.put((_MEMBER, info))
        return defer.succeed(None)

    def write(self, data):
        """Hand over bytes (of the current member, in tar mode)."""
        self._check()
        if not len(data):
            return defer.succeed(None)
        self._queued += len(data)
        self._queue.put((_DATA, data))
        if self._queued < self._limit:
            return defer.succeed(None)
        waiter = defer.Deferred()
        self._waiting.append(waiter)
        return waiter

    def close(self):
        """Fires once everything is written and flushed (or fails with the error)."""
        self._queue.put((_END, None))
        return self._done

    def _check(self):
        if self.error is not None:
            raise self.error

    # --- on the reactor, told by the thread

    def _wrote(self, n: int) -> None:
        self._queued -= n
        self.written += n
        while self._waiting and (self._queued < self._limit or self.error is not None):
            waiter = self._waiting.pop(0)
            if self.error is not None:
                waiter.errback(self.error)
            else:
                waiter.callback(None)

    def _ended(self, error) -> None:
        if error is not None and self.error is None:
            self.error = error
        self._wrote(0)
        if self.error is not None:
            self._done.errback(self.error)
        else:
            self._done.callback(None)

    # --- the thread

    def _take_data(self):
        kind, value = self._queue.get()
        if kind != _DATA:   # the job failed within a member: the stream ends here
            self._seen_end = kind == _END
            raise FetchFailed("the stream ended within a file: the dump failed")
        self._reactor.callFromThread(self._wrote, len(value))
        return value

    def _run(self) -> None:
        error = None
        tar = None
        self._seen_end = False
        try:
            if self._as_tar:
                tar = tarfile.open(fileobj=self._out, mode="w|", format=tarfile.PAX_FORMAT)
            while True:
                kind, value = self._queue.get()
                if kind == _END:
                    self._seen_end = True
                    break
                if kind == _MEMBER:
                    reader = _QueueReader(self._take_data) if value.isreg() and value.size else None
                    tar.addfile(value, reader)
                    continue
                self._out.write(value)
                self._reactor.callFromThread(self._wrote, len(value))
            if tar is not None:
                tar.close()
            self._out.flush()
        except BaseException as err:   # BrokenPipeError: the reader went away
            error = err
            self._drain()
        self._reactor.callFromThread(self._ended, error)

    def _drain(self) -> None:
        """After an error: what was still handed over is counted as gone."""
        while not self._seen_end:
            kind, value = self._queue.get()
            if kind == _DATA:
                self._reactor.callFromThread(self._wrote, len(value))
            elif kind == _END:
                self._seen_end = True


def tar_info(name: str, entry) -> tarfile.TarInfo:
    """The tar header of an entry (Entry) under `name`."""
    info = tarfile.TarInfo(name)
    info.mode = entry.mode & 0o7777
    info.mtime = entry.mtime_ns / 1e9
    if entry.kind == DIRECTORY:
        info.type = tarfile.DIRTYPE
    elif entry.kind == FILE:
        info.type = tarfile.REGTYPE
        info.size = entry.size
    else:
        info.type = tarfile.SYMTYPE
        info.linkname = entry.last
    return info


class Dump:
    """ctx: the job's JobContext; bundles: the snapshot's bundle records as
    written (for small files); out: a binary stream; named: the path as the
    snapshot names it ("" for the whole snapshot)."""

    def __init__(self, ctx, bundles, named: str, report_bad=None):
        self.ctx = ctx
        self.named = named.strip("/")
        self._small = SmallFetch(ctx, bundles, ctx.coder, report_bad or self._bad,
                                 self._count)
        self._report_bad = report_bad or self._bad
        self.writer = None
        self.summary = {"files": 0, "dirs": 0, "symlinks": 0, "bytes": 0, "retrieves": 0}
        self.as_tar = None     # known once the path's own entry is seen
        self.bad_shares = []

    def _bad(self, node_hex, key_hex, why):
        self.bad_shares.append((node_hex, key_hex, why))

    def _count(self, n):
        self.summary["retrieves"] += n

    def selects(self, rel: str) -> bool:
        """rel is the path asked for or under it."""
        return not self.named or rel == self.named or rel.startswith(self.named + "/")

    def start(self, out, entry_kind: str) -> None:
        """Once the path's own entry is known: raw bytes for a file, tar else."""
        self.as_tar = entry_kind != FILE or not self.named
        self.writer = StreamWriter(self.ctx.reactor, out, self.as_tar)

    def _name(self, rel: str) -> str:
        """A member's name: from the dumped directory's own name down."""
        if not self.named:
            return rel
        parent = self.named.rpartition("/")[0]
        return rel[len(parent) + 1:] if parent else rel

    @defer.inlineCallbacks
    def entry(self, entry, content_wire):
        """One entry at or under the path (Entry; its content record as
        written, for a file)."""
        if self.as_tar:
            yield self.writer.member(tar_info(self._name(entry.rel), entry))
        kind = {DIRECTORY: "dirs", FILE: "files"}.get(entry.kind, "symlinks")
        self.summary[kind] += 1
        if entry.kind == FILE:
            yield self._file(entry, content_wire)

    @defer.inlineCallbacks
    def _file(self, entry, content_wire):
        kind = content_kind(content_wire)
        if kind == EMPTY:
            return
        content = content_from_wire(content_wire)
        if kind == SMALL:
            plain = yield self._small.fetch(content)
            yield self.writer.write(plain)
            self.summary["bytes"] += len(plain)
            return
        if kind != LARGE:
            raise FetchFailed(f"{entry.rel}: a content record of unknown kind {kind!r}")
        for record in content.segment_fetches():
            check_method(record.method)
        written = 0
        held_key, held = None, None   # the last segment fetched: pieces of one share it
        for record, start, length in content.pieces():
            if record.key != held_key:
                pieces = yield fetch_segment_pieces(self.ctx.network, self.ctx.pool,
                                                    self.ctx.coder, self.ctx.secret, record,
                                                    self._report_bad)
                self._count(self.ctx.coder.k)
                if record.method is not None:
                    pieces = yield self.ctx.pool.run(_opened, self.ctx.secret, record, pieces)
                held_key, held = record.key, pieces
            for piece in _cut(held, start, length):
                written += len(piece)
                yield self.writer.write(piece)
        if written != entry.size:
            raise FetchFailed(f"{entry.rel}: {written} bytes came where the snapshot "
                              f"recorded {entry.size}")
        self.summary["bytes"] += written


def _cut(pieces, start: int, length: int):
    """Bytes start..start+length of a segment held as a list of pieces (a
    whole segment: the pieces as they are)."""
    at = 0
    for piece in pieces:
        end = at + len(piece)
        if end > start and at < start + length:
            view = memoryview(piece)[max(start - at, 0):min(end, start + length) - at]
            yield view
        at = end
        if at >= start + length:
            return


def _opened(secret, record, pieces) -> list:
    """A compressed segment's plaintext chunks, checked against its key (pool)."""
    digest = blake3.blake3()
    chunks = []
    try:
        for chunk in decompress_pieces(record.method, pieces, record.length):
            digest.update(chunk)
            chunks.append(chunk)
    except BadCompressedData as err:
        raise FetchFailed(f"a compressed segment is damaged: {err}") from None
    if segment_key(secret, digest.digest()).hex() != record.key:
        raise FetchFailed("a compressed segment does not match its key once decompressed")
    return chunks


def snapshot_name(path: str, roots) -> str:
    """The path as the snapshot names it ("" for the whole snapshot: `/`)."""
    if path in ("/", ".", ""):
        return ""
    return snapshot_paths(roots, [path])[0].strip("/")


@defer.inlineCallbacks
def dump_snapshot(ctx, found, path: str, out):
    """Write `path` of a found snapshot (snapshots.Found) to `out`; the Dump
    (its summary, its `damaged` [(path, why)]). DumpError if nothing matches."""
    manifest = found.manifest
    roots = manifest.get("roots", ()) if manifest is not None else found.record.paths
    named = snapshot_name(path, roots)
    bundles = manifest["bundles"] if manifest is not None else found.repo.bundles
    if manifest is not None:   # a version-1 snapshot was coded with its own k, n
        from flud.coding import SegmentCoder
        ctx.coder = SegmentCoder(manifest["k"], manifest["n"])
    dump = Dump(ctx, bundles, named)
    dump.damaged = []
    try:
        yield _walk(dump, found, out)
    except BaseException:
        if dump.writer is not None:   # the thread ends; what it wrote is cut short
            dump.writer.close().addErrback(lambda _: None)
        raise
    if dump.writer is None:
        raise DumpError(f"nothing in the snapshot matches {path}")
    yield dump.writer.close()
    return dump


@defer.inlineCallbacks
def _walk(dump, found, out):
    from flud.client.restore.wanted_paths import Wanted
    from flud.client.repository.tree_walk import TreeReader

    manifest, named = found.manifest, dump.named
    if manifest is not None:
        contents = manifest["contents"]
        for entry in entries_from_wire(manifest["entries"]):
            if dump.selects(entry.rel):
                if dump.writer is None:
                    dump.start(out, entry.kind)
                yield dump.entry(entry, contents.get(entry.last) if entry.is_file else None)
    else:
        tree_contents = TreeContents(found.repo)

        @defer.inlineCallbacks
        def visit(rel, dir_entry):
            if not dump.selects(rel):
                return   # a directory on the way to the path
            entry, content = yield tree_contents.entry(rel, dir_entry)
            if dump.writer is None:
                dump.start(out, entry.kind)
            yield dump.entry(entry, content and content[1])

        wanted = Wanted([named], [named]) if named else (lambda rel: True)
        yield TreeReader(found.repo.fetch_sealed, found.repo.sealer).walk(
            found.record.tree, visit, lambda damaged: dump.damaged.append(damaged),
            wanted=wanted)
