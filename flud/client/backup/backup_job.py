"""`flud backup`: scan, skip what is unchanged, send the rest, write a snapshot.

Small files (small.py): encrypted one by one (convergent) into the
aggregator, which codes bundles and fills one tar per destination node;
each sealed tar is one STORE. Large files (large.py): in extents, one
streamed STORE per node per extent (flud/client/repository/extents.py), from one
segment's footprint per file used in two halves. Both go at once. What
lands is written to the local index as it lands, so an interrupted run can
be run again and sends only what is missing. At the end the manifest is
published (publish.py).

Memory: every buffer comes out of the process budget (flud/memory.py)
before it exists. A large file reserves its segment (kind "upload"); the
small files reserve credit for the aggregator to grow into (small.py); the
TLS send queues have their allowance (Network.count_sends).

The run owns its tallies (`summary`, `counters`): the parts update them on
the reactor thread only (a worker returns its counts with its result).
"""
import itertools
import os
import socket
import time

import blake3

from twisted.internet import defer

from flud.client.backup.content_log import ContentLog
from flud.client.backup.holed_files import split_holes
from flud.client.backup.large_files import LargeFiles
from flud.client.backup.listing import listing_fingerprint
from flud.client.backup.small_files import SmallFiles
from flud.client.backup.tree_writer import TreeWriter, publish_tree
from flud.client.repository.blobs import BlobSealer
from flud.client.budget_plan import plan_budget
from flud.client.context import JobContext
from flud.client.backup.source_excludes import LARGER_THAN, ExcludeRules
from flud.client.gather import settle_all
from flud.client.repository.head_adopt import adopt_head
from flud.client.repository.record_cache import RecordCache
from flud.client.lease_renewal import renew_leases
from flud.client.records import DIRECTORY, FILE, EmptyContent
from flud.client.backup.source_scan import Entry, entry_of
from flud.client.backup.source_walk import walk
from flud.chunker import ChunkSizes
from flud.coding import SegmentCoder

LARGE_FILES_AT_ONCE = 3      # large files uploading at once
SHOWN_TOO_LARGE = 20         # files left out for their size, named in the summary
LANDED_BATCH = 1024          # small files pulled between writes of what landed to the index
WALKED_BATCH = 1024          # files (or directories) the first walk finds between index writes
EMPTY = EmptyContent(0)


def _entry(row) -> Entry:
    path, size, mtime_ns, ctime_ns, inode, mode = row
    return Entry(path, FILE, mode, mtime_ns, size, ctime_ns, inode)


class _WalkedRows:
    """The first walk's rows for the index (files to send, directories
    seen), written WALKED_BATCH directories or files at a time in one
    transaction: written a directory at a time, the commits cost more
    than the walk (two a directory). Both tables are the run's own
    (temporary): nothing reads them before the walk ends."""

    def __init__(self, index):
        self._index = index
        self._pending, self._seen = [], []

    def pending(self, entries) -> None:
        self._pending += entries
        if len(self._pending) >= WALKED_BATCH:
            self.flush()

    def seen(self, path, local, subtree) -> None:
        self._seen.append((path, local, subtree))
        if len(self._seen) >= WALKED_BATCH:
            self.flush()

    def flush(self) -> None:
        if self._pending or self._seen:
            self._index.add_walked(self._pending, self._seen)
            self._pending, self._seen = [], []


