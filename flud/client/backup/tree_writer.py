"""A backup's last steps in the version-2 format (docs/snapshots.md): the
tree of directory records, then the map page, the snapshot record, the map
index and the root record.

The tree is built from a second walk of the roots once every changed file
has landed: each directory's files are answered by the index (what this run
or an earlier one stored for them, as it was scanned), so a directory's
record can be made and sealed at once, and one directory's listing is all
that is held besides the open directories' record ids. A file that was
skipped while reading, or that appeared after the first walk, is left out
(the next snapshot has it). A record whose blob id the index knows is stored
already: an unchanged directory costs a seal and a hash, no STORE.

New records travel with the small files (SmallFiles.add_blob). The map page
of this run (its bundles, where its records are, and the previous run's
final bundles) goes in a bundle of its own, and then the snapshot record and
the map index in another: the index names each page with its bundle's
record, and the root record names the last bundle's, so everything is found
from the key alone.
"""
import json
import os
import socket

from twisted.internet import defer

from flud.client.backup.meta_reading import MetaReader
from flud.client.backup.tree_builder import TreeBuilder
from flud.client.repository.blobs import BlobSealer
from flud.client.context import wall_clock
from flud.client.backup.source_excludes import ExcludeRules
from flud.client.repository.bundle_sender import store_blobs
from flud.client.repository.head import Head, write_head
from flud.client.repository.holder_map import PAGE_ROWS, MapIndex, MapPage
from flud.client.repository.snapshot_paths import root_names
from flud.client.records import (DIRECTORY, EMPTY, FILE, LARGE, SMALL, SYMLINK, content_from_wire,
                                 content_kind, content_size)
from flud.client.backup.source_scan import entry_of
from flud.client.sparse import data_ranges, packed_size
from flud.client.repository.tree_records import LargeRecord, LargeRef, SmallRef, SnapshotRecord
from flud.client.backup.source_walk import walk


SAVE_EVERY = 1024   # records handed over between saves of what landed
CACHE_BATCH = 256   # records (and directories) written to the caches and index at once...
CACHE_BATCH_BYTES = 1 << 20   # ...or this many bytes of records held for the record cache


def _quiet(path, why):
    """The second walk's skips were said by the first."""


