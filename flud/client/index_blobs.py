"""Where this home's version-2 records' blobs are (the blobs table), and
the blobs of this run's map page (a temporary run_blobs table)."""
from flud.client.index_rows import IndexRows
from flud.client.records import BlobRef


class StoredBlobs(IndexRows):
    """The blobs table and a run's temporary run_blobs."""

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
