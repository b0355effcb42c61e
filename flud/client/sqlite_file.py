"""Opening one of the home's versioned sqlite files (the client index,
reputation.sqlite): WAL, synchronous=NORMAL, a 256 KiB page cache, and a
schema_version table that numbered migrations bring up to date in place,
one transaction each. A file newer than this flud knows is refused, never
rewritten."""
import sqlite3


def connect(path: str):
    """The connection, with the pragmas (autocommit: callers open their own
    transactions)."""
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    # 256 KiB of page cache, not sqlite's 2 MB: a backup writes rows a run
    # at a time and reads tables in one pass, where the OS cache serves as
    # well (a 1 GiB backup's peak RSS -1.2 MB; 50000-row scans and inserts
    # took the same time).
    db.execute("PRAGMA cache_size=-256")
    return db


def migrate(db, migrations: dict, version: int, too_new, step=None) -> None:
    """migrations: {n: [statement, ...]} bringing version n-1 to n.
    too_new(found): the error raised for a file at a newer version.
    step(name): runs a statement that names a Python step ("_name")."""
    db.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER)")
    row = db.execute("SELECT version FROM schema_version").fetchone()
    current = row[0] if row else 0
    if current > version:
        raise too_new(current)
    for number in range(current + 1, version + 1):
        with db:
            db.execute("BEGIN IMMEDIATE")
            for statement in migrations[number]:
                if statement.startswith("_"):
                    step(statement)
                else:
                    db.execute(statement)
            db.execute("DELETE FROM schema_version")
            db.execute("INSERT INTO schema_version VALUES (?)", (number,))