class TreeWriter:
    """Builds the tree of one backup. index: the client index; small: the
    run's SmallFiles (records go out with its bundles); skipped: paths the
    run could not read."""

    def __init__(self, index, sealer: BlobSealer, small, skipped, save=lambda: None,
                 links=None, on_problem=_quiet, record_cache=None):
        """save(): what landed goes to the index (called every SAVE_EVERY
        records, so what this run stored is not all held in memory).
        links: {(dev, inode): path} of the first link of each file with
        more than one (the first walk's); on_problem(path, why): what of an
        entry could not be kept (an xattr, a file's holes). record_cache: a
        RecordCache the new records also go to (repository/record_cache.py:
        readers of this home then need no network for them), or None."""
        self._record_cache = record_cache
        self.links = links or {}
        self._on_problem = on_problem
        self._meta = MetaReader(on_problem)
        self._roots = ()        # (root path, its name in the snapshot)
        self.index = index
        self.sealer = sealer
        self.small = small
        self.skipped = skipped
        self._save = save
        self._unsaved = set()   # blob ids handed over since the last save
        self._outgoing = []     # (blob id, sealed) waiting to be handed to the small files
        self.builder = TreeBuilder(sealer, self._known, self._store, self._meta_of)
        self.files = self.bytes = 0
        self.dirs = 0           # directory records made
        self.reused = 0         # unchanged subtrees kept as they were
        self._counts = {}       # directory -> (files, bytes) below it, until its parent takes it
        self._built = []        # (path, blob id, files, bytes) of directories made, for the index
        self._cache_rows = []   # (blob id, sealed) for the record cache, a batch at a time
        self._cache_bytes = 0

    def _known(self, blob_id: str) -> bool:
        return (blob_id in self._unsaved or self.small.holds_blob(blob_id)
                or self.index.known_blob(blob_id))

    def _store(self, blob_id: str, sealed: bytes) -> None:
        self._unsaved.add(blob_id)
        self._outgoing.append((blob_id, sealed))

    def _hand_over(self, last: bool = False):
        """The new records to the small files (and the record cache); a
        Deferred if the small files had to make room first, else None (no
        turn of inlineCallbacks per directory). last: the tree is done,
        what waits for the index goes now."""
        outgoing, self._outgoing = self._outgoing, []
        if self._record_cache is not None:
            self._cache_rows += outgoing
            self._cache_bytes += sum(len(sealed) for _, sealed in outgoing)
            # a transaction of the cache's a few hundred records, not one a
            # directory (a commit cost more than the directory's record)
            if self._cache_rows and (last or len(self._cache_rows) >= CACHE_BATCH
                                     or self._cache_bytes >= CACHE_BATCH_BYTES):
                self._record_cache.put_many(self._cache_rows)
                self._cache_rows, self._cache_bytes = [], 0
        if self._built and (last or len(self._built) >= CACHE_BATCH):
            self.index.built_dirs(self._built)
            self._built = []
        waiting = self.small.add_blobs(outgoing) if outgoing else None
        if len(self._unsaved) >= SAVE_EVERY:
            self._save()    # landed records to the index; the rest the small files hold
            self._unsaved = set()
        return waiting

    def _reuse(self, path: str) -> bool:
        """A directory whose subtree is as the last backup recorded it keeps
        its record (not listed, not sealed again)."""
        row = self.index.reusable_dir(path)
        if row is None:
            return False
        blob_id, files, nbytes = row[:3]
        self.builder.reuse(path, blob_id)
        self._counts[path] = (files, nbytes)
        self.reused += 1
        return True

    def _build(self, listing) -> None:
        own = [0, 0]   # this directory's files and bytes
        states, contents = self.index.states_with_contents(listing.path)
        blob_id = self.builder.directory(listing, self._file_ref(states, own, contents))
        for entry in listing.entries:
            if entry.kind == DIRECTORY and entry.path in self._counts:
                files, nbytes = self._counts.pop(entry.path)
                own[0] += files
                own[1] += nbytes
        self._counts[listing.path] = tuple(own)
        self._built.append((listing.path, blob_id, own[0], own[1]))   # index: _hand_over
        self.dirs += 1

    def _meta_of(self, entry):
        link = None
        if entry.kind == FILE and entry.nlink > 1:
            first = self.links.get((entry.dev, entry.inode))
            if first is not None:
                link = self._snapshot_path(first)
        return self._meta.meta(entry, link, entry.ranges)

    def _snapshot_path(self, path: str):
        for root, name in self._roots:
            if path == root:
                return name
            if path.startswith(root + "/"):
                return name + path[len(root):]
        return None

    def _state(self, states, entry):
        """The index's state of a file as the first walk read it; a later
        link of a file is its first link's (read and stored once)."""
        first = self.links.get((entry.dev, entry.inode)) if entry.nlink > 1 else None
        if first is not None and first != entry.path:
            if first in self.skipped:
                raise KeyError(entry.path)
            return self.index.states_in(os.path.dirname(first))[first]
        if entry.path in self.skipped:
            raise KeyError(entry.path)
        return states[entry.path]       # KeyError: not seen by the first walk

    def _file_ref(self, states, own, contents=None):
        """contents: {content id: record as stored} of the directory's files
        (states_with_contents), or None: asked of the index one by one."""
        def file_ref(entry):
            state = self._state(states, entry)
            stored = contents.get(state.content_id) if contents else None
            content = (json.loads(stored) if stored is not None
                       else self.index.content(state.content_id))
            if content is None:
                raise KeyError(entry.path)
            # The snapshot holds the file as it was read, not as it is now.
            entry.size, entry.mtime_ns = state.size, state.mtime_ns
            if content_size(content) != state.size:   # stored without its holes
                entry.ranges = self._holes(entry, state, content_size(content))
            own[0] += 1
            own[1] += state.size
            kind = content_kind(content)
            if kind == EMPTY:
                return None
            if kind == SMALL:
                small = content_from_wire(content)
                return SmallRef(small.key, small.method or "", small.bundle, small.offset,
                                small.length)
            if kind != LARGE:
                raise KeyError(entry.path)
            blob_id, sealed = self.sealer.seal(LargeRecord(content).encode())
            blob_id = blob_id.hex()
            if not self._known(blob_id):
                self._store(blob_id, sealed)
            return LargeRef(blob_id)
        return file_ref

    def _holes(self, entry, state, stored: int) -> tuple:
        """The data ranges of a file whose content holds only them: those it
        was read with (the index keeps them by content), or else (a link
        other than the first, an index from before them) found again from
        the file. KeyError, and the file named, where the file is no longer
        as it was read or its ranges no longer add up to what was stored: it
        is left out of this snapshot."""
        kept = self.index.holes_of(entry.path)
        if (kept is not None and kept[:3] == (state.size, state.mtime_ns, state.content_id)
                and packed_size(kept[3]) == stored):
            return kept[3]
        try:
            fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as err:
            self._on_problem(entry.path, f"not kept: {err.strerror}")
            raise KeyError(entry.path) from None
        try:
            st = os.fstat(fd)
            ranges = data_ranges(fd, state.size)
        finally:
            os.close(fd)
        if ((st.st_size, st.st_mtime_ns) != (state.size, state.mtime_ns)
                or packed_size(ranges) != stored):
            self._on_problem(entry.path, "changed while it was backed up (its holes moved)")
            raise KeyError(entry.path)
        return ranges

    @defer.inlineCallbacks
    def build(self, roots, excludes):
        """The blob id of the snapshot's root directory record. excludes:
        the ExcludeRules of the run's first walk (the same answers)."""
        excludes = ExcludeRules.of(excludes)
        tops = []
        self._roots = tuple(zip(roots, root_names(roots)))
        for root, name in zip(roots, root_names(roots)):
            try:
                st = os.lstat(root)
            except OSError:
                continue   # said by the first walk
            top = entry_of(root, st, _quiet)
            if top is None:
                continue
            if top.kind == DIRECTORY:
                if not self._reuse(root):
                    for listing in walk(root, (), _quiet, excludes.lister(root),
                                        self._reuse):
                        self._build(listing)
                        waiting = self._hand_over()
                        if waiting is not None:
                            yield waiting
                self.files += self._counts[root][0]
                self.bytes += self._counts.pop(root)[1]
                tops.append((name, top, None))
            elif top.kind == FILE:
                own = [0, 0]
                try:
                    ref = self._file_ref(self.index.states_in(os.path.dirname(root)), own)(top)
                except KeyError:
                    continue
                self.files += own[0]
                self.bytes += own[1]
                tops.append((name, top, ref))
            else:
                tops.append((name, top, top.target if top.kind == SYMLINK else None))
        tree = self.builder.root(tops)
        waiting = self._hand_over(last=True)
        if waiting is not None:
            yield waiting
        return tree


