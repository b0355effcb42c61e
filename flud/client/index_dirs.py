"""Directories: what a backup's first walk saw (seen_dirs), the records
this run made (built_dirs), and each directory's last record (dirs), so a
directory whose listing is as it was keeps its record unread.
"""
from flud.client.index_rows import IndexRows


class DirRecords(IndexRows):
    """The dirs table and a run's temporary seen_dirs and built_dirs
    (reusable_dir asks the stored blobs too: known_blob)."""

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
