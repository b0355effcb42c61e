"""The snapshots this home lists (the snapshots table) and the index's
meta values (the meta table: the head's copy, a run's state, rounds...).
"""
import json
import zlib

from flud.client.index_rows import IndexRows


class SnapshotRows(IndexRows):
    """The snapshots table."""

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

    def remove_snapshots(self, snapshot_ids) -> None:
        with self.db:
            self.db.execute("BEGIN")
            self.db.executemany("DELETE FROM snapshots WHERE id=?", ((i,) for i in snapshot_ids))


class MetaRows(IndexRows):
    """The meta table: JSON values by key."""

    def get_meta(self, key: str, default=None):
        row = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return json.loads(row[0]) if row else default

    def set_meta(self, key: str, value) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta VALUES (?,?)", (key, json.dumps(value)))
