"""A version-2 repository as the nodes hold it (docs/snapshots.md), read.

The root record names the map index and the newest snapshot; the index names
the map's pages (each with its bundle's record, so each is found from the
index alone) and the snapshots kept. The pages are loaded oldest first into
an sqlite file (MapCache), so the newest page wins for an object and memory
follows one page, not the map. Blobs are then fetched by id: the map says
which bundle range holds each, and the range is fetched as a small file's
is (repository/bundle_ranges.py: one ranged RETRIEVE, or a rebuild from
other shares),
then checked against its address and opened.
"""
import contextlib
import json
import os
import sqlite3
import tempfile

from twisted.internet import defer

from flud.client.repository.blobs import BlobDamaged, BlobSealer
from flud.client.repository.bundle_ranges import BundleRangeReader
from flud.client.repository.holder_map import PAGE_ROWS, MapIndex, MapPage, RootRecord
from flud.client.repository.record_runs import fetch_runs
from flud.client.records import (Bundle, ShareHolder, SmallContent, extents_of, holder_rows,
                                 set_holder_rows)
from flud.client.records import extent_id as extent_name
from flud.client.repository.tree_records import (BadRecord, BlobRef, LargeRecord, NewerFormat,
                                                 SnapshotRecord)
from flud.errors import FludError


SNAPSHOTS_AT_ONCE = 16   # snapshot records asked for at once by snapshots()


class BlobMissing(FludError):
    """The holder map does not say where a record is."""

    code = "BLOB_MISSING"


class MapCache:
    """The holder map in sqlite: bundles (id -> record), blobs (id -> bundle
    range) and extents (id -> share holders), the newest row winning.
    A file of its own under `directory`, removed by close()."""

    def __init__(self, directory: str):
        handle, self.path = tempfile.mkstemp(prefix="map-", suffix=".sqlite", dir=directory)
        os.close(handle)
        self.db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=OFF")
        self.db.execute("PRAGMA synchronous=OFF")   # a cache: rebuilt from the nodes each run
        self.db.execute("PRAGMA cache_size=-512")
        self.db.execute("CREATE TABLE bundles (id TEXT PRIMARY KEY, record TEXT)")
        self.db.execute("CREATE TABLE blobs (id TEXT PRIMARY KEY, bundle TEXT, "
                        "offset INTEGER, length INTEGER)")
        self.db.execute("CREATE TABLE extents (id TEXT PRIMARY KEY, holders TEXT)")
        self.db.execute("CREATE TABLE challenges (key TEXT PRIMARY KEY, items TEXT)")

    def close(self) -> None:
        self.db.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def add_bundles(self, items) -> None:
        """items: (bundle id, Bundle), newer than what is here (they replace it)."""
        self._add_bundles(items, "REPLACE")

    def _add_bundles(self, items, conflict) -> None:
        with _transaction(self.db):
            self.db.executemany(f"INSERT OR {conflict} INTO bundles VALUES (?,?)",
                                ((bid, json.dumps(b.to_wire())) for bid, b in items))

    def add_older(self, bundles=(), page: MapPage = None) -> None:
        """Rows older than what is here: kept only where nothing newer is
        (the map is read newest first, so the newest row of an object wins
        and each page is fetched from its bundle's newest holders)."""
        self._add_bundles(bundles, "IGNORE")
        if page is None:
            return
        self._add_bundles(page.bundles, "IGNORE")
        with _transaction(self.db):
            self.db.executemany("INSERT OR IGNORE INTO blobs VALUES (?,?,?,?)",
                                (tuple(ref) for ref in page.blobs))
            # a dropped row: no bundle, so older rows of the id stay out and
            # blob() finds none (the tree record's own range holds)
            self.db.executemany("INSERT OR IGNORE INTO blobs VALUES (?,NULL,0,0)",
                                ((blob_id,) for blob_id in page.dropped))
            self.db.executemany("INSERT OR IGNORE INTO extents VALUES (?,?)",
                                ((xid, json.dumps([h.to_wire() for h in holders]))
                                 for xid, holders in page.extents))
            self.db.executemany("INSERT OR IGNORE INTO challenges VALUES (?,?)",
                                ((key, json.dumps(list(items)))
                                 for key, items in page.challenges))

    def challenges(self, share_key: str):
        """The VERIFY challenges recorded for a share (as written), or None."""
        row = self.db.execute("SELECT items FROM challenges WHERE key=?",
                              (share_key,)).fetchone()
        return json.loads(row[0]) if row else None

    def bundle_record(self, bundle_id: str):
        """The bundle's record as written (a dict), or None."""
        row = self.db.execute("SELECT record FROM bundles WHERE id=?", (bundle_id,)).fetchone()
        return json.loads(row[0]) if row else None

    def bundle(self, bundle_id: str):
        record = self.bundle_record(bundle_id)
        return None if record is None else Bundle.from_wire(record)

    def bundle_ids(self):
        return [row[0] for row in self.db.execute("SELECT id FROM bundles ORDER BY id")]

    def blob(self, blob_id: str):
        row = self.db.execute("SELECT id, bundle, offset, length FROM blobs "
                              "WHERE id=? AND bundle IS NOT NULL", (blob_id,)).fetchone()
        return BlobRef(*row) if row else None

    def blob_rows(self):
        """Every BlobRef in the map (records, and small files moved by repack)."""
        return [BlobRef(*row) for row in
                self.db.execute("SELECT id, bundle, offset, length FROM blobs "
                                "WHERE bundle IS NOT NULL ORDER BY id")]

    def challenge_rows(self):
        return [(key, json.loads(items)) for key, items in
                self.db.execute("SELECT key, items FROM challenges ORDER BY key")]

    def extent_rows(self):
        """(extent id, [share holder as written]) of every extent in the map."""
        return [(xid, json.loads(holders)) for xid, holders in
                self.db.execute("SELECT id, holders FROM extents ORDER BY id")]

    def extent(self, extent_id: str):
        row = self.db.execute("SELECT holders FROM extents WHERE id=?", (extent_id,)).fetchone()
        return json.loads(row[0]) if row else None