@defer.inlineCallbacks
def publish_tree(ctx, small, run_bundles, tree: str, roots, tags, stats, shares,
                 extents=None, summary=None):
    """Store this run's map page, its snapshot record and the new map index,
    and point the root record at them. run_bundles: {bundle id: Bundle} this
    run stored; run_blobs: [BlobRef] of the records it stored; shares: the
    keys of the shares it stored (their VERIFY challenges go in the page);
    extents: {extent id: share holders} of the large files' extents it
    stored (the map is the inventory prune reads; an extent it reused is
    not among them: the map's row for it stays the newest, repair's
    included); summary: the snapshot's summary in the client index (kept
    with what the run publishes, so a run killed once its head is saved is
    adopted by the next one, see run_rows.py).
    Returns (snapshot id, time, the snapshot record's blob id)."""
    index, sealer = ctx.index, BlobSealer(ctx.secret)
    head = Head.load(index)
    snapshot_id = head.next_snapshot_id(index)   # the head's ids go on, not the index's alone
    shares = set(shares) | {h.key for holders in (extents or {}).values() for h in holders}
    challenges = [(key, found) for key in sorted(shares)
                  if (found := index.challenges(key)) is not None]
    # This run's records, PAGE_ROWS to a page (read back from the index: a
    # first backup makes one record per directory); the first page also
    # has the bundles, extents and challenges, and the last head's records
    # (which only the last root located).
    first = MapPage.of(bundles={**head.final, **run_bundles}, extents=extents,
                       blobs=[head.snapshot] if head.snapshot else [], challenges=challenges)
    page_ids = []
    for page in _pages(first, index.run_blob_pages(PAGE_ROWS)):
        page_id, page_sealed = sealer.seal(page.encode())
        page_ids.append(page_id.hex())
        yield small.add_blob(page_id.hex(), page_sealed)
    refs, page_bundles, page_challenges = yield store_blobs(small, [])
    refs = {ref.blob_id: ref for ref in small.blob_refs if ref.blob_id in page_ids}
    small.blob_refs = [ref for ref in small.blob_refs if ref.blob_id not in refs]
    index.add_bundles((bid, b.to_wire()) for bid, b in page_bundles.items())
    index.add_challenges(page_challenges.items())
    located = tuple((refs[pid], page_bundles[refs[pid].bundle]) for pid in page_ids)
    index.add_blobs(refs.values())
    created = wall_clock()
    record = SnapshotRecord(snapshot_id, created, socket.gethostname(),
                            tuple(os.path.abspath(r) for r in roots), tuple(tags), False,
                            head.snapshot.blob_id if head.snapshot else None, tree, stats)
    snap_id, snap_sealed = sealer.seal(record.encode())
    old = head.index
    new_index = MapIndex(old.pages + located, old.snapshots + (snap_id.hex(),), old.v1)
    index.publishing(snap_id.hex(), snapshot_id, created, dict(summary or {}))
    yield write_head(ctx, small, head, new_index, sealer, newest=snap_id.hex(),
                     records=[(snap_id.hex(), snap_sealed)], snapshot_id=snapshot_id)
    return snapshot_id, created, snap_id.hex()


def _pages(first: MapPage, run_blobs):
    """The first page, with the run's first records, then pages of records."""
    blobs = next(run_blobs, [])
    yield MapPage(first.bundles, first.extents, tuple(sorted(first.blobs + tuple(blobs))),
                  first.challenges)
    for blobs in run_blobs:
        yield MapPage(blobs=tuple(blobs))
