"""Change detection: what the index knows of each file as it was last
backed up (FileState), by directory, and the data ranges a file with
holes was read with.
"""
import json
from typing import NamedTuple

from flud.client.index_rows import IndexRows


class FileState(NamedTuple):
    """What the index knows of a file as it was last backed up."""
    size: int
    mtime_ns: int
    ctime_ns: int
    inode: int
    content_id: str

    def unchanged(self, entry) -> bool:
        """The scanned `entry` looks as it did (size, mtime, ctime, inode)."""
        return (self.size == entry.size and self.mtime_ns == entry.mtime_ns
                and self.ctime_ns == entry.ctime_ns and self.inode == entry.inode)


class FileStates(IndexRows):
    """The files table (and file_holes) of the client index."""

    def states_in(self, directory: str) -> dict:
        """path -> FileState of the files directly in one directory."""
        make = FileState._make
        return {row[0]: make(row[1:]) for row in self.db.execute(
            "SELECT path, size, mtime_ns, ctime_ns, inode, content_id FROM files "
            "WHERE parent=?", (directory,))}

    def states_with_contents(self, directory: str) -> tuple:
        """(states_in(directory), {content id: its record}) in one query: a
        backup's tree writer asks for one directory's files and then each
        one's content (one query a file was ~40 us a file, and a first
        backup's largest index cost after the writes)."""
        make = FileState._make
        states, contents = {}, {}
        for row in self.db.execute(
                "SELECT f.path, f.size, f.mtime_ns, f.ctime_ns, f.inode, f.content_id, c.record "
                "FROM files f LEFT JOIN contents c ON c.content_id = f.content_id "
                "WHERE f.parent=?", (directory,)):
            states[row[0]] = make(row[1:6])
            if row[6] is not None:
                contents[row[5]] = row[6]
        return states, contents

    def has_file(self, path: str) -> bool:
        """Whether a backup recorded this path before (whatever it held)."""
        return self.db.execute("SELECT 1 FROM files WHERE path=?", (path,)).fetchone() is not None

    def states_known(self, directory: str) -> dict:
        """path -> FileState of the files directly in one directory whose
        content the index knows (a state without its content is sent again)."""
        make = FileState._make
        return {row[0]: make(row[1:]) for row in self.db.execute(
            "SELECT f.path, f.size, f.mtime_ns, f.ctime_ns, f.inode, f.content_id FROM files f "
            "JOIN contents c ON c.content_id = f.content_id WHERE f.parent=?", (directory,))}

    # ---- files with holes: the data ranges each was read with -------------
    # A cache beside the schema (made where missing, ignored by a flud
    # without it): the tree writer finds the ranges here, by the content
    # they were read into, or else asks the file again (backup/tree_writer.py).

    def _holes_table(self) -> None:
        self.db.execute("CREATE TABLE IF NOT EXISTS file_holes (path TEXT PRIMARY KEY, "
                        "size INTEGER, mtime_ns INTEGER, content_id TEXT, ranges TEXT)")

    def record_holes(self, rows) -> None:
        """rows: (path, whole size, mtime_ns, content id, ((offset, length), ...))."""
        self._holes_table()
        with self.db:
            self.db.execute("BEGIN")
            self.db.executemany("INSERT OR REPLACE INTO file_holes VALUES (?, ?, ?, ?, ?)",
                                ((p, size, mtime, cid, json.dumps(ranges))
                                 for p, size, mtime, cid, ranges in rows))

    def holes_of(self, path: str):
        """(size, mtime_ns, content id, ranges) a file was last read with, or None."""
        self._holes_table()
        row = self.db.execute("SELECT size, mtime_ns, content_id, ranges FROM file_holes "
                              "WHERE path=?", (path,)).fetchone()
        if row is None:
            return None
        return (*row[:3], tuple(tuple(r) for r in json.loads(row[3])))
