"""The client's local index (sqlite, versioned schema).

It answers "has this file changed since last time?" without reading it, and
"where is this content?" without the network. Everything here can also be
rebuilt from the manifest on the network (total-loss restore), so the index
is a cache of what the manifest says plus change-detection state.
"""
import os

from flud.client import run_rows, sqlite_file
from flud.client.index_blobs import StoredBlobs
from flud.client.index_challenges import ShareChallengeRows
from flud.client.index_dirs import DirRecords
from flud.client.index_files import FileState, FileStates  # noqa: F401 (FileState: re-exported)
from flud.client.index_rows import _pack, _unpack  # noqa: F401 (re-exported)
from flud.client.index_pending import PendingFiles
from flud.client.index_snapshots import MetaRows, SnapshotRows
from flud.client.index_stored import ContentLookup, StoredObjects  # noqa: F401
from flud.errors import FludError

SCHEMA_VERSION = 5

_MIGRATIONS = {
    1: [
        """CREATE TABLE files (
               path TEXT PRIMARY KEY, size INTEGER, mtime_ns INTEGER,
               ctime_ns INTEGER, inode INTEGER, content_id TEXT)""",
        """CREATE TABLE contents (content_id TEXT PRIMARY KEY, record BLOB)""",
        """CREATE TABLE bundles (bundle_id TEXT PRIMARY KEY, record BLOB)""",
        """CREATE TABLE snapshots (
               id INTEGER PRIMARY KEY, created REAL, summary TEXT, manifest BLOB)""",
        """CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)""",
        # Segments that landed, by convergent key: a re-run after an
        # interruption (or a duplicate file) does not send them again.
        """CREATE TABLE segments (seg_key TEXT PRIMARY KEY, record BLOB)""",
    ],
    # VERIFY challenges by share key (they were one JSON value in meta, read
    # and rewritten whole by every run: ~3 MB of objects per GiB backed up).
    2: [
        """CREATE TABLE challenges (share_key TEXT PRIMARY KEY, record BLOB)""",
        "_move_challenges_out_of_meta",
    ],
    # Version-2 snapshots (docs/snapshots.md): a backup asks for the files of
    # one directory at a time (memory follows the directory, not the tree),
    # and knows which records' blobs are stored already, and where.
    3: [
        "ALTER TABLE files ADD COLUMN parent TEXT",
        "_fill_file_parents",
        "CREATE INDEX files_by_parent ON files (parent)",
        """CREATE TABLE blobs (
               blob_id TEXT PRIMARY KEY, bundle TEXT, offset INTEGER, length INTEGER)""",
    ],
    # Each directory's last record: a directory whose listing (and every
    # listing below it) is as it was keeps its record without being read
    # again (a no-change backup lists the tree once and seals nothing).
    4: [
        """CREATE TABLE dirs (path TEXT PRIMARY KEY, local TEXT, subtree TEXT,
               blob_id TEXT, files INTEGER, bytes INTEGER)""",
    ],
    # Nothing counts as stored until the map that names it is published
    # (run_rows.py): the rows a backup writes before its root are listed
    # here, with what they replaced, and rolled back if it never published.
    # Extent rows an older flud left may be a killed run's, named by no
    # map: they become orphans ("O"), adopted (mapped) by the backup that
    # reuses them, deleted by prune if nothing does.
    5: [
        """CREATE TABLE run_rows (tbl TEXT, key TEXT, old TEXT, PRIMARY KEY (tbl, key))""",
        "UPDATE segments SET seg_key = 'O' || substr(seg_key, 2) WHERE seg_key LIKE 'E%'",
    ],
}


class IndexVersionError(FludError):
    """The client index was made by a newer flud."""

    code = "INDEX_VERSION"


class ClientIndex(FileStates, DirRecords, PendingFiles, StoredObjects, StoredBlobs,
                  ShareChallengeRows, SnapshotRows, MetaRows, run_rows.OpenRun):
    """The client's local index: one sqlite file, its schema migrated here,
    its tables read and written by the parts it is made of (one concern
    each, flud/client/index_*.py): file states, directory records, a
    run's pending files, the objects stored, their records' blobs, their
    shares' challenges, the snapshots listed, meta
    values, and a backup run's own rows (run_rows.py)."""

    def __init__(self, path: str):
        self.path = path
        self._run_open = False   # a backup's writes are listed (run_rows.py)
        self.db = sqlite_file.connect(path)
        sqlite_file.migrate(self.db, _MIGRATIONS, SCHEMA_VERSION, lambda found: IndexVersionError(
            f"the client index has schema version {found}, newer than this flud "
            f"({SCHEMA_VERSION}); upgrade flud"), lambda name: getattr(self, name)())

    def _fill_file_parents(self) -> None:
        paths = [row[0] for row in self.db.execute("SELECT path FROM files")]
        self.db.executemany("UPDATE files SET parent=? WHERE path=?",
                            ((os.path.dirname(path), path) for path in paths))

    def _move_challenges_out_of_meta(self) -> None:
        old = self.get_meta("challenges")
        if old:
            self.add_challenges(old.items(), transaction=False)
        self.db.execute("DELETE FROM meta WHERE key='challenges'")

    def close(self) -> None:
        self.db.close()
