"""What the kept snapshots reach, and what the repository holds.

Reach: every kept snapshot's tree is walked record by record, each record
once however many snapshots share it (an unchanged directory is one blob),
so the cost follows the unique records, not snapshots x files. What is
reached: bundles (and the bytes of each that are live, with every live
member written to an sqlite table, for repacking), and extents. The map's
own pages and index, the kept snapshot records and the version-1
manifests still listed are reached too.

Inventory: every bundle and extent the repository holds, from the holder
map (which every backup adds its bundles and extents to) and from this
home's index (which also knows what a backup killed half way stored: its
extents are written as they land, its bundles every few hundred files).
"""
import json
from typing import NamedTuple

from twisted.internet import defer

from flud.client.repository.version1_reader import fetch_manifest
from flud.client.records import Bundle, extent_id, extent_stored_bytes, extents_of, holder_rows
from flud.client.repository.tree_records import DIRECTORY, DirectoryRecord, LargeRecord, LargeRef, SmallRef
from flud.errors import FludError

BUNDLE, EXTENT = "b", "x"
FETCHES_AT_ONCE = 32    # records being fetched at once
FETCH_CHUNK = 256       # records of a level read before their entries are taken


def object_id(kind: str, name: str) -> str:
    """An object's id in prune's bookkeeping: what one set of DELETEs removes."""
    return f"{kind}:{name}"


class RecordUnreadable(FludError):
    """A record a kept snapshot reaches cannot be read now (its bundle's
    holders are away or damaged): what it reaches is unknown, so nothing
    may be deleted this run."""

    code = "PRUNE_RECORD_UNREADABLE"


def _unreadable(failure):
    err = failure.value
    if isinstance(err, defer.FirstError):
        err = err.subFailure.value
    raise RecordUnreadable(
        f"a record the kept snapshots reach cannot be read now ({err}): nothing is deleted "
        f"while what it reaches is unknown. Run `flud check --repair`, or prune again when "
        f"more nodes are up.") from err


class Reached(NamedTuple):
    bundles: dict      # bundle id -> live bytes in it
    extents: set       # extent ids
    records: int       # directory and large-content records read
    extent_bytes: int  # what the reached extents store (each once), before n/k