class Backup:
    def __init__(self, reactor, home, network, pool, monitor, progress, clock=time.monotonic,
                 parallel_files=None, small_files=SmallFiles, large_files=LargeFiles):
        """small_files, large_files: the classes of the two parts (SmallFiles
        and LargeFiles, or ones that watch them)."""
        cfg = home.config
        self.ctx = JobContext(reactor, home, network, pool, monitor, progress,
                              SegmentCoder(cfg["k"], cfg["n"]), clock)
        self.segment_size = cfg["segment_size"]
        self.parallel_files = parallel_files or LARGE_FILES_AT_ONCE
        self.counters = {"bytes_sent": 0, "stores": 0, "tars": 0, "bytes_read": 0,
                         "bytes_known": 0}
        self.summary = {"new": 0, "changed": 0, "unchanged": 0, "skipped": 0, "dedup": 0,
                        "reduced_redundancy": 0, "excluded": 0}
        self.skipped = []
        self.too_large = []      # (path, why): files left out by --exclude-larger-than
        self._links = {}   # (dev, inode) -> the path of its first link, of files with several
        self._holed = {}   # path -> entry of each file with holes this run reads
        self.contents = ContentLog()
        self._run_bundles = {}   # bundle id -> Bundle, every bundle this run stored
        self._run_shares = set()  # share keys this run stored (their challenges go in the map)
        chunk_size = cfg.get("chunk_size")
        self.large = large_files(self.ctx, self.segment_size, self.parallel_files,
                                 self.contents, self.counters, self.summary,
                                 chunk_sizes=ChunkSizes(chunk_size) if chunk_size else None)
        # The run's one division of the memory budget (client/budget_plan.py):
        # the send queues, the large files and the small files' aggregator
        # all reserve as it says.
        self.budget_plan = plan_budget(monitor.budget_bytes, len(network.nodes),
                                       self.large.segment_footprint, self.parallel_files)
        self.small = small_files(self.ctx, cfg["small_file_limit"], self.budget_plan,
                                 self.contents, self.counters, self.summary, self._skip)

    @property
    def policy(self):
        """The small files' flush policy (its bound comes out of the budget)."""
        return self.small.policy

    @property
    def segment_window(self) -> int:
        return self.large.segment_window

    @defer.inlineCallbacks
    def run(self, paths, excludes=(), tags=()):
        """Back up `paths` (files or directories) as a new snapshot.
        excludes: ExcludeRules, ExcludeOptions or globs (flud/client/backup/source_excludes.py)."""
        excludes = ExcludeRules.of(excludes)   # a bad exclude file stops here, before any change
        ctx = self.ctx
        index = ctx.index
        started = ctx.clock()
        roots = [os.path.abspath(p) for p in paths]
        # What a killed run left is rolled back (or adopted, if it did
        # publish) before anything is compared with the index.
        index.begin_run()
        try:
            result = yield self._run(roots, excludes, tags, started)
        except Exception:
            # Nothing of a failed run counts. Not on GeneratorExit: a run
            # abandoned and collected must not undo the rows of a later one.
            index.recover_run()
            raise
        return result

    @defer.inlineCallbacks
    def _run(self, roots, excludes, tags, started):
        ctx = self.ctx
        index = ctx.index
        yield adopt_head(ctx)
        known = index.content_lookup()
        self.contents.begin(known)
        index.begin_pending()
        index.begin_run_blobs()
        self._find_changes(roots, excludes)
        count, size = index.pending_totals()
        ctx.progress.start(count, size)
        limit = self.small.policy.small_file_limit
        content_of = {}
        large, holed = split_holes((_entry(row) for row in index.pending_rows(limit, 2 ** 62)),
                                   limit, self._skip)
        self._holed = {e.path: e for e in itertools.chain(large, holed) if e.ranges is not None}
        # Small files and large files go at once: their CPU work shares the
        # pool, and the nodes' round trips of one overlap the other's CPU.
        sends = ctx.network.count_sends(ctx.monitor, self.budget_plan)
        try:
            self.small.open(with_files=count > len(large))
            try:
                self._empty_files(content_of, holed)
                yield settle_all([
                    self.small.send_all(itertools.chain(
                        self._small_files(limit, content_of),
                        (e for e in holed if e.size)), content_of),
                    self.large.send_all(large, content_of, self._skip)])
                yield self.small.finish()
                self._save_contents()
                self._landed(content_of)
                records = RecordCache(ctx.home.path)
                writer = TreeWriter(index, BlobSealer(ctx.secret), self.small,
                                    {path for path, _ in self.skipped}, self._save_contents,
                                    links=self._links, on_problem=self._skip,
                                    record_cache=records)
                try:
                    tree = yield writer.build(roots, excludes)
                finally:
                    records.close()
                yield self.small.finish()
                self._save_contents()
                elapsed = ctx.clock() - started
                stats = {"files": writer.files, "bytes": writer.bytes, "dirs_read": writer.dirs,
                         "dirs_kept": writer.reused,
                         "new": self.summary["new"], "changed": self.summary["changed"],
                         "records": writer.builder.records, "stored": writer.builder.stored}
                summary = {"files": writer.files, "bytes": writer.bytes, "elapsed": elapsed,
                           "format": 2, "roots": roots, "tags": list(tags),
                           "host": socket.gethostname(),
                           "tree_records": writer.builder.records, "dirs_read": writer.dirs,
                           "dirs_kept": writer.reused,
                           "tree_stored": writer.builder.stored, **self.summary,
                           **self.counters}
                snapshot_id, created, record_id = yield publish_tree(
                    ctx, self.small, self._run_bundles, tree, roots, tags,
                    stats, self._run_shares, self.large.stored_extents, summary)
            finally:
                self.small.close()
            summary["record"] = record_id
            # From here on what the run wrote counts (run_rows.py).
            index.end_run(snapshot_id, created, summary)
            yield renew_leases(ctx)
        finally:
            sends.close()
            known.close()
        ctx.progress.finish()
        return {"snapshot": snapshot_id, **summary}

    def _find_changes(self, roots, excludes) -> None:
        """The first walk: every file whose size, times or inode differ from
        what the index remembers (or whose content it does not know) goes to
        the index's pending table, one directory at a time. A directory
        whose listing is as the last backup saw it is not asked about file
        by file; each directory's fingerprints (its listing, and its whole
        subtree) tell the second walk which records it can keep."""
        index = self.ctx.index
        index.begin_dirs()
        walked = _WalkedRows(index)
        try:
            self._walk_roots(roots, excludes, walked)
        finally:
            walked.flush()

    def _walk_roots(self, roots, excludes, walked) -> None:
        index = self.ctx.index
        for root in roots:
            try:
                st = os.lstat(root)
            except OSError as err:
                self._skip(root, f"cannot read: {err.strerror}")
                continue
            top = entry_of(root, st, self._skip)
            if top is None:
                continue
            if top.kind == FILE:
                walked.pending(self._classify(self._first_links([top]),
                                              index.states_known(os.path.dirname(root))))
                continue
            if top.kind != DIRECTORY:
                continue
            subtrees = {}   # directory -> its subtree's fingerprint, until its parent takes it
            for listing in walk(root, (), self._skip, excludes.lister(root, self._excluded)):
                files = self._first_links(e for e in listing.entries if e.kind == FILE)
                local = listing_fingerprint(listing.entries)
                # The same listing as the last backup saw: its files are
                # unchanged and their contents known (prune forgets every
                # directory when it deletes anything a record may name).
                if index.dir_local(listing.path) == local:
                    self.summary["unchanged"] += len(files)
                else:
                    walked.pending(self._classify(files, index.states_known(listing.path)))
                below = "".join(subtrees.pop(e.path, "") for e in listing.entries
                                if e.kind == DIRECTORY)
                subtree = blake3.blake3(f"{local}|{below}".encode()).hexdigest()
                subtrees[listing.path] = subtree
                walked.seen(listing.path, local, subtree)

    def _first_links(self, files) -> list:
        """The files to read: a file with several links in the tree is read
        (and stored) once, at the first of them (walk order); the others
        take its content when the tree is built (tree_writer.py)."""
        kept = []
        for entry in files:
            if entry.nlink > 1:
                first = self._links.setdefault((entry.dev, entry.inode), entry.path)
                if first != entry.path:
                    continue
            kept.append(entry)
        return kept

    def _classify(self, files, states) -> list:
        """The changed files (for the pending table)."""
        changed = []
        for entry in files:
            state = states.get(entry.path)
            if state and state.unchanged(entry):
                self.summary["unchanged"] += 1
            else:
                changed.append(entry)
                self.summary["changed" if state else "new"] += 1
        return changed

    def _empty_files(self, content_of, holed=()) -> None:
        """Empty files, and those with holes alone (no data to send)."""
        for path in itertools.chain((row[0] for row in self.ctx.index.pending_rows(0, 1)),
                                    (e.path for e in holed if not e.size)):
            content_of[path] = self.contents.remember("empty", EMPTY)
            self.ctx.progress.file_done(0)

    def _small_files(self, limit, content_of):
        """The small files to send, read from the pending table a page at a
        time; what landed meanwhile goes to the index as it is pulled."""
        for number, row in enumerate(self.ctx.index.pending_rows(1, limit)):
            if number % LANDED_BATCH == 0:
                # What landed leaves memory for the index: the run holds
                # what is in flight, not every file it sent.
                self._save_contents()
                self._landed(content_of)
            yield _entry(row)

    def _landed(self, content_of) -> None:
        """Files whose content is known, from the pipelines (a worker may be
        adding to content_of: popitem is atomic) into the index."""
        landed = []
        while True:
            try:
                landed.append(content_of.popitem())
            except KeyError:
                break
        if landed:
            self.ctx.index.record_landed(landed)
            holes = [(path, e.whole, e.mtime_ns, cid, e.ranges) for path, cid in landed
                     if (e := self._holed.get(path)) is not None]
            if holes:   # the ranges each was read with, by its content (tree_writer.py)
                self.ctx.index.record_holes(holes)

    def _save_contents(self):
        bundles, challenges = self.small.records()
        self._run_bundles.update(bundles)
        for bundle in bundles.values():
            self._run_shares.update(h.key for h in bundle.holders)
        # An extent's shares are this run's only if it stored them (a reused
        # extent keeps what the map says of it: LargeFiles.stored_extents).
        for holders in self.large.stored_extents.values():
            self._run_shares.update(h.key for h in holders)
        index = self.ctx.index
        index.add_blobs(self.small.blob_refs, this_run=True)
        self.small.blob_refs = []
        index.add_bundles((bid, b.to_wire()) for bid, b in bundles.items())
        index.add_contents((cid, c.to_wire()) for cid, c in self.contents.new.items())
        # one row a share, streamed in: the manifest reads them back the same way
        index.add_challenges(challenges.items())
        self.contents.new = {}

    def _excluded(self, path, why):
        self.summary["excluded"] += 1
        # a file left out for its size is the user's data, not a cache: said by name
        if why.startswith(LARGER_THAN) and len(self.too_large) < SHOWN_TOO_LARGE:
            self.too_large.append((path, why))

    def _skip(self, path, why):
        self.summary["skipped"] += 1
        self.skipped.append((path, why))
        self.ctx.progress.warn(f"skipped {path}: {why}")
