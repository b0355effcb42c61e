"""`flud restore`: bring a snapshot (or part of it) back under DEST.

Large files (blocks.py): a full segment of an extent is restored block by
block: each of its k primary blocks is asked for as soon as one of the
file's block buffers is free (a window of FILE_FOOTPRINT, buffers.py), and
one of the writer's threads (writer.py, WRITER_THREADS) checks its hash,
decrypts it where it landed and writes it at its offset (O_DIRECT where the
filesystem allows, any order), so no block waits for its siblings. A
segment with a block that failed, the file's last (shorter) segment and a
segment stored before extents are fetched whole (more holders, a zfec
decode if need be) and written the same way. LARGE_IN_FLIGHT files at once.
A large file goes to a temp file beside its place; once every block is
written it is truncated to its length and fsynced (once, for the whole
file), then renamed into place.

Small files (runs.py, small.py): by runs of a primary share block, one
ranged RETRIEVE for the files of a bundle that lie side by side in it
(RUNS_IN_FLIGHT runs at once); a file whose run failed or that fails its
check comes alone, its range from k other shares and a zfec decode of just
that range (SMALL_IN_FLIGHT such at once). Small and empty files are
opened, written to temp files and renamed into place by the writer's
threads (files.py), a batch made durable by one sync before its renames;
files.py says what a crash in the middle leaves.

Every file is checked before it is written (a block against its recorded
hash, a small file against its convergent key), so a corrupt share never
reaches a file. Modes and times are set through the file's descriptor;
directories get theirs after their contents.

Every path under DEST goes through restore/destdir.py: directories opened
one name at a time, never through a symlink. An entry whose path would
pass through one (or is not a plain relative path) is refused, reported
and skipped; the rest is restored.
"""
import functools
import itertools
import logging
import os

from twisted.internet import defer

from flud.client.context import JobContext
from flud.client.directio import PositionalWriter
from flud.client.gather import settle_all
from flud.client.repository.snapshot_paths import snapshot_paths
from flud.client.records import (DIRECTORY, EMPTY, LARGE, SMALL, SYMLINK, BadSegmentRecord,
                                 content_from_wire, content_kind, entries_from_wire)
from flud.client.restore.block_restore import BlockRestore
from flud.client.restore.block_buffers import BlockBuffers
from flud.client.restore.destdir import SafeDest, UnsafePath
from flud.client.restore.meta_restore import set_large_meta
from flud.client.restore.file_writer import (BESIDE_SUFFIX, TEMP_SUFFIX, FileWriter,  # noqa: F401
                                       Landed, RestoreError, set_meta,
                                       sync_filesystem)
from flud.client.restore.in_place import (KEEP, LANDED, large_in_place, look_files,
                                         newer_in_place)
from flud.client.restore.metered_network import MeteredNetwork
from flud.client.restore.overwrite import IF_NEWER, NEVER, Overwrite, resume_temp
from flud.client.restore.wanted_paths import Wanted
from flud.client.restore.small_runs import SmallRuns
from flud.client.restore.small_fetch import SmallFetch
from flud.client.restore.block_writer import BlockWriter
from flud.client.repository.segments import FetchFailed
from flud.coding import SegmentCoder
from flud.errors import CompressionError

log = logging.getLogger("flud.client")

SMALL_IN_FLIGHT = 256       # small files fetched alone (not by runs) at once
LARGE_IN_FLIGHT = 3         # large files restored at once, each in its window
# What one file's restore may hold: its window of block buffers (blocks.py),
# the k primary blocks of two 2 MiB segments at the defaults (the plaintext
# is decrypted into them).
FILE_FOOTPRINT = 4 * 1024 * 1024
LOOK_CHUNK = 64             # small files looked at in place per pool call


