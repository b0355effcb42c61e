"""What this home stored and where: contents, bundles, segments and
extents; what prune drops (with the blobs and challenges that go with
them) and what repair moved.
"""
import json
import sqlite3
import threading

from flud.client.index_rows import IndexRows, _pack, _unpack
from flud.client.records import bundle_of, extent_id_or_none, extents_of, holder_rows


class ContentLookup:
    """Which contents the index holds, asked one id at a time from the
    small-file workers: a read-only connection of its own behind a lock
    (WAL lets it read while the run's connection writes)."""

    def __init__(self, path: str):
        self._db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        self._db.execute("PRAGMA cache_size=-256")
        self._lock = threading.Lock()

    def __contains__(self, content_id) -> bool:
        with self._lock:
            return self._db.execute("SELECT 1 FROM contents WHERE content_id=?",
                                    (content_id,)).fetchone() is not None

    def close(self) -> None:
        with self._lock:
            self._db.close()


class StoredObjects(IndexRows):
    """The contents, bundles and segments tables (drop_stored clears the
    blobs, files, dirs and challenges that name what it drops)."""

    path = None

    def has_chunks(self) -> bool:
        """Whether any chunk of a large file is known (backup/chunked.py)."""
        return self.db.execute("SELECT 1 FROM segments WHERE seg_key >= 'C' AND seg_key < 'D' "
                               "LIMIT 1").fetchone() is not None

    # ---- where contents and bundles are -------------------------------------

    def content(self, content_id: str):
        row = self.db.execute("SELECT record FROM contents WHERE content_id=?",
                              (content_id,)).fetchone()
        return _unpack(row[0]) if row else None

    def content_rows(self):
        """(content id, record as stored: compact JSON bytes), one at a time."""
        return self._rows("SELECT content_id, record FROM contents")

    def bundle_rows(self):
        return self._rows("SELECT bundle_id, record FROM bundles")

    def content_lookup(self) -> "ContentLookup":
        """`content id in lookup`, from any thread, without the set of every
        content id in memory (~100 bytes each)."""
        return ContentLookup(self.path)

    def add_contents(self, items) -> None:
        self._replace_rows("contents", 2, ((cid, _pack(rec)) for cid, rec in items))

    def segment(self, seg_key: str):
        row = self.db.execute("SELECT record FROM segments WHERE seg_key=?",
                              (seg_key,)).fetchone()
        return _unpack(row[0]) if row else None

    def add_segment(self, seg_key: str, record) -> None:
        self._replace_rows("segments", 2, [(seg_key, _pack(record))])

    def add_segments(self, items) -> None:
        """(key, record) rows of the segments table in one transaction (a
        chunked file's chunks: backup/chunked.py)."""
        self._replace_rows("segments", 2, ((key, _pack(record)) for key, record in items))

    def extent_rows(self):
        """(row key, extent record as written) of every extent this home
        stored: those a published map names ("E") and the orphans of killed
        runs ("O", see run_rows.py), which prune deletes if no map names
        them."""
        return [(key, json.loads(record)) for key, record in self.db.execute(
            "SELECT seg_key, record FROM segments WHERE seg_key LIKE 'E%' OR seg_key LIKE 'O%'")]

    def drop_stored(self, bundles, extents) -> int:
        """Forget bundles and extents prune is deleting (called BEFORE its
        first DELETE), with every content stored in them, every file state
        that names such a content, their records' blobs and their shares'
        challenges: no later backup may count on them (it reads those files
        again and stores them again). Returns how many contents were dropped."""
        bundles, extents = set(bundles), set(extents)
        dropped = []
        for content_id, record in self._rows("SELECT content_id, record FROM contents"):
            record = json.loads(record)
            if bundle_of(record) in bundles or any(
                    extent_id_or_none(e) in extents for e in extents_of(record)):
                dropped.append(content_id)
        extent_rows = [(key, record) for key, record in self.extent_rows()
                       if extent_id_or_none(record) in extents]
        # a chunked file's chunks in those extents (backup/chunked.py): a
        # later backup sends them again rather than name what is gone
        chunk_rows = [key for key, record in self._rows(
            "SELECT seg_key, record FROM segments WHERE seg_key LIKE 'C%'")
            if any(part[1] in extents for part in json.loads(record))] if extents else []
        share_keys = {row[1] for _, record in extent_rows for row in holder_rows(record)}
        for bundle_id in bundles:
            record = self.bundle(bundle_id)
            share_keys.update(row[1] for row in holder_rows(record or {}))
        with self.db:
            self.db.execute("BEGIN")
            self.db.executemany("DELETE FROM bundles WHERE bundle_id=?", ((b,) for b in bundles))
            self.db.executemany("DELETE FROM blobs WHERE bundle=?", ((b,) for b in bundles))
            self.db.executemany("DELETE FROM contents WHERE content_id=?",
                                ((c,) for c in dropped))
            self.db.executemany("DELETE FROM files WHERE content_id=?", ((c,) for c in dropped))
            self.db.executemany("DELETE FROM segments WHERE seg_key=?",
                                ((k,) for k, _ in extent_rows))
            self.db.executemany("DELETE FROM segments WHERE seg_key=?", ((k,) for k in chunk_rows))
            self.db.executemany("DELETE FROM challenges WHERE share_key=?",
                                ((k,) for k in share_keys))
            if bundles or extents:   # a kept record may name what is gone: rebuild them all
                self.db.execute("DELETE FROM dirs")
        return len(dropped)

    def forget_blobs(self, blob_ids) -> None:
        """Forget records whose holder map rows prune drops (before its first
        DELETE), whatever bundle this index names for them: the map's newest
        row may name another copy than this index does (a home that adopted
        back after another stored the record again), and a record the map
        does not locate must not be deduplicated against (seed 50020). The
        directory cache goes too: a directory it keeps may name one."""
        blob_ids = list(blob_ids)
        if not blob_ids:
            return
        with self.db:
            self.db.execute("BEGIN")
            self.db.executemany("DELETE FROM blobs WHERE blob_id=?", ((b,) for b in blob_ids))
            self.db.execute("DELETE FROM dirs")

    def bundle(self, bundle_id: str):
        row = self.db.execute("SELECT record FROM bundles WHERE bundle_id=?",
                              (bundle_id,)).fetchone()
        return _unpack(row[0]) if row else None

    def add_bundles(self, items) -> None:
        self._replace_rows("bundles", 2, ((bid, _pack(rec)) for bid, rec in items))

    # ---- repair -------------------------------------------------------------

    def repaired(self, moves) -> None:
        """Repair stored shares on new nodes: moves {object id: [(index,
        share key, new node)]}, a bundle id or an extent id (its first
        share's key). Every local copy of those holders follows (the bundle
        rows, the extent rows a resumed backup reuses, the large contents'
        extents a snapshot seals), in one transaction: an index that named
        the old holders would hand them back to the holder map."""
        moved = {oid: {index: node for index, _key, node in rows}
                 for oid, rows in moves.items() if rows}
        if not moved:
            return

        def follow(record) -> bool:
            xid = extent_id_or_none(record)
            new = moved.get(xid) if xid is not None else None   # an extent, by its id
            return self._moved_shares(record, new)

        bundles, extents, contents = [], [], []
        for bundle_id, record in self._rows("SELECT bundle_id, record FROM bundles"):
            record = json.loads(record)
            if self._moved_shares(record, moved.get(bundle_id)):
                bundles.append((bundle_id, _pack(record)))
        for key, record in self.extent_rows():
            if follow(record):
                extents.append((key, _pack(record)))
        for content_id, record in self._rows("SELECT content_id, record FROM contents"):
            record = json.loads(record)
            if any([follow(extent) for extent in extents_of(record)]):
                contents.append((content_id, _pack(record)))
        with self.db:
            self.db.execute("BEGIN")
            self._replace_rows("bundles", 2, bundles, transaction=False)
            self._replace_rows("segments", 2, extents, transaction=False)
            self._replace_rows("contents", 2, contents, transaction=False)


    @staticmethod
    def _moved_shares(record, new) -> bool:
        """Put record["shares"] ([index, key, node] rows) on the new nodes
        ({index: node}); whether anything changed."""
        if not new:
            return False
        changed = False
        for row in holder_rows(record):
            node = new.get(row[0])
            if node is not None and row[2] != node:
                row[2] = node
                changed = True
        return changed
