"""Each node's reputation as this home saw it, kept in reputation.sqlite.

One row per node: the decayed event counts of flud/trust/reputation.py as
of their last update, when this home first saw the node, and how many
verifies it ever passed. Only this home's own observations are written
here (its jobs' request outcomes, its checks' and verifies' answers);
nothing a peer reports. A versioned schema, migrated in place; a newer
file than this flud knows is refused rather than rewritten.
"""
import os
import sqlite3

from flud.errors import FludError
from flud.trust.reputation import KINDS, NodeStanding, new_standing

SCHEMA_VERSION = 1
FILE_NAME = "reputation.sqlite"
_MIGRATIONS = {
    1: ["CREATE TABLE nodes (node_id BLOB PRIMARY KEY, first_seen REAL NOT NULL, "
        "updated REAL NOT NULL, verifies_passed INTEGER NOT NULL, "
        + ", ".join(f"{kind} REAL NOT NULL" for kind in KINDS) + ")"],
}


class ReputationStoreError(FludError):
    code = "REPUTATION_STORE"


class ReputationStore:
    def __init__(self, home_path: str):
        self.path = os.path.join(home_path, FILE_NAME)
        self.db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("PRAGMA cache_size=-256")   # 256 KiB of pages: a job's memory bound
        self._migrate()
        self._cache = {}

    def _migrate(self) -> None:
        self.db.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER)")
        row = self.db.execute("SELECT version FROM schema_version").fetchone()
        current = row[0] if row else 0
        if current > SCHEMA_VERSION:
            raise ReputationStoreError(
                f"{self.path} has schema version {current}, newer than this flud "
                f"({SCHEMA_VERSION}); upgrade flud")
        for version in range(current + 1, SCHEMA_VERSION + 1):
            self.db.execute("BEGIN IMMEDIATE")
            for statement in _MIGRATIONS[version]:
                self.db.execute(statement)
            self.db.execute("DELETE FROM schema_version")
            self.db.execute("INSERT INTO schema_version VALUES (?)", (version,))
            self.db.execute("COMMIT")

    def standing(self, node_id: bytes, now: float) -> NodeStanding:
        """What this home knows of the node (a fresh standing if nothing)."""
        if node_id in self._cache:
            return self._cache[node_id]
        row = self.db.execute(f"SELECT first_seen, updated, verifies_passed, {', '.join(KINDS)} "
                              f"FROM nodes WHERE node_id = ?", (node_id,)).fetchone()
        if row is None:
            standing = new_standing(now)
        else:
            standing = NodeStanding(row[0], row[1], dict(zip(KINDS, row[3:])), row[2])
        self._cache[node_id] = standing
        return standing

    def known(self) -> list:
        return [row[0] for row in self.db.execute("SELECT node_id FROM nodes")]

    def record(self, node_id: bytes, kind: str, now: float, times: float = 1.0) -> NodeStanding:
        standing = self.standing(node_id, now).record(kind, now, times)
        self._cache[node_id] = standing
        self.db.execute(
            f"INSERT OR REPLACE INTO nodes (node_id, first_seen, updated, verifies_passed, "
            f"{', '.join(KINDS)}) VALUES (?, ?, ?, ?, {', '.join('?' * len(KINDS))})",
            (node_id, standing.first_seen, standing.updated, standing.verifies_passed,
             *(standing.counts[kind] for kind in KINDS)))
        return standing

    def close(self) -> None:
        self.db.close()