class Restore:
    def __init__(self, reactor, home, network, pool, monitor, progress, manifest,
                 block_writer=BlockWriter, block_buffers=BlockBuffers, by_blocks=True,
                 sync=sync_filesystem, overwrite=NEVER):
        """block_writer, block_buffers, by_blocks: how large files are
        written (BlockWriter: on threads of its own; InlineBlockWriter: on the
        calling thread, small files too), what holds their blocks, and whether
        full segments go block by block (False: every segment whole); see
        blocks.py. sync(fd): makes DEST's filesystem durable, once per batch
        of small files (files.py). overwrite: what to do with a name already
        taken under DEST (restore/overwrite.py)."""
        k, n = manifest["k"], manifest["n"]
        self.overwrite = Overwrite(overwrite)
        self.metered = MeteredNetwork(network)   # what the files cost: fetched_bytes
        self.ctx = JobContext(reactor, home, self.metered, pool, monitor, progress,
                              SegmentCoder(k, n))
        self.network = network
        self.progress = progress
        self.manifest = manifest
        self._large_file = functools.partial(
            BlockRestore, self.ctx, report_bad=self.report_bad,
            count_retrieves=self._count_retrieves, block_writer=block_writer,
            block_buffers=block_buffers, by_blocks=by_blocks)
        self._small_files = SmallFetch(self.ctx, manifest["bundles"], SegmentCoder(k, n),
                                       self.report_bad, self._count_retrieves)
        self.summary = {"files": 0, "bytes": 0, "dirs": 0, "symlinks": 0, "beside": 0,
                        "failed": 0, "refused": 0, "unmatched": 0, "bad_shares": 0,
                        "retrieves": 0, "unchanged": 0, "resumed": 0, "replaced": 0,
                        "reused_bytes": 0, "fetched_bytes": 0, "deleted": 0}
        self.bad_shares = []
        self.unreachable = {}  # node hex -> shares of it fetched elsewhere
        self._reported = set()
        self.failed = []
        self.refused = []  # [(path in the snapshot, why)]
        self._refused = set()
        self.unmatched = []  # the PATHs asked for that matched nothing
        self._unmade = set()  # directories whose mkdir failed: what is under them fails too
        self._maybe_dirs = []   # (rel, mode, mtime_ns) made only if something under them is
        self.deleted_paths = []   # --delete: [(path, is_dir)]
        self.dest = None  # a SafeDest while run() runs
        self._files = None  # its FileWriter
        self._file_threads = block_writer.file_threads
        self._sync = sync
        self._slots = defer.DeferredSemaphore(SMALL_IN_FLIGHT)
        self._large_slots = defer.DeferredSemaphore(LARGE_IN_FLIGHT)

    def _count_retrieves(self, count: int) -> None:
        self.summary["retrieves"] += count

    def report_bad(self, node_hex, key_hex, why):
        if (node_hex, key_hex) in self._reported:
            return  # one warning per share, however many files it serves
        self._reported.add((node_hex, key_hex))
        health = self.network.health
        if bytes.fromhex(node_hex) in health.failed:
            # Down or stalled, not corrupt: said once for the node.
            counted = self.unreachable.get(node_hex, 0)
            self.unreachable[node_hex] = counted + 1
            if not counted:
                reason = health.why.get(bytes.fromhex(node_hex), why)
                self.progress.warn(f"node {node_hex[:12]} is unreachable ({reason}); "
                                   f"its shares come from other holders")
            return
        self.summary["bad_shares"] += 1
        self.bad_shares.append((node_hex, key_hex, why))
        self.progress.warn(f"share {key_hex[:16]} on node {node_hex[:12]}: {why}; using others")

    def refuse(self, rel, why):
        """Skip an entry whose path is not safe to write; said once per entry."""
        if rel in self._refused:
            return
        self._refused.add(rel)
        self.summary["refused"] += 1
        self.refused.append((rel, why))
        self.progress.warn(f"refused {rel}: {why}")

    def _safe(self, rel, fn, *args):
        """fn(*args); False (and the entry refused) if its path is not safe."""
        if rel in self._refused:
            return False
        try:
            fn(*args)
        except UnsafePath as err:
            self.refuse(rel, err.why)
            return False
        return True

    def _made(self, rel, fn, *args) -> bool:
        """_safe(rel, fn, *args) for what makes a directory on the way (fn:
        make_dir, or check for a file's parent): an OSError (EACCES, EROFS,
        ENOSPC...) fails this entry alone, and an entry under a directory
        that could not be made fails without a try."""
        parts = rel.split("/")
        for depth in range(1, len(parts)):
            above = "/".join(parts[:depth])
            if above in self._unmade:
                self._failed(rel, f"not restored: its directory {above} could not be made")
                return False
        try:
            return self._safe(rel, fn, *args)
        except OSError as err:
            self._failed(rel, err.strerror or err)
            return False

    def asked_for(self, wanted) -> None:
        """Once the snapshot was searched for the PATHs asked: RestoreError
        if none matched (nothing to do); each one that did not is reported,
        and the rest restored."""
        if wanted.nothing_matched():
            raise RestoreError("nothing in the snapshot matches " + wanted.describe())
        self.unmatched = wanted.unmatched()
        self.summary["unmatched"] = len(self.unmatched)
        for path in self.unmatched:
            self.progress.warn(f"nothing in the snapshot matches {path}")

    @defer.inlineCallbacks
    def run(self, dest, paths=(), selection=None):
        """A version-1 manifest's entries under dest; selection: a
        restore/select.Selection (--include, --exclude)."""
        wanted = Wanted(paths, snapshot_paths(self.manifest.get("roots", ()), paths))
        entries = []
        for entry in entries_from_wire(self.manifest["entries"]):
            wanted.saw(entry.rel)
            if not wanted(entry.rel):
                continue
            if selection and not selection.wants(entry.rel, entry.kind == DIRECTORY):
                if entry.kind == DIRECTORY and selection.descends(entry.rel):
                    self.maybe_dir(entry.rel, entry.mode, entry.mtime_ns)
                continue
            entries.append(entry)
        self.asked_for(wanted)
        files = [e for e in entries if e.is_file]
        self.open(dest, len(files), sum(e.size for e in files))
        try:
            yield self.restore_batch(entries, self.manifest["contents"])
            yield self.finish()
        finally:
            self.close()
        return self.summary

    def open(self, dest, total_files, total_bytes) -> None:
        """Restore under dest: open it (never through a symlink)."""
        try:
            self.dest = SafeDest(dest)
        except OSError as err:
            raise RestoreError(f"cannot restore into {dest}: {err.strerror or err}") from None
        self._numbers = itertools.count(1)   # temp names, for every batch's writer
        self._dirs = []   # (rel, mode, mtime_ns): their times are set once all is in
        self.progress.start(total_files, total_bytes)

    def close(self) -> None:
        if self._files is not None:
            self._files.stop()
            self._files = None
        if self.dest is not None:
            self.dest.close()

    @defer.inlineCallbacks
    def restore_batch(self, entries, contents):
        """Restore these entries (a directory's before its files); contents:
        content id -> content record as written, for their files."""
        self._files = FileWriter(self.ctx.reactor, self.dest, self, sync=self._sync,
                                 threads=self._file_threads, overwrite=self.overwrite)
        self._files.numbers = self._numbers
        self._contents = contents
        files = [e for e in entries if e.is_file]
        for entry in entries:
            if entry.kind != DIRECTORY:
                continue
            if self._made(entry.rel, self.dest.make_dir, entry.rel):
                self.summary["dirs"] += 1
                self._dirs.append((entry.rel, entry.mode, entry.mtime_ns))
            elif entry.rel not in self._refused:   # failed: its subtree fails with it
                self._unmade.add(entry.rel)
        # Refused (or failed) before anything is fetched for them (a file
        # is checked again where it is written).
        files = [e for e in files if self._made(e.rel, self.dest.check, e.rel)]
        if self.overwrite.looks_first:   # what is in place already is not fetched
            files = yield self._looked(files, contents)
        small = [(e, content_from_wire(contents[e.last])) for e in files
                 if content_kind(contents[e.last]) == SMALL]
        transfer = self.ctx.monitor.transfer("small", "small files")
        work = [SmallRuns(self._small_files, self._files, transfer, self._slots,
                          self.file_failed).restore(small)]
        self._files.write([(e, b"", None) for e in files
                           if content_kind(contents[e.last]) == EMPTY])
        for entry in files:
            if content_kind(contents[entry.last]) == LARGE:
                work.append(self._large_slots.run(self._guarded, self._large, entry))
        try:
            yield settle_all(work)
        finally:
            transfer.close()
        yield self._files.finish()  # every small file in place before its directory's times
        self._files = None
        for entry in entries:
            if entry.kind == SYMLINK:
                try:
                    self._made(entry.rel, self._symlink, entry.rel, entry.last, entry.mtime_ns)
                except RestoreError as err:
                    self._failed(entry.rel, err)

    def maybe_dir(self, rel, mode, mtime_ns) -> None:
        """A directory the selection does not name: if something under it
        is restored (and so made it), it gets its mode and times too."""
        self._maybe_dirs.append((rel, mode, mtime_ns))

    def deleted(self, outcome) -> None:
        """--delete's outcome in one directory (restore/delete_extra.py)."""
        deleted, failed = outcome
        for path, is_dir in deleted:
            self.summary["deleted"] += 1
            self.deleted_paths.append((path, is_dir))
        for path, why in failed:
            self._failed(path, why)

    def finish(self):
        """Directories get their modes and times, deepest first (writing
        into them moved their mtime)."""
        made = []
        for rel, mode, mtime_ns in self._maybe_dirs:
            fd = None
            try:
                fd = self.dest.open_dir(rel)
            except UnsafePath:
                pass
            if fd is not None:
                os.close(fd)
                made.append((rel, mode, mtime_ns))
        for rel, mode, mtime_ns in sorted(self._dirs + made, reverse=True):
            try:
                self._safe(rel, self.dest.set_dir_meta, rel, mode, mtime_ns)
            except OSError as err:  # gone meanwhile, say: the rest still gets its times
                self._failed(rel, err)
        self.summary["replaced"] = self.overwrite.replaced
        self.summary["fetched_bytes"] = self.metered.fetched_bytes
        self.progress.finish()
        return defer.succeed(None)

    @defer.inlineCallbacks
    def _guarded(self, fn, entry):
        try:
            yield fn(entry)
        except UnsafePath as err:
            self.refuse(entry.rel, err.why)
        except (FetchFailed, RestoreError, OSError, CompressionError, BadSegmentRecord) as err:
            self._failed(entry.rel, err)  # this file fails, alone

    @defer.inlineCallbacks
    def _large(self, entry):
        """Block by block into a temp file (flud/client/restore/block_restore.py), a window
        of FILE_FOOTPRINT ahead; fsynced, then renamed into place. Under
        if-changed, the segments already in place or in the temp a killed
        run left are not fetched again (_in_place)."""
        content = content_from_wire(self._contents[entry.last])
        transfer = self.ctx.monitor.transfer("download", entry.rel)
        place = self.dest.place(entry.rel)
        try:
            if self.overwrite.mode == IF_NEWER and (
                    yield self.ctx.pool.run(newer_in_place, place, entry)):
                self._kept(entry)
                return
            skip = frozenset()
            # A fixed temp name: a killed run's is written over (never) or
            # used for what it holds (if-changed: _in_place).
            temp = resume_temp(place.name, entry.last)
            out = PositionalWriter(temp, dir_fd=place.dir_fd, reuse=True)
            if self.overwrite.resumable:
                try:
                    skip = yield self._in_place(place, temp, out, entry, content, transfer)
                except BaseException:
                    out.close()
                    raise
                if skip is KEEP:
                    out.close()
                    place.unlink(temp)
                    self._kept(entry)
                    return
            try:
                with out:
                    yield self._large_file(content, out, transfer, FILE_FOOTPRINT).run(skip)
                    yield set_large_meta(self.ctx.pool, set_meta, out.fd, entry)
                self._finish(place, temp, entry)
            except BaseException:
                if not self.overwrite.resumable:   # a resumable one is kept for the rerun
                    place.unlink(temp)
                raise
        finally:
            place.close()
            transfer.close()

    @defer.inlineCallbacks
    def _in_place(self, place, temp, out, entry, content, transfer):
        """if-changed, a large file: KEEP, or the positions of the segments
        its temp now holds (restore/in_place.py, large_in_place)."""
        found = yield large_in_place(self.ctx, place, temp, out, entry, content, transfer)
        if found is KEEP:
            return KEEP
        skip, reused = found
        if reused:
            self.summary["resumed"] += 1
            self.summary["reused_bytes"] += reused
            self.progress.bytes_done(reused)
        return skip

    @defer.inlineCallbacks
    def _looked(self, files, contents):
        """if-changed, if-newer: the small and empty files in place looked at
        (restore/in_place.py, on the pool, LOOK_CHUNK at a time): those kept
        or found whole in a killed run's temp are not fetched. The files
        left to fetch."""
        newer_only = self.overwrite.mode == IF_NEWER
        left, landed = [], []
        for start in range(0, len(files), LOOK_CHUNK):
            chunk = files[start:start + LOOK_CHUNK]
            small = [e for e in chunk if content_kind(contents[e.last]) != LARGE]
            left.extend(e for e in chunk if content_kind(contents[e.last]) == LARGE)
            looks = yield self.ctx.pool.run(look_files, self.dest, small, contents,
                                            self.ctx.secret, newer_only)
            for entry, found in zip(small, looks):
                if isinstance(found, UnsafePath):
                    self.refuse(entry.rel, found.why)
                elif found.action == KEEP:
                    self._kept(entry)
                elif found.action == LANDED:
                    self.summary["resumed"] += 1
                    self.summary["reused_bytes"] += entry.size
                    landed.append((entry, Landed(found.temp, entry.size), None))
                else:
                    left.append(entry)
        if landed:
            self._files.write(landed)
        return left

    def _kept(self, entry):
        """A file left as it is in place (it matched, or is newer)."""
        self.summary["unchanged"] += 1
        self.progress.file_done(entry.size)

    # --- what the small files' writer says (files.FileWriter), on the reactor

    def file_done(self, entry, size, beside):
        self.summary["beside"] += beside
        self.progress.bytes_done(size)
        self._count_file(entry)

    def file_refused(self, entry, why):
        self.refuse(entry.rel, why)

    def file_failed(self, entry, err):
        self._failed(entry.rel, err)

    def _failed(self, rel, err):
        self.summary["failed"] += 1
        self.failed.append((rel, str(err)))
        self.progress.warn(f"could not restore {rel}: {err}")

    def _finish(self, place, temp, entry):
        """Into place under its own name, or as --overwrite says: by default
        beside what is there, never over it, even what appeared while it was
        written (files.into_place)."""
        beside = self.overwrite.put(place, temp)
        self.summary["beside"] += beside
        self._count_file(entry)

    def _count_file(self, entry):
        self.summary["files"] += 1
        self.summary["bytes"] += entry.size
        self.progress.file_done(0)

    def _symlink(self, rel, target, mtime_ns):
        with self.dest.place(rel) as place:
            # never: symlinkat never replaces a name, the first free of the two
            name, beside, kept = self.overwrite.put_symlink(
                place, target, resume_temp(place.name, "symlink:" + target))
            place.set_link_times(name, mtime_ns)
        self.summary["beside"] += beside
        self.summary["symlinks" if not kept else "unchanged"] += 1

