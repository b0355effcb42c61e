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
        self.db.execute("INSERT OR REPLACE INTO built_dirs SELECT path, local, subtree, ?, ?, ? "
                        "FROM seen_dirs WHERE path=?", (blob_id, files, nbytes, path))

    def _keep_built_dirs(self) -> None:
        self.db.execute("CREATE TEMP TABLE IF NOT EXISTS built_dirs (path TEXT PRIMARY KEY, "
                        "local TEXT, subtree TEXT, blob_id TEXT, files INTEGER, bytes INTEGER)")
        self.db.execute("INSERT OR REPLACE INTO dirs SELECT * FROM built_dirs "
                        "WHERE local IS NOT NULL")
        self.db.execute("DELETE FROM built_dirs")
