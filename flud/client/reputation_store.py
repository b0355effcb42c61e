"""Each node's reputation as this home saw it, kept in reputation.sqlite.

One row per node: the decayed event counts of flud/trust/reputation.py as
of their last update, when this home first saw the node, and how many
verifies it ever passed. Only this home's own observations are written
here (its jobs' request outcomes, its checks' and verifies' answers);
nothing a peer reports. A versioned schema, migrated in place; a newer
file than this flud knows is refused rather than rewritten.
"""
import os

from flud.client import sqlite_file
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
        self.db = sqlite_file.connect(self.path)
        sqlite_file.migrate(self.db, _MIGRATIONS, SCHEMA_VERSION, lambda found: ReputationStoreError(
            f"{self.path} has schema version {found}, newer than this flud ({SCHEMA_VERSION}); "
            f"upgrade flud"))
        self._cache = {}

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