@contextlib.contextmanager
def _transaction(db):
    """One transaction for a page's rows: the cache's connection is in
    autocommit mode, where each row of an executemany is a transaction of
    its own (a map page's rows took ~1 ms a page that way, profiled)."""
    db.execute("BEGIN")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


class _CachedBundles:
    """The map's bundle records as a read-only mapping (what a
    BundleRangeReader reads)."""

    def __init__(self, cache: MapCache):
        self._cache = cache

    def __getitem__(self, bundle_id):
        record = self._cache.bundle_record(bundle_id)
        if record is None:
            raise KeyError(bundle_id)
        return record

    def get(self, bundle_id, default=None):
        record = self._cache.bundle_record(bundle_id)
        return default if record is None else record


class Repository:
    """ctx: a JobContext (network, pool, coder, secret, home). Call open(root)
    first; close() removes the map cache."""

    def __init__(self, ctx, report_bad=lambda node, key, why: None,
                 count_retrieves=lambda n: None, record_cache=None):
        """record_cache: a RecordCache (repository/record_cache.py) for a
        reader: blobs are looked for there first, and those fetched put
        there; None (a writer, check, verify): the nodes alone."""
        self.unconfirmed = ""
        self.record_cache = record_cache   # why its root may not be the newest (a reader's), or ""
        self.ctx = ctx
        self.sealer = BlobSealer(ctx.secret)
        self.cache = MapCache(ctx.home.path)
        self.bundles = _CachedBundles(self.cache)
        self._fetch = BundleRangeReader(ctx.network, self.bundles, ctx.coder, self._checked,
                                        report_bad, count_retrieves)
        self.root = None
        self.index = None

    def close(self) -> None:
        self.cache.close()
        if self.record_cache is not None:
            self.record_cache.close()

    def _checked(self, content, stored):
        """A blob's sealed bytes if they are the ones its address names."""
        data = bytes(stored)
        return data if self.sealer.blob_id(data).hex() == content.key else None

    @defer.inlineCallbacks
    def open(self, root: RootRecord):
        """Read the map, newest first: the root, then the pages from the
        last one back (each fetched from its bundle's newest holders, which
        a later repair page may have moved)."""
        self.root = root
        self.cache.add_older(root.bundles)
        self.index = MapIndex.decode((yield self.open_ref(root.map_index)))
        yield self.load_pages(self.index.pages)

    @defer.inlineCallbacks
    def load_pages(self, pages, superseded=None):
        """Pages ((BlobRef, Bundle), ...), oldest first, into the cache,
        read newest first. superseded: a set that receives each (share
        key, node) an older row names and the object's newer row does not
        (a copy repair moved away: a writer merging the pages drops those
        rows, and prune must still find the copy)."""
        for ref, bundle in reversed(pages):
            self.cache.add_older([(ref.bundle, bundle)])
            page = MapPage.decode((yield self.open_ref(ref)))
            if superseded is not None:
                superseded.update(self._superseded_by_cache(page))
            self.cache.add_older(page=page)

    def _superseded_by_cache(self, page: MapPage):
        """(key, node) of `page`'s rows that a newer row already loaded
        does not name."""
        for bundle_id, bundle in page.bundles:
            newer = self.cache.bundle(bundle_id)
            if newer is not None:
                kept = {(h.key, h.node) for h in newer.holders}
                yield from ((h.key, h.node) for h in bundle.holders
                            if (h.key, h.node) not in kept)
        for extent_id, holders in page.extents:
            newer = self.cache.extent(extent_id)
            if newer is not None:
                kept = {(key, node) for _, key, node in newer}
                yield from ((h.key, h.node) for h in holders if (h.key, h.node) not in kept)

    def merged_pages(self, rows: int = PAGE_ROWS) -> list:
        """The map as loaded (the newest row of every object and challenge),
        as pages of at most `rows` objects: what merging the pages writes.
        The bundles that held the merged pages are rows of it too: prune
        finds them unreferenced and deletes them, as any superseded record."""
        bundles = {}
        for bundle_id in self.cache.bundle_ids():
            bundles[bundle_id] = self.cache.bundle(bundle_id)
        extents = {xid: tuple(ShareHolder(*h) for h in holders)
                   for xid, holders in self.cache.extent_rows()}
        return MapPage.of(bundles=bundles, extents=extents, blobs=self.cache.blob_rows(),
                          challenges=[(key, tuple(items))
                                      for key, items in self.cache.challenge_rows()]
                          ).split(rows)

    @defer.inlineCallbacks
    def sealed(self, ref: BlobRef):
        """The sealed bytes of the blob at ref (checked against its id)."""
        content = SmallContent(ref.length, ref.blob_id, ref.bundle, ref.offset, ref.length)
        if self.bundles.get(ref.bundle) is None:
            raise BlobMissing(f"record {ref.blob_id[:16]}: its bundle is not in the holder map")
        data = yield self._fetch.fetch(content)
        return data

    @defer.inlineCallbacks
    def open_ref(self, ref: BlobRef) -> bytes:
        data = yield self.sealed(ref)
        return self.sealer.open(bytes.fromhex(ref.blob_id), data)

    def fetch_sealed(self, blob_id: str):
        """Deferred: the sealed bytes of a blob, from the record cache (if
        this reader has one, and they are the bytes its address names) or
        located by the map."""
        if self.record_cache is not None:
            data = self.record_cache.get(blob_id)
            if data is not None and self.sealer.blob_id(data).hex() == blob_id:
                return defer.succeed(data)
        ref = self.cache.blob(blob_id)
        if ref is None:
            return defer.fail(BlobMissing(f"record {blob_id[:16]} is not in the holder map"))
        fetched = self.sealed(ref)
        if self.record_cache is not None:
            fetched.addCallback(self._keep, blob_id)
        return fetched

    def sealed_size(self, blob_id: str):
        """A record's sealed bytes as the map says, or None (not in it)."""
        ref = self.cache.blob(blob_id)
        return None if ref is None else ref.length

    def fetch_sealed_many(self, blob_ids) -> dict:
        """{blob id: Deferred of its sealed bytes} as fetch_sealed() gives
        each, but those the record cache lacks that lie close together in
        one bundle block come in one RETRIEVE (repository/record_runs.py)."""
        found, wanted = {}, []
        for blob_id in blob_ids:
            if self.record_cache is not None:
                data = self.record_cache.get(blob_id)
                if data is not None and self.sealer.blob_id(data).hex() == blob_id:
                    found[blob_id] = defer.succeed(data)
                    continue
            ref = self.cache.blob(blob_id)
            if ref is None:
                found[blob_id] = defer.fail(
                    BlobMissing(f"record {blob_id[:16]} is not in the holder map"))
            elif self.bundles.get(ref.bundle) is None:
                found[blob_id] = defer.fail(BlobMissing(
                    f"record {blob_id[:16]}: its bundle is not in the holder map"))
            else:
                wanted.append(ref)
        contents = [SmallContent(ref.length, ref.blob_id, ref.bundle, ref.offset, ref.length)
                    for ref in wanted]
        for ref, fetched in zip(wanted, fetch_runs(self._fetch, contents)):
            if self.record_cache is not None:
                fetched.addCallback(self._keep, ref.blob_id)
            found[ref.blob_id] = fetched
        return found

    def _keep(self, data, blob_id: str):
        self.record_cache.put(blob_id, data)
        return data

    @defer.inlineCallbacks
    def open_blob(self, blob_id: str) -> bytes:
        data = yield self.fetch_sealed(blob_id)
        return self.sealer.open(bytes.fromhex(blob_id), data)

    def small_range(self, ref) -> BlobRef:
        """Where a small file's stored bytes are (a tree's SmallRef): the
        range its entry names, or, after prune repacked it, the holder
        map's row for its key (the newest row wins)."""
        moved = self.cache.blob(ref.key)
        if moved is not None:
            return moved
        return BlobRef(ref.key, ref.bundle, ref.offset, ref.length)

    @defer.inlineCallbacks
    def large_content(self, ref) -> dict:
        """A large file's content record (a tree's LargeRef) as written,
        with the map's newest holders of each extent (repair moved them)."""
        content = LargeRecord.decode((yield self.open_blob(ref.content))).content
        for extent in extents_of(content):
            moved = self.cache.extent(extent_name(extent)) if holder_rows(extent) else None
            if moved:
                set_holder_rows(extent, moved)
        return content

    @defer.inlineCallbacks
    def snapshot(self, blob_id: str) -> SnapshotRecord:
        if blob_id == self.root.snapshot.blob_id:
            plain = yield self.open_ref(self.root.snapshot)
        else:
            plain = yield self.open_blob(blob_id)
        return SnapshotRecord.decode(plain)

    @defer.inlineCallbacks
    def snapshots(self, on_damaged=lambda blob_id, why: None) -> list:
        """[(blob id, SnapshotRecord)] of the snapshots kept, oldest first; a
        record that cannot be read is reported and left out."""
        found = []
        ids = list(self.index.snapshots)
        for start in range(0, len(ids), SNAPSHOTS_AT_ONCE):   # fetched a window at a time
            chunk = ids[start:start + SNAPSHOTS_AT_ONCE]
            results = yield defer.DeferredList([self.snapshot(b) for b in chunk],
                                               consumeErrors=True)
            for blob_id, (ok, result) in zip(chunk, results):
                if ok:
                    found.append((blob_id, result))
                elif result.check(BlobDamaged, BadRecord, NewerFormat, FludError):
                    on_damaged(blob_id, str(result.value))
                else:
                    result.raiseException()
        return found
