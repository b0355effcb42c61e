"""The sqlite index: who owns which key, and where its bytes are.

One `holdings` row per (key, owner). archive_id NULL means the bytes are the
standalone share file shares/../<key> (one file per key, shared by all its
owners, its length in `shares`); otherwise they are a member of that owner's
archive at data_offset. An owner holds a key in at most one place. No hash
column: a key *is* the BLAKE3 of its bytes.

Not thread-safe by itself: the store serialises every call with its lock.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from flud.storage.errors import FormatError, NoSpace

# Numbered migrations; a store's schema_version says how many have run.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        "CREATE TABLE shares (key BLOB PRIMARY KEY, length INTEGER NOT NULL) WITHOUT ROWID",
        """CREATE TABLE archives (
               id INTEGER PRIMARY KEY,
               owner BLOB NOT NULL UNIQUE,
               committed_length INTEGER NOT NULL,
               garbage_bytes INTEGER NOT NULL)""",
        """CREATE TABLE holdings (
               key BLOB NOT NULL,
               owner BLOB NOT NULL,
               archive_id INTEGER REFERENCES archives(id),
               data_offset INTEGER,
               length INTEGER NOT NULL,
               PRIMARY KEY (key, owner)) WITHOUT ROWID""",
        "CREATE INDEX holdings_by_owner ON holdings(owner, key)",
        "CREATE INDEX members_by_archive ON holdings(archive_id, data_offset) WHERE archive_id IS NOT NULL",
        # A compaction whose new offsets are committed; its file rename may still be pending.
        "CREATE TABLE compactions (archive_id INTEGER PRIMARY KEY REFERENCES archives(id))",
        # Share files whose last owner left; unlinked right after commit, re-tried at open.
        "CREATE TABLE pending_unlinks (key BLOB PRIMARY KEY) WITHOUT ROWID",
    ),
    2: (
        # One lease per owner (storage/leases.py). last_seen NULL: not known yet,
        # the next sweep sets it to its own time; trashed_at: in the trash since.
        """CREATE TABLE leases (
               owner BLOB PRIMARY KEY,
               last_seen REAL,
               trashed_at REAL) WITHOUT ROWID""",
        "INSERT OR IGNORE INTO leases SELECT DISTINCT owner, NULL, NULL FROM holdings",
        # When the node last swept: the time it was not running is not held against a lease.
        "CREATE TABLE lease_clock (last_sweep REAL NOT NULL)",
    ),
}
SCHEMA_VERSION = max(MIGRATIONS)
_SQLITE_FULL = getattr(sqlite3, "SQLITE_FULL", 13)


@dataclass(frozen=True)
class Holding:
    archive_id: int | None  # None: a standalone share file
    data_offset: int | None
    length: int


@dataclass(frozen=True)
class ArchiveRow:
    id: int
    owner: bytes
    committed_length: int
    garbage_bytes: int


@dataclass(frozen=True)
class LiveMember:
    key: bytes
    data_offset: int
    length: int


class Index:
    def __init__(self, path: str, durable: bool) -> None:
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        # FULL: a commit the node acknowledged must survive power loss, and a
        # compaction renames files only after its new offsets are durable.
        self._db.execute(f"PRAGMA synchronous={'FULL' if durable else 'OFF'}")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._migrate()

    def close(self) -> None:
        self._db.close()

    def _migrate(self) -> None:
        with self.transaction():
            self._db.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            row = self._db.execute("SELECT version FROM schema_version").fetchone()
            if row is None:
                self._db.execute("INSERT INTO schema_version VALUES (0)")
        version = row[0] if row else 0
        if version > SCHEMA_VERSION:
            raise FormatError(
                f"the index has schema version {version}, newer than this flud knows ({SCHEMA_VERSION}); upgrade flud"
            )
        for step in range(version + 1, SCHEMA_VERSION + 1):
            with self.transaction():
                for statement in MIGRATIONS[step]:
                    self._db.execute(statement)
                self._db.execute("UPDATE schema_version SET version = ?", (step,))

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """All or nothing; a full disk becomes NoSpace."""
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            if getattr(exc, "sqlite_errorcode", None) == _SQLITE_FULL:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise NoSpace("the disk is full: the index cannot record the change") from exc
            raise

    # --- reads -------------------------------------------------------------

    def holding(self, key: bytes, owner: bytes) -> Holding | None:
        row = self._db.execute(
            "SELECT archive_id, data_offset, length FROM holdings WHERE key = ? AND owner = ?", (key, owner)
        ).fetchone()
        return Holding(*row) if row else None

    def owners(self, key: bytes) -> set[bytes]:
        return {row[0] for row in self._db.execute("SELECT owner FROM holdings WHERE key = ?", (key,))}

    def keys(self, owner: bytes) -> list[bytes]:
        return [row[0] for row in self._db.execute("SELECT key FROM holdings WHERE owner = ? ORDER BY key", (owner,))]

    def owner_bytes(self, owner: bytes) -> int:
        """Bytes of data held for owner (shares and archive members)."""
        return self._db.execute("SELECT COALESCE(SUM(length), 0) FROM holdings WHERE owner = ?",
                                (owner,)).fetchone()[0]

    def share_length(self, key: bytes) -> int | None:
        row = self._db.execute("SELECT length FROM shares WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def share_has_owner(self, key: bytes) -> bool:
        query = "SELECT 1 FROM holdings WHERE key = ? AND archive_id IS NULL LIMIT 1"
        return self._db.execute(query, (key,)).fetchone() is not None

    def archive(self, owner: bytes) -> ArchiveRow | None:
        row = self._db.execute(
            "SELECT id, owner, committed_length, garbage_bytes FROM archives WHERE owner = ?", (owner,)
        ).fetchone()
        return ArchiveRow(*row) if row else None

    def all_archives(self) -> list[ArchiveRow]:
        rows = self._db.execute("SELECT id, owner, committed_length, garbage_bytes FROM archives")
        return [ArchiveRow(*row) for row in rows]

    def live_members(self, archive_id: int) -> list[LiveMember]:
        rows = self._db.execute(
            "SELECT key, data_offset, length FROM holdings WHERE archive_id = ? ORDER BY data_offset", (archive_id,)
        )
        return [LiveMember(*row) for row in rows]

    def used_bytes(self) -> int:
        shares = self._db.execute("SELECT COALESCE(SUM(length), 0) FROM shares").fetchone()[0]
        archives = self._db.execute("SELECT COALESCE(SUM(committed_length), 0) FROM archives").fetchone()[0]
        return shares + archives

    def counts(self) -> dict[str, int]:
        one = lambda sql: self._db.execute(sql).fetchone()[0]  # noqa: E731
        return {
            "shares": one("SELECT COUNT(*) FROM shares"),
            "members": one("SELECT COUNT(*) FROM holdings WHERE archive_id IS NOT NULL"),
            "archives": one("SELECT COUNT(*) FROM archives"),
            "garbage_bytes": one("SELECT COALESCE(SUM(garbage_bytes), 0) FROM archives"),
        }

    # --- leases (storage/leases.py says what they are for) --------------------

    def trashed_owners(self) -> set[bytes]:
        return {row[0] for row in self._db.execute("SELECT owner FROM leases WHERE trashed_at IS NOT NULL")}

    def lease(self, owner: bytes) -> tuple[float | None, float | None] | None:
        """(last_seen, trashed_at) of owner's lease, None if it has none."""
        row = self._db.execute("SELECT last_seen, trashed_at FROM leases WHERE owner = ?", (owner,)).fetchone()
        return (row[0], row[1]) if row else None

    def owners_seen_before(self, cutoff: float) -> list[bytes]:
        """Owners not trashed whose lease was last renewed before cutoff."""
        query = "SELECT owner FROM leases WHERE trashed_at IS NULL AND last_seen < ?"
        return [row[0] for row in self._db.execute(query, (cutoff,))]

    def owners_trashed_before(self, cutoff: float) -> list[bytes]:
        return [row[0] for row in self._db.execute("SELECT owner FROM leases WHERE trashed_at < ?", (cutoff,))]

    def last_sweep(self) -> float | None:
        row = self._db.execute("SELECT last_sweep FROM lease_clock").fetchone()
        return row[0] if row else None

    def trash_counts(self) -> dict[str, int]:
        owners, held = self._db.execute(
            "SELECT COUNT(DISTINCT l.owner), COALESCE(SUM(h.length), 0) FROM leases l "
            "JOIN holdings h ON h.owner = l.owner WHERE l.trashed_at IS NOT NULL").fetchone()
        leases = self._db.execute("SELECT COUNT(*) FROM leases").fetchone()[0]
        return {"leases": leases, "trashed_owners": owners, "trashed_bytes": held}

    def standalone_keys(self, owner: bytes, limit: int) -> list[tuple[bytes, int]]:
        query = "SELECT key, length FROM holdings WHERE owner = ? AND archive_id IS NULL LIMIT ?"
        return list(self._db.execute(query, (owner, limit)))

    def some_members(self, archive_id: int, limit: int) -> list[tuple[bytes, int]]:
        """(key, length) of up to `limit` members of an archive."""
        query = "SELECT key, length FROM holdings WHERE archive_id = ? LIMIT ?"
        return list(self._db.execute(query, (archive_id, limit)))

    def pending_compactions(self) -> list[int]:
        return [row[0] for row in self._db.execute("SELECT archive_id FROM compactions")]

    def pending_unlinks(self) -> list[bytes]:
        return [row[0] for row in self._db.execute("SELECT key FROM pending_unlinks")]

    # --- writes: call inside transaction() ---------------------------------

    def add_share(self, key: bytes, length: int) -> None:
        self._db.execute("INSERT INTO shares VALUES (?, ?)", (key, length))
        self._db.execute("DELETE FROM pending_unlinks WHERE key = ?", (key,))

    def add_share_owner(self, key: bytes, owner: bytes, length: int) -> None:
        self._db.execute("INSERT INTO holdings VALUES (?, ?, NULL, NULL, ?)", (key, owner, length))

    def remove_holding(self, key: bytes, owner: bytes) -> None:
        self._db.execute("DELETE FROM holdings WHERE key = ? AND owner = ?", (key, owner))

    def remove_share(self, key: bytes) -> None:
        """Forget the share and remember to unlink its file (done right after commit)."""
        self._db.execute("DELETE FROM shares WHERE key = ?", (key,))
        self._db.execute("INSERT OR IGNORE INTO pending_unlinks VALUES (?)", (key,))

    def forget_unlinks(self, keys: Iterable[bytes]) -> None:
        self._db.executemany("DELETE FROM pending_unlinks WHERE key = ?", ((k,) for k in keys))

    def create_archive(self, owner: bytes) -> int:
        return self._db.execute("INSERT INTO archives VALUES (NULL, ?, 0, 0)", (owner,)).lastrowid

    def add_members(self, archive_id: int, owner: bytes, members: Iterable[tuple[bytes, int, int]]) -> None:
        """members: (key, data_offset in the archive file, length)."""
        self._db.executemany(
            "INSERT INTO holdings VALUES (?, ?, ?, ?, ?)",
            ((key, owner, archive_id, offset, length) for key, offset, length in members),
        )

    def set_archive_lengths(self, archive_id: int, committed_length: int, garbage_bytes: int) -> None:
        self._db.execute(
            "UPDATE archives SET committed_length = ?, garbage_bytes = ? WHERE id = ?",
            (committed_length, garbage_bytes, archive_id),
        )

    def set_committed_length(self, archive_id: int, committed_length: int) -> None:
        self._db.execute("UPDATE archives SET committed_length = ? WHERE id = ?", (committed_length, archive_id))

    def add_garbage(self, archive_id: int, garbage: int) -> ArchiveRow:
        self._db.execute("UPDATE archives SET garbage_bytes = garbage_bytes + ? WHERE id = ?", (garbage, archive_id))
        row = self._db.execute(
            "SELECT id, owner, committed_length, garbage_bytes FROM archives WHERE id = ?", (archive_id,)
        ).fetchone()
        return ArchiveRow(*row)

    def move_member(self, archive_id: int, key: bytes, old_offset: int, new_offset: int) -> bool:
        """False if the member was deleted meanwhile (no row at its old offset)."""
        cursor = self._db.execute(
            "UPDATE holdings SET data_offset = ? WHERE archive_id = ? AND key = ? AND data_offset = ?",
            (new_offset, archive_id, key, old_offset),
        )
        return cursor.rowcount == 1

    def renew_lease(self, owner: bytes, now: float) -> None:
        """The owner was seen at `now`: its lease starts again, out of the trash.
        A party that holds nothing has no row and gets none (its first upload
        makes one: ensure_lease)."""
        self._db.execute("UPDATE leases SET last_seen = ?, trashed_at = NULL WHERE owner = ?", (now, owner))

    def ensure_lease(self, owner: bytes) -> None:
        """An owner that stores something has a lease row (its time set by the next sweep)."""
        self._db.execute("INSERT OR IGNORE INTO leases VALUES (?, NULL, NULL)", (owner,))

    def date_unknown_leases(self, now: float) -> None:
        self._db.execute("UPDATE leases SET last_seen = ? WHERE last_seen IS NULL", (now,))

    def credit_leases(self, seconds: float) -> None:
        """Push every lease's clock forward: time the node did not run is not held against it."""
        self._db.execute("UPDATE leases SET last_seen = last_seen + ?, trashed_at = trashed_at + ?", (seconds, seconds))

    def trash(self, owner: bytes, now: float) -> None:
        self._db.execute("UPDATE leases SET trashed_at = ? WHERE owner = ?", (now, owner))

    def remove_lease(self, owner: bytes) -> None:
        self._db.execute("DELETE FROM leases WHERE owner = ?", (owner,))

    def set_last_sweep(self, now: float) -> None:
        self._db.execute("DELETE FROM lease_clock")
        self._db.execute("INSERT INTO lease_clock VALUES (?)", (now,))

    def remove_members(self, archive_id: int, owner: bytes, members: Iterable[tuple[bytes, int]]) -> None:
        self._db.executemany("DELETE FROM holdings WHERE key = ? AND owner = ? AND archive_id = ?",
                             ((key, owner, archive_id) for key, _ in members))

    def remove_archive(self, archive_id: int) -> None:
        self._db.execute("DELETE FROM compactions WHERE archive_id = ?", (archive_id,))
        self._db.execute("DELETE FROM archives WHERE id = ?", (archive_id,))

    def record_compaction(self, archive_id: int) -> None:
        self._db.execute("INSERT OR REPLACE INTO compactions VALUES (?)", (archive_id,))

    def clear_compaction(self, archive_id: int) -> None:
        self._db.execute("DELETE FROM compactions WHERE archive_id = ?", (archive_id,))
