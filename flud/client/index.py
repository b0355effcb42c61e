"""The client's local index (sqlite, versioned schema).

It answers "has this file changed since last time?" without reading it, and
"where is this content?" without the network. Everything here can also be
rebuilt from the manifest on the network (total-loss restore), so the index
is a cache of what the manifest says plus change-detection state.
"""
import json
import os
import sqlite3
import threading
import zlib
from typing import NamedTuple

from flud.client import run_rows
from flud.client.records import (BlobRef, bundle_of, extent_id_or_none, extents_of,
                                 holder_rows)
from flud.errors import FludError

SCHEMA_VERSION = 5

_MIGRATIONS = {
    1: [
        """CREATE TABLE files (
               path TEXT PRIMARY KEY, size INTEGER, mtime_ns INTEGER,
               ctime_ns INTEGER, inode INTEGER, content_id TEXT)""",
        """CREATE TABLE contents (content_id TEXT PRIMARY KEY, record BLOB)""",
        """CREATE TABLE bundles (bundle_id TEXT PRIMARY KEY, record BLOB)""",
        """CREATE TABLE snapshots (
               id INTEGER PRIMARY KEY, created REAL, summary TEXT, manifest BLOB)""",
        """CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)""",
        # Segments that landed, by convergent key: a re-run after an
        # interruption (or a duplicate file) does not send them again.
        """CREATE TABLE segments (seg_key TEXT PRIMARY KEY, record BLOB)""",
    ],
    # VERIFY challenges by share key (they were one JSON value in meta, read
    # and rewritten whole by every run: ~3 MB of objects per GiB backed up).
    2: [
        """CREATE TABLE challenges (share_key TEXT PRIMARY KEY, record BLOB)""",
        "_move_challenges_out_of_meta",
    ],
    # Version-2 snapshots (docs/snapshots.md): a backup asks for the files of
    # one directory at a time (memory follows the directory, not the tree),
    # and knows which records' blobs are stored already, and where.
    3: [
        "ALTER TABLE files ADD COLUMN parent TEXT",
        "_fill_file_parents",
        "CREATE INDEX files_by_parent ON files (parent)",
        """CREATE TABLE blobs (
               blob_id TEXT PRIMARY KEY, bundle TEXT, offset INTEGER, length INTEGER)""",
    ],
    # Each directory's last record: a directory whose listing (and every
    # listing below it) is as it was keeps its record without being read
    # again (a no-change backup lists the tree once and seals nothing).
    4: [
        """CREATE TABLE dirs (path TEXT PRIMARY KEY, local TEXT, subtree TEXT,
               blob_id TEXT, files INTEGER, bytes INTEGER)""",
    ],
    # Nothing counts as stored until the map that names it is published
    # (run_rows.py): the rows a backup writes before its root are listed
    # here, with what they replaced, and rolled back if it never published.
    # Extent rows an older flud left may be a killed run's, named by no
    # map: they become orphans ("O"), adopted (mapped) by the backup that
    # reuses them, deleted by prune if nothing does.
    5: [
        """CREATE TABLE run_rows (tbl TEXT, key TEXT, old TEXT, PRIMARY KEY (tbl, key))""",
        "UPDATE segments SET seg_key = 'O' || substr(seg_key, 2) WHERE seg_key LIKE 'E%'",
    ],
}


class IndexVersionError(FludError):
    """The client index was made by a newer flud."""

    code = "INDEX_VERSION"


class FileState(NamedTuple):
    """What the index knows of a file as it was last backed up."""
    size: int
    mtime_ns: int
    ctime_ns: int
    inode: int
    content_id: str

    def unchanged(self, entry) -> bool:
        """The scanned `entry` looks as it did (size, mtime, ctime, inode)."""
        return (self.size == entry.size and self.mtime_ns == entry.mtime_ns
                and self.ctime_ns == entry.ctime_ns and self.inode == entry.inode)


def _pack(record) -> bytes:
    return json.dumps(record, separators=(",", ":")).encode()


def _unpack(blob):
    return None if blob is None else json.loads(blob)


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


