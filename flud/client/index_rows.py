"""The rows every part of the client index writes and reads the same way:
records as compact JSON, INSERT OR REPLACE in a transaction of its own
(or the caller's), a backup's writes listed (run_rows.py), tables read
row by row. The parts (index_files.py, index_stored.py, ...) stand on
this one; each works on the index's connection (`self.db`).
"""
import json

from flud.client import run_rows


def _pack(record) -> bytes:
    return json.dumps(record, separators=(",", ":")).encode()


def _unpack(blob):
    return None if blob is None else json.loads(blob)


class IndexRows:
    """What every part of ClientIndex stands on: its connection (db) and
    whether a backup's writes are being listed (_run_open)."""

    db = None
    _run_open = False

    def _replace_rows(self, table: str, columns: int, rows, transaction: bool = True) -> None:
        """INSERT OR REPLACE rows into table, in a transaction of their own
        unless the caller is inside one (transaction=False)."""
        sql = f"INSERT OR REPLACE INTO {table} VALUES ({','.join('?' * columns)})"
        if self._run_open and table in run_rows.TRACKED:
            rows = [tuple(row) for row in rows]
        if not transaction:
            self._track(table, rows)
            self.db.executemany(sql, rows)
            return
        with self.db:
            self.db.execute("BEGIN")
            self._track(table, rows)
            self.db.executemany(sql, rows)

    def _track(self, table: str, rows) -> None:
        """While a backup is open, list the rows it writes (keys first in each
        row) with what they replace (run_rows.py), in the write's transaction."""
        if self._run_open and table in run_rows.TRACKED:
            run_rows.track(self.db, table, [row if isinstance(row, str) else row[0]
                                            for row in rows])

    def _rows(self, query: str):
        # A cursor of its own, read row by row: the table is never all in memory.
        # Records are bytes whatever type they were stored as.
        for key, record in self.db.execute(query):
            yield key, record.encode() if isinstance(record, str) else record
