"""A home's cache of sealed records: `ls`, `find`, `diff` and the first
levels of a restore read directories without the network.

A backup puts every directory record it seals here (the ones it stores and
the ones it finds stored already), and a reader puts every record it fetched;
a reader looks here before asking the holder map. A record is a sealed blob
addressed by a keyed hash of its sealed bytes (repository/blobs.py), so a
cached copy is checked exactly as a fetched one (the address, then the
seal): a damaged cache costs a fetch, never a wrong tree.

records.sqlite in the home, versioned (a version this flud does not know,
or a file it cannot read, is moved aside and started afresh: it is a
cache), bounded: at most MAX_BYTES of sealed records; past it, the oldest
put go first, down to 3/4 of it. Only records up to MAX_RECORD are kept
(a directory of thousands of entries is split into continuation records
far smaller). Every failure of the cache is swallowed: a job never fails
because its cache did.

Only readers use it (restore, ls, find, diff, dump, mount): check, verify,
prune and repair ask the nodes, since what they judge is what the nodes
hold.
"""
import logging
import os
import sqlite3

log = logging.getLogger("flud.client")

VERSION = 1
FILE_NAME = "records.sqlite"
MAX_BYTES = 64 * 1024 * 1024
MAX_RECORD = 1024 * 1024


class RecordCache:
    def __init__(self, home_path: str, max_bytes: int = MAX_BYTES):
        self.path = os.path.join(home_path, FILE_NAME)
        self.max_bytes = max_bytes
        self.hits = self.misses = 0
        self._db = None
        self._total = None
        try:
            self._db = self._open()
        except sqlite3.Error as err:
            log.warning("the record cache %s cannot be opened (%s); starting it afresh",
                        self.path, err)
            self._db = self._fresh()

    def _open(self):
        db = sqlite3.connect(self.path, timeout=0.5, isolation_level=None,
                             check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA cache_size=-256")   # 256 KiB of pages: a job's memory bound
        db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER)")
        row = db.execute("SELECT value FROM meta WHERE key='version'").fetchone()
        if row is None:
            db.execute("CREATE TABLE IF NOT EXISTS blobs (seq INTEGER PRIMARY KEY "
                       "AUTOINCREMENT, id TEXT UNIQUE, sealed BLOB)")
            db.execute("INSERT OR REPLACE INTO meta VALUES ('version', ?)", (VERSION,))
        elif row[0] != VERSION:
            db.close()
            raise sqlite3.DatabaseError(f"version {row[0]}, this flud knows {VERSION}")
        return db

    def _fresh(self):
        for suffix in ("", "-wal", "-shm"):
            try:
                os.replace(self.path + suffix, self.path + suffix + ".old")
            except OSError:
                pass
        try:
            return self._open()
        except sqlite3.Error:
            return None   # no cache this run

    def get(self, blob_id: str):
        """The sealed bytes cached for blob_id, or None (unchecked: the
        caller checks them as it would a fetched blob's)."""
        if self._db is None:
            return None
        try:
            row = self._db.execute("SELECT sealed FROM blobs WHERE id=?", (blob_id,)).fetchone()
        except sqlite3.Error:
            return None
        if row is None:
            self.misses += 1
            return None
        self.hits += 1
        return bytes(row[0])

    def put_many(self, items) -> None:
        """items: (blob id hex, sealed bytes); those already here are kept."""
        if self._db is None:
            return
        rows = [(blob_id, bytes(sealed)) for blob_id, sealed in items
                if len(sealed) <= MAX_RECORD]
        if not rows:
            return
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                before = self._db.total_changes
                self._db.executemany("INSERT OR IGNORE INTO blobs (id, sealed) VALUES (?,?)",
                                     rows)
                added = self._db.total_changes - before
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            if added:
                self._total = None if self._total is None else (
                    self._total + sum(len(s) for _, s in rows))
                self._bound()
        except sqlite3.Error as err:
            log.debug("record cache: %s", err)

    def put(self, blob_id: str, sealed) -> None:
        self.put_many([(blob_id, sealed)])

    def _bound(self) -> None:
        """The running total over-counts (rows already here): past the
        bound, it is counted again before anything goes."""
        if self._total is not None and self._total <= self.max_bytes:
            return
        self._total = self._db.execute(
            "SELECT COALESCE(SUM(LENGTH(sealed)), 0) FROM blobs").fetchone()[0]
        if self._total <= self.max_bytes:
            return
        goal = self.max_bytes * 3 // 4
        freed, cut = 0, None
        for seq, length in self._db.execute("SELECT seq, LENGTH(sealed) FROM blobs "
                                            "ORDER BY seq"):
            freed += length
            cut = seq
            if self._total - freed <= goal:
                break
        if cut is not None:
            self._db.execute("DELETE FROM blobs WHERE seq <= ?", (cut,))
        self._total = None

    def close(self) -> None:
        if self._db is not None:
            try:
                self._db.close()
            except sqlite3.Error:
                pass
            self._db = None