class ClientIndex(run_rows.OpenRun):
    def __init__(self, path: str):
        self.path = path
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        # 256 KiB of page cache, not sqlite's 2 MB: a backup writes rows a run
        # at a time and reads tables in one pass, where the OS cache serves as
        # well (a 1 GiB backup's peak RSS -1.2 MB; 50000-row scans and inserts
        # took the same time).
        self.db.execute("PRAGMA cache_size=-256")
        self._run_open = False   # a backup's writes are listed (run_rows.py)
        self._migrate()

    def _migrate(self) -> None:
        self.db.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER)")
        row = self.db.execute("SELECT version FROM schema_version").fetchone()
        current = row[0] if row else 0
        if current > SCHEMA_VERSION:
            raise IndexVersionError(
                f"the client index has schema version {current}, newer than this flud "
                f"({SCHEMA_VERSION}); upgrade flud")
        for version in range(current + 1, SCHEMA_VERSION + 1):
            with self.db:
                self.db.execute("BEGIN")
                for statement in _MIGRATIONS[version]:
                    if statement.startswith("_"):
                        getattr(self, statement)()
                    else:
                        self.db.execute(statement)
                self.db.execute("DELETE FROM schema_version")
                self.db.execute("INSERT INTO schema_version VALUES (?)", (version,))

    def _fill_file_parents(self) -> None:
        paths = [row[0] for row in self.db.execute("SELECT path FROM files")]
        self.db.executemany("UPDATE files SET parent=? WHERE path=?",
                            ((os.path.dirname(path), path) for path in paths))

    def _move_challenges_out_of_meta(self) -> None:
        old = self.get_meta("challenges")
        if old:
            self.add_challenges(old.items(), transaction=False)
        self.db.execute("DELETE FROM meta WHERE key='challenges'")

    def close(self) -> None:
        self.db.close()

    # ---- change detection --------------------------------------------------

    def states_in(self, directory: str) -> dict:
        """path -> FileState of the files directly in one directory."""
        make = FileState._make
        return {row[0]: make(row[1:]) for row in self.db.execute(
            "SELECT path, size, mtime_ns, ctime_ns, inode, content_id FROM files "
            "WHERE parent=?", (directory,))}

    def states_with_contents(self, directory: str) -> tuple:
        """(states_in(directory), {content id: its record}) in one query: a
        backup's tree writer asks for one directory's files and then each
        one's content (one query a file was ~40 us a file, and a first
        backup's largest index cost after the writes)."""
        make = FileState._make
        states, contents = {}, {}
        for row in self.db.execute(
                "SELECT f.path, f.size, f.mtime_ns, f.ctime_ns, f.inode, f.content_id, c.record "
                "FROM files f LEFT JOIN contents c ON c.content_id = f.content_id "
                "WHERE f.parent=?", (directory,)):
            states[row[0]] = make(row[1:6])
            if row[6] is not None:
                contents[row[5]] = row[6]
        return states, contents

    def has_chunks(self) -> bool:
        """Whether any chunk of a large file is known (backup/chunked.py)."""
        return self.db.execute("SELECT 1 FROM segments WHERE seg_key >= 'C' AND seg_key < 'D' "
                               "LIMIT 1").fetchone() is not None

    def has_file(self, path: str) -> bool:
        """Whether a backup recorded this path before (whatever it held)."""
        return self.db.execute("SELECT 1 FROM files WHERE path=?", (path,)).fetchone() is not None

    def states_known(self, directory: str) -> dict:
        """path -> FileState of the files directly in one directory whose
        content the index knows (a state without its content is sent again)."""
        make = FileState._make
        return {row[0]: make(row[1:]) for row in self.db.execute(
            "SELECT f.path, f.size, f.mtime_ns, f.ctime_ns, f.inode, f.content_id FROM files f "
            "JOIN contents c ON c.content_id = f.content_id WHERE f.parent=?", (directory,))}

    # ---- files with holes: the data ranges each was read with -------------
    # A cache beside the schema (made where missing, ignored by a flud
    # without it): the tree writer finds the ranges here, by the content
    # they were read into, or else asks the file again (backup/tree_writer.py).

    def _holes_table(self) -> None:
        self.db.execute("CREATE TABLE IF NOT EXISTS file_holes (path TEXT PRIMARY KEY, "
                        "size INTEGER, mtime_ns INTEGER, content_id TEXT, ranges TEXT)")

    def record_holes(self, rows) -> None:
        """rows: (path, whole size, mtime_ns, content id, ((offset, length), ...))."""
        self._holes_table()
        with self.db:
            self.db.execute("BEGIN")
            self.db.executemany("INSERT OR REPLACE INTO file_holes VALUES (?, ?, ?, ?, ?)",
                                ((p, size, mtime, cid, json.dumps(ranges))
                                 for p, size, mtime, cid, ranges in rows))

    def holes_of(self, path: str):
        """(size, mtime_ns, content id, ranges) a file was last read with, or None."""
        self._holes_table()
        row = self.db.execute("SELECT size, mtime_ns, content_id, ranges FROM file_holes "
                              "WHERE path=?", (path,)).fetchone()
        if row is None:
            return None
        return (*row[:3], tuple(tuple(r) for r in json.loads(row[3])))

    # ---- directories: what a backup's first walk saw, and their last records

    def begin_dirs(self) -> None:
        self.db.execute("CREATE TEMP TABLE IF NOT EXISTS seen_dirs (path TEXT PRIMARY KEY, "
                        "local TEXT, subtree TEXT)")
        self.db.execute("DELETE FROM seen_dirs")
        self.db.execute("CREATE TEMP TABLE IF NOT EXISTS built_dirs (path TEXT PRIMARY KEY, "
                        "local TEXT, subtree TEXT, blob_id TEXT, files INTEGER, bytes INTEGER)")
        self.db.execute("DELETE FROM built_dirs")

    def add_seen_dir(self, path: str, local: str, subtree: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO seen_dirs VALUES (?,?,?)", (path, local, subtree))

    def dir_local(self, path: str):
        """The listing fingerprint this directory had at the last backup, or None."""
        row = self.db.execute("SELECT local FROM dirs WHERE path=?", (path,)).fetchone()
        return row[0] if row else None

    def reusable_dir(self, path: str):
        """(blob id, files, bytes) of a directory whose subtree is as the
        last backup recorded it (this run's first walk says), else None."""
        row = self.db.execute(
            "SELECT d.blob_id, d.files, d.bytes, d.local, d.subtree FROM dirs d JOIN seen_dirs s "
            "ON s.path = d.path AND s.subtree = d.subtree WHERE d.path=?", (path,)).fetchone()
        if row is None or not self.known_blob(row[0]):
            return None
        return row

    def built_dir(self, path: str, blob_id: str, files: int, nbytes: int) -> None:
        """A directory record this run made (kept once the snapshot is published)."""
        self.built_dirs([(path, blob_id, files, nbytes)])

    def built_dirs(self, rows) -> None:
        """built_dir() of (path, blob id, files, bytes) rows, in one
        transaction (a commit a directory cost more than the row)."""
        with self.db:
            self.db.execute("BEGIN")
            self.db.executemany("INSERT OR REPLACE INTO built_dirs SELECT path, local, subtree, "
                                "?, ?, ? FROM seen_dirs WHERE path=?",
                                ((blob_id, files, nbytes, path)
                                 for path, blob_id, files, nbytes in rows))

    def add_walked(self, pending, seen) -> None:
        """What a backup's first walk found, in one transaction for many
        directories: pending, the scan.Entry of files to send (add_pending);
        seen, (path, listing fingerprint, subtree fingerprint) of each
        directory listed (add_seen_dir). A transaction a directory took
        longer than the walk itself (two commits per directory)."""
        with self.db:
            self.db.execute("BEGIN")
            self._replace_rows("pending (path, size, mtime_ns, ctime_ns, inode, mode)", 6,
                               ((e.path, e.size, e.mtime_ns, e.ctime_ns, e.inode, e.mode)
                                for e in pending), transaction=False)
            self.db.executemany("INSERT OR REPLACE INTO seen_dirs VALUES (?,?,?)", seen)

    def _keep_built_dirs(self) -> None:
        self.db.execute("CREATE TEMP TABLE IF NOT EXISTS built_dirs (path TEXT PRIMARY KEY, "
                        "local TEXT, subtree TEXT, blob_id TEXT, files INTEGER, bytes INTEGER)")
        self.db.execute("INSERT OR REPLACE INTO dirs SELECT * FROM built_dirs "
                        "WHERE local IS NOT NULL")
        self.db.execute("DELETE FROM built_dirs")

    # ---- a run's files to send: a temporary table, so the run holds one
    # directory's listing at a time, never the tree's ---------------------------

    def begin_pending(self) -> None:
        self.db.execute("PRAGMA temp_store=FILE")
        self.db.execute("CREATE TEMP TABLE IF NOT EXISTS pending (n INTEGER PRIMARY KEY, "
                        "path TEXT UNIQUE, size INTEGER, mtime_ns INTEGER, ctime_ns INTEGER, "
                        "inode INTEGER, mode INTEGER)")
        self.db.execute("DELETE FROM pending")

    def add_pending(self, entries) -> None:
        """entries: scan.Entry of files to send."""
        self._replace_rows("pending (path, size, mtime_ns, ctime_ns, inode, mode)", 6,
                           ((e.path, e.size, e.mtime_ns, e.ctime_ns, e.inode, e.mode)
                            for e in entries))

    def pending_totals(self) -> tuple:
        count, size = self.db.execute("SELECT count(*), coalesce(sum(size), 0) "
                                      "FROM pending").fetchone()
        return count, size

    def pending_rows(self, least: int, below: int, page: int = 1024):
        """(path, size, mtime_ns, ctime_ns, inode, mode) of the files to send
        with least <= size < below, in the order found, a page at a time."""
        after = 0
        while True:
            rows = self.db.execute(
                "SELECT n, path, size, mtime_ns, ctime_ns, inode, mode FROM pending "
                "WHERE n > ? AND size >= ? AND size < ? ORDER BY n LIMIT ?",
                (after, least, below, page)).fetchall()
            if not rows:
                return
            after = rows[-1][0]
            for row in rows:
                yield row[1:]

    def record_landed(self, landed) -> None:
        """landed: (path, content id) of files sent this run: their state
        as scanned (the pending row) is what the index remembers."""
        with self.db:
            self.db.execute("BEGIN")
            self._track("files", [path for path, _ in landed])
            self.db.executemany(
                "INSERT OR REPLACE INTO files (path, size, mtime_ns, ctime_ns, inode, "
                "content_id, parent) SELECT path, size, mtime_ns, ctime_ns, inode, ?, ? "
                "FROM pending WHERE path=?",
                ((cid, os.path.dirname(path), path) for path, cid in landed))

    # ---- where version-2 records' blobs are ----------------------------------

    def known_blob(self, blob_id: str) -> bool:
        return self.db.execute("SELECT 1 FROM blobs WHERE blob_id=?",
                               (blob_id,)).fetchone() is not None

    def blob(self, blob_id: str):
        """The BlobRef of a stored blob, or None."""
        row = self.db.execute("SELECT blob_id, bundle, offset, length FROM blobs "
                              "WHERE blob_id=?", (blob_id,)).fetchone()
        return BlobRef(*row) if row else None

    def add_blobs(self, refs, this_run: bool = False) -> None:
        """refs: BlobRefs of stored records; this_run: also listed for this
        run's map page (run_blobs, a temporary table: a first backup of a
        large tree makes one record per directory)."""
        refs = [tuple(ref) for ref in refs]
        self._replace_rows("blobs", 4, refs)
        if this_run:
            self.db.execute("CREATE TEMP TABLE IF NOT EXISTS run_blobs (blob_id TEXT PRIMARY KEY, "
                            "bundle TEXT, offset INTEGER, length INTEGER)")
            self._replace_rows("run_blobs", 4, refs)

    def begin_run_blobs(self) -> None:
        self.db.execute("CREATE TEMP TABLE IF NOT EXISTS run_blobs (blob_id TEXT PRIMARY KEY, "
                        "bundle TEXT, offset INTEGER, length INTEGER)")
        self.db.execute("DELETE FROM run_blobs")

    def run_blob_pages(self, rows: int):
        """This run's BlobRefs, sorted, a list of at most `rows` at a time."""
        after = ""
        while True:
            page = [BlobRef(*row) for row in self.db.execute(
                "SELECT blob_id, bundle, offset, length FROM run_blobs WHERE blob_id > ? "
                "ORDER BY blob_id LIMIT ?", (after, rows))]
            if not page:
                return
            after = page[-1].blob_id
            yield page

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

    def challenge_rows(self):
        """(share key hex, [[offset, span, digest hex], ...] as JSON bytes)."""
        return self._rows("SELECT share_key, record FROM challenges")

    def add_challenges(self, items, transaction: bool = True) -> None:
        """items: (share key hex, challenges) as segments.challenges_for()."""
        self._replace_rows("challenges", 2, ((key, _pack(record)) for key, record in items),
                           transaction)

    def challenges(self, share_key: str):
        row = self.db.execute("SELECT record FROM challenges WHERE share_key=?",
                              (share_key,)).fetchone()
        return _unpack(row[0]) if row else None

    def _replace_rows(self, table: str, columns: int, rows, transaction: bool = True) -> None:
        """INSERT OR REPLACE rows into table, in a transaction of their own
        unless the caller is inside one (transaction=False)."""
        sql = f"INSERT OR REPLACE INTO {table} VALUES ({','.join('?' * columns)})"
        if self._run_open and table in run_rows.TRACKED:
            rows = [tuple(row) for row in rows]
        if not transaction:
            self._track(table, rows)
            self.db.executemany(sql, rows)
            return
        with self.db:
            self.db.execute("BEGIN")
            self._track(table, rows)
            self.db.executemany(sql, rows)

    def _track(self, table: str, rows) -> None:
        """While a backup is open, list the rows it writes (keys first in each
        row) with what they replace (run_rows.py), in the write's transaction."""
        if self._run_open and table in run_rows.TRACKED:
            run_rows.track(self.db, table, [row if isinstance(row, str) else row[0]
                                            for row in rows])

    def _rows(self, query: str):
        # A cursor of its own, read row by row: the table is never all in memory.
        # Records are bytes whatever type they were stored as.
        for key, record in self.db.execute(query):
            yield key, record.encode() if isinstance(record, str) else record

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

    def remove_snapshots(self, snapshot_ids) -> None:
        with self.db:
            self.db.execute("BEGIN")
            self.db.executemany("DELETE FROM snapshots WHERE id=?", ((i,) for i in snapshot_ids))

    def bundle(self, bundle_id: str):
        row = self.db.execute("SELECT record FROM bundles WHERE bundle_id=?",
                              (bundle_id,)).fetchone()
        return _unpack(row[0]) if row else None

    def add_bundles(self, items) -> None:
        self._replace_rows("bundles", 2, ((bid, _pack(rec)) for bid, rec in items))

    # ---- snapshots ----------------------------------------------------------

    def add_snapshot(self, snapshot_id: int, created: float, summary: dict,
                     compressed_manifest: bytes) -> None:
        """compressed_manifest: zlib of the manifest's JSON (see manifest.py)."""
        with self.db:
            self.db.execute("BEGIN")
            self._add_snapshot_row(snapshot_id, created, summary, compressed_manifest)

    def _add_snapshot_row(self, snapshot_id, created, summary, blob) -> None:
        self.db.execute("INSERT OR REPLACE INTO snapshots VALUES (?,?,?,?)",
                        (snapshot_id, created, json.dumps(summary), blob))

    def snapshots(self) -> list:
        return [{"id": r[0], "created": r[1], **json.loads(r[2])} for r in self.db.execute(
            "SELECT id, created, summary FROM snapshots ORDER BY id")]

    def manifest(self, snapshot_id: int):
        """A version-1 snapshot's manifest (None for a version-2 snapshot)."""
        row = self.db.execute("SELECT manifest FROM snapshots WHERE id=?",
                              (snapshot_id,)).fetchone()
        return json.loads(zlib.decompress(row[0])) if row and row[0] else None

    def get_meta(self, key: str, default=None):
        row = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return json.loads(row[0]) if row else default

    def set_meta(self, key: str, value) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta VALUES (?,?)", (key, json.dumps(value)))

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
