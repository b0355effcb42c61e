"""A run's files to send: a temporary table, so the run holds one
directory's listing at a time, never the tree's; and what landed.
"""
import os

from flud.client.index_rows import IndexRows


class PendingFiles(IndexRows):
    """The temporary pending table, and the file states a run's landed
    files leave in the files table."""

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
