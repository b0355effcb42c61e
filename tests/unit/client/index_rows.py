"""The client index's file rows read and written whole, for the tests alone
(a backup records and reads them directory by directory: client/index.py)."""
import os

from flud.client.index import FileState


def file_states(index) -> dict:
    """path -> FileState of every file the index knows."""
    make = FileState._make
    return {row[0]: make(row[1:]) for row in index.db.execute(
        "SELECT path, size, mtime_ns, ctime_ns, inode, content_id FROM files")}


def record_files(index, rows) -> None:
    """rows: (path, size, mtime_ns, ctime_ns, inode, content id)."""
    index._replace_rows("files", 7, ((*row, os.path.dirname(row[0])) for row in rows))
