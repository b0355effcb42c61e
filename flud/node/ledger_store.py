"""The node's give-to-get ledger on disk: links it learned and claims it
placed (docs/quotas.md). One sqlite file beside the store, `ledger.sqlite`,
with a schema version and numbered migrations; every change is one
transaction (sqlite's journal makes it crash-safe), so a node killed
mid-way keeps either the old row or the new.

What it does not keep: bytes held per owner (the store's index says that)
and anything a peer merely said. `given` is summed from claims whose last
spot check, done by this node, passed.
"""
import sqlite3
import threading
from dataclasses import dataclass

LEDGER_FILENAME = "ledger.sqlite"

MIGRATIONS = {
    1: (
        """CREATE TABLE links (
               owner BLOB NOT NULL, node BLOB NOT NULL, record BLOB NOT NULL,
               learned_at REAL NOT NULL, PRIMARY KEY (owner, node)) WITHOUT ROWID""",
        "CREATE INDEX links_by_node ON links(node)",
        # A claim this node placed on `holder` (a node linked to `owner`);
        # ok: its last spot check passed; failures: checks failed in a row.
        """CREATE TABLE claims (
               key BLOB PRIMARY KEY, claim_id BLOB NOT NULL, holder BLOB NOT NULL,
               owner BLOB NOT NULL, size INTEGER NOT NULL, placed_at REAL NOT NULL,
               checked_at REAL NOT NULL, ok INTEGER NOT NULL, failures INTEGER NOT NULL)
               WITHOUT ROWID""",
        "CREATE INDEX claims_by_owner ON claims(owner)",
        "CREATE INDEX claims_by_check ON claims(checked_at)",
    ),
}
SCHEMA_VERSION = max(MIGRATIONS)


@dataclass(frozen=True)
class Claim:
    key: bytes
    claim_id: bytes
    holder: bytes
    owner: bytes
    size: int
    placed_at: float
    checked_at: float
    ok: bool
    failures: int


class LedgerStore:
    def __init__(self, path: str, durable: bool = True):
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        self._db.execute(f"PRAGMA synchronous = {'FULL' if durable else 'OFF'}")
        self._migrate()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _migrate(self) -> None:
        with self._lock:
            self._db.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            row = self._db.execute("SELECT version FROM schema_version").fetchone()
            version = row[0] if row else 0
            if version > SCHEMA_VERSION:
                raise RuntimeError(f"ledger.sqlite has schema version {version}, newer than this "
                                   f"flud's {SCHEMA_VERSION}: run a newer flud")
            for number in range(version + 1, SCHEMA_VERSION + 1):
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    for statement in MIGRATIONS[number]:
                        self._db.execute(statement)
                    self._db.execute("DELETE FROM schema_version")
                    self._db.execute("INSERT INTO schema_version VALUES (?)", (number,))
                    self._db.execute("COMMIT")
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise

    def version(self) -> int:
        with self._lock:
            return self._db.execute("SELECT version FROM schema_version").fetchone()[0]

    # ---- links -------------------------------------------------------------

    def add_link(self, owner: bytes, node: bytes, record: bytes, now: float) -> bool:
        """Keep a checked link; True if it was new."""
        with self._lock:
            cur = self._db.execute("INSERT OR IGNORE INTO links VALUES (?, ?, ?, ?)",
                                   (owner, node, record, now))
            return cur.rowcount == 1

    def linked_nodes(self, owner: bytes) -> list[bytes]:
        with self._lock:
            return [r[0] for r in self._db.execute(
                "SELECT node FROM links WHERE owner = ? ORDER BY node", (owner,))]

    def linked_owners(self) -> list[bytes]:
        with self._lock:
            return [r[0] for r in self._db.execute("SELECT DISTINCT owner FROM links ORDER BY owner")]

    def link_count(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM links").fetchone()[0]

    # ---- claims ------------------------------------------------------------

    def add_claim(self, claim: Claim) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO claims VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                             (claim.key, claim.claim_id, claim.holder, claim.owner, claim.size,
                              claim.placed_at, claim.checked_at, int(claim.ok), claim.failures))

    def checked(self, key: bytes, ok: bool, now: float) -> None:
        with self._lock:
            if ok:
                self._db.execute("UPDATE claims SET ok = 1, failures = 0, checked_at = ? "
                                 "WHERE key = ?", (now, key))
            else:
                self._db.execute("UPDATE claims SET ok = 0, failures = failures + 1, "
                                 "checked_at = ? WHERE key = ?", (now, key))

    def drop_claim(self, key: bytes) -> None:
        with self._lock:
            self._db.execute("DELETE FROM claims WHERE key = ?", (key,))

    def claims_due(self, before: float, limit: int) -> list[Claim]:
        """Claims last checked before `before`, the oldest first."""
        with self._lock:
            rows = self._db.execute("SELECT * FROM claims WHERE checked_at < ? "
                                    "ORDER BY checked_at LIMIT ?", (before, limit)).fetchall()
        return [Claim(r[0], r[1], r[2], r[3], r[4], r[5], r[6], bool(r[7]), r[8]) for r in rows]

    def newest_claim(self, owner: bytes) -> Claim | None:
        with self._lock:
            r = self._db.execute("SELECT * FROM claims WHERE owner = ? ORDER BY placed_at DESC "
                                 "LIMIT 1", (owner,)).fetchone()
        return Claim(r[0], r[1], r[2], r[3], r[4], r[5], r[6], bool(r[7]), r[8]) if r else None

    def placed(self, owner: bytes) -> int:
        """Bytes of claims placed for `owner` and not dropped. A claim that
        failed its checks still counts here until it is dropped, so a holder
        that loses claims is not sent a new one every round."""
        with self._lock:
            return self._db.execute("SELECT COALESCE(SUM(size), 0) FROM claims "
                                    "WHERE owner = ?", (owner,)).fetchone()[0]

    def placed_on(self, holder: bytes) -> int:
        with self._lock:
            return self._db.execute("SELECT COALESCE(SUM(size), 0) FROM claims WHERE holder = ?",
                                    (holder,)).fetchone()[0]

    def given(self) -> dict[bytes, int]:
        """owner -> bytes of its linked nodes' claims whose last check passed."""
        with self._lock:
            return dict(self._db.execute(
                "SELECT owner, SUM(size) FROM claims WHERE ok = 1 GROUP BY owner").fetchall())

    def claim_totals(self) -> dict:
        with self._lock:
            count, size, ok = self._db.execute(
                "SELECT COUNT(*), COALESCE(SUM(size), 0), COALESCE(SUM(size * ok), 0) "
                "FROM claims").fetchone()
        return {"claims": count, "claim_bytes": size, "claim_bytes_verified": ok}