class Reach:
    """repo: an open Repository; kept: [(blob id, SnapshotRecord)]."""

    def __init__(self, repo, kept, ctx):
        self.repo = repo
        self.kept = kept
        self.ctx = ctx
        self.bundles = {}
        self.extents = set()
        self.extent_bytes = 0
        self._seen = set()     # record blob ids read
        db = repo.cache.db
        # kind: "blob" (a record: its id checks it), or "small:" + method
        # with the file's size (its convergent key checks it)
        db.execute("CREATE TABLE IF NOT EXISTS live_members (bundle TEXT, key TEXT, "
                   "offset INTEGER, length INTEGER, kind TEXT, size INTEGER)")
        db.execute("CREATE INDEX IF NOT EXISTS live_by_bundle ON live_members (bundle)")
        self._db = db
        self._rows = []

    def _live(self, bundle_id, key, offset, length, kind, size=0) -> None:
        self.bundles[bundle_id] = self.bundles.get(bundle_id, 0) + length
        self._rows.append((bundle_id, key, offset, length, kind, size))
        if len(self._rows) >= 4096:
            self._flush()

    def _flush(self) -> None:
        with self._db:
            self._db.executemany("INSERT INTO live_members VALUES (?,?,?,?,?,?)", self._rows)
        self._rows = []

    def _blob(self, blob_id) -> None:
        ref = self.repo.cache.blob(blob_id)
        if ref is not None:
            self._live(ref.bundle, ref.blob_id, ref.offset, ref.length, "blob")

    @defer.inlineCallbacks
    def run(self):
        root = self.repo.root
        for bundle_id, bundle in root.bundles:   # the head: map index, newest snapshot
            self.bundles.setdefault(bundle_id, 0)
        self._live(root.map_index.bundle, root.map_index.blob_id, root.map_index.offset,
                   root.map_index.length, "blob")
        for ref, _ in self.repo.index.pages:
            self._live(ref.bundle, ref.blob_id, ref.offset, ref.length, "blob")
        for blob_id, record in self.kept:
            self._blob(blob_id)
            yield self._tree(record.tree)
        for old in self.repo.index.v1:
            yield self._version1(old)
        self._flush()
        # A file unchanged across snapshots is named by every version of its
        # directory: its bytes count once per bundle.
        for bundle_id, live in self._db.execute(
                "SELECT bundle, sum(length) FROM (SELECT DISTINCT bundle, key, offset, length "
                "FROM live_members) GROUP BY bundle"):
            self.bundles[bundle_id] = live
        return Reached(self.bundles, self.extents, len(self._seen), self.extent_bytes)

    @defer.inlineCallbacks
    def _tree(self, tree_id):
        """Level by level, FETCHES_AT_ONCE records in flight (a ranged
        RETRIEVE each: one at a time, a tree of 10,000 directories is 10,000
        round trips)."""
        level = [tree_id]
        while level:
            below, large = [], []
            for start in range(0, len(level), FETCH_CHUNK):
                chunk = [b for b in dict.fromkeys(level[start:start + FETCH_CHUNK])
                         if b not in self._seen]
                self._seen.update(chunk)
                records = yield self._fetch_all(chunk)
                for blob_id, record in zip(chunk, records):
                    self._blob(blob_id)
                    directory = DirectoryRecord.decode(record)
                    below.extend(directory.more)
                    for entry in directory.entries:
                        if entry.kind == DIRECTORY:
                            below.append(entry.ref)
                        elif isinstance(entry.ref, SmallRef):
                            self._small(entry.ref, entry.size)
                        elif isinstance(entry.ref, LargeRef):
                            large.append(entry.ref.content)
            yield self._large_all(large)
            level = below

    def _fetch_all(self, blob_ids):
        slots = defer.DeferredSemaphore(FETCHES_AT_ONCE)
        d = defer.gatherResults([slots.run(self.repo.open_blob, b) for b in blob_ids],
                                consumeErrors=True)
        return d.addErrback(_unreadable)

    @defer.inlineCallbacks
    def _large_all(self, blob_ids):
        fresh = [b for b in dict.fromkeys(blob_ids) if b not in self._seen]
        self._seen.update(fresh)
        for start in range(0, len(fresh), FETCH_CHUNK):
            chunk = fresh[start:start + FETCH_CHUNK]
            records = yield self._fetch_all(chunk)
            for blob_id, record in zip(chunk, records):
                self._blob(blob_id)
                self._large_content(LargeRecord.decode(record).content)

    def _small(self, ref: SmallRef, size: int) -> None:
        moved = self.repo.cache.blob(ref.key)   # repacked: the map says where it is now
        where = (moved.bundle, moved.offset, moved.length) if moved else \
            (ref.bundle, ref.offset, ref.length)
        self._live(where[0], ref.key, where[1], where[2], "small:" + ref.method, size)

    def _large_content(self, content) -> None:
        for extent in extents_of(content):
            name = extent_id(extent)
            if name not in self.extents:
                self.extents.add(name)
                self.extent_bytes += extent_stored_bytes(extent)

    @defer.inlineCallbacks
    def _version1(self, old):
        """A version-1 snapshot still listed: everything its manifest names is live."""
        ctx = self.ctx
        manifest = yield fetch_manifest(ctx.network, ctx.pool, ctx.coder, ctx.secret,
                                        old["manifest"])
        for bundle_id, record in manifest["bundles"].items():
            self.bundles[bundle_id] = self.bundles.get(bundle_id, 0) + Bundle.from_wire(
                record).length
        for content in manifest["contents"].values():
            for extent in extents_of(content):
                self.extents.add(extent_id(extent))


def index_extents(client_index):
    """[(row key, extent record as written)] of the extents this home's
    index holds outside the map: every read of them goes through here (a
    backup killed half way leaves its landed extents there, for prune to
    find)."""
    return client_index.extent_rows()


def _stored(repo, client_index):
    """(kind, name, record's share rows) of every bundle and extent this
    home's index or the holder map knows, the index's first, then the map's
    newest rows (which win where both name one)."""
    for bundle_id, record in client_index.bundle_rows():
        yield BUNDLE, bundle_id, holder_rows(json.loads(record))
    for bundle_id in repo.cache.bundle_ids():
        yield BUNDLE, bundle_id, holder_rows(repo.cache.bundle_record(bundle_id))
    for _, record in index_extents(client_index):
        yield EXTENT, extent_id(record), holder_rows(record)
    for xid, holders in repo.cache.extent_rows():
        yield EXTENT, xid, holders


def inventory(repo, client_index):
    """{object id: (kind, name, [(share key, node id hex)])}: every bundle
    and extent the map or this home's index knows, with where its shares are
    (the map's newest holders first, then any other holder the index names:
    an object deleted whole leaves no copy a repair moved away from behind)."""
    found = {}
    for kind, name, rows in _stored(repo, client_index):
        oid = object_id(kind, name)
        shares = _shares(rows)
        if oid in found:
            shares += [place for place in found[oid][2] if place not in shares]
        found[oid] = (kind, name, shares)
    return found


def named_shares(repo, client_index) -> set:
    """{(share key, node id hex)} that a newest map row or this home's index
    names: never surplus. The index counts too: where its row and the map's
    disagree (the map moved by a repair), a backup may still name the
    index's holders, so their copies stay until both agree."""
    named = set()
    for _, _, rows in _stored(repo, client_index):
        named.update(_shares(rows))
    return named


def _shares(rows):
    return [(row[1], row[2]) for row in rows]
