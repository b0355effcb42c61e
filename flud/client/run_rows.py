"""What a backup wrote to the client index before its snapshot was published.

Nothing counts as stored, for dedup or for "unchanged", until the map that
names it is published (the root record points at it). A backup writes file
states, contents, records' blobs and extents as they land, long before
that; a run killed in between (SIGKILL, a power cut, a closed laptop) would
leave rows a later run trusts: it would skip those files as unchanged and
never map their bundles. So while a run is open every such write lists its
row here first, with the row it replaces (run_rows: table, key, old row),
in the same transaction as the write. The run's last step clears the list
together with recording its snapshot.

The next run (ClientIndex.recover_run) finds a list left over and either
adopts it, if the saved head names the killed run's snapshot (it was
published, only the bookkeeping after it was cut off), or rolls it back:
new rows deleted, replaced rows put back, so those files are read again
(content addressing makes sending them again cheap and idempotent). The
killed run's extents become orphans (segments rows keyed "O" + first
segment key): a later run that finds the same extent in a file adopts it
(maps it) instead of sending it again; prune sees them in
ClientIndex.extent_rows() and deletes what no map names. Its bundles keep
their rows in `bundles` (an inventory of what this home stored, published
or not: nothing reads it for dedup) and their contents are gone, so no
later record names them until prune deletes them.
"""
import json

# Tables a run's writes are listed for, by key column. Bundles and
# challenges are not: no later run trusts them without a content, a blob
# or an extent row that names them.
TRACKED = {"files": "path", "contents": "content_id", "blobs": "blob_id",
           "segments": "seg_key"}
EXTENT = "E"            # a published extent's row: "E" + its first segment's key
ORPHAN = "O"            # an extent no published map names (a killed run's)
RUN_META = "run_open"   # meta key: a run is open; later also what it publishes
REPO_META = "repo_v2"   # meta key: the index's copy of the repository head (repository/head.py)
PAGE = 1024             # run_rows read back this many at a time


def _pack(record) -> bytes:
    return json.dumps(record, separators=(",", ":")).encode()


def _decode(text: str) -> list:
    return [bytes.fromhex(v["x"]) if isinstance(v, dict) else v for v in json.loads(text)]


# Each tracked table's row as JSON, made by sqlite in the same executemany
# as the listing (BLOBs as {"x": hex}, which _decode turns back into bytes).
# Cost measured: about 30 us a file (its state and its content row listed),
# 3 s on top of 3 s for the index writes of a 100,000-file first backup.
_OLD_ROW = {
    "files": "json_array(path, size, mtime_ns, ctime_ns, inode, content_id, parent)",
    "contents": "json_array(content_id, json_object('x', hex(record)))",
    "blobs": "json_array(blob_id, bundle, offset, length)",
    "segments": "json_array(seg_key, json_object('x', hex(record)))",
}


def track(db, table: str, keys) -> None:
    """List `keys` of `table` as written by the open run, each with the row
    it had before (None: new). A key listed already keeps its first: the
    row as it was before the run. Call inside the write's transaction."""
    column = TRACKED[table]
    db.executemany(
        f"INSERT OR IGNORE INTO run_rows VALUES ('{table}', ?, "
        f"(SELECT {_OLD_ROW[table]} FROM {table} WHERE {column}=?))",
        ((key, key) for key in keys))


def leftover(db) -> bool:
    return db.execute("SELECT 1 FROM run_rows LIMIT 1").fetchone() is not None


def roll_back(db) -> int:
    """Undo every listed write (inside the caller's transaction): new rows
    deleted, replaced rows put back; a new extent row kept as an orphan.
    Returns how many rows were undone."""
    undone, after = 0, 0
    while True:
        rows = db.execute("SELECT rowid, tbl, key, old FROM run_rows WHERE rowid > ? "
                          "ORDER BY rowid LIMIT ?", (after, PAGE)).fetchall()
        if not rows:
            break
        after = rows[-1][0]
        for _, table, key, old in rows:
            _undo(db, table, key, old)
            undone += 1
    db.execute("DELETE FROM run_rows")
    return undone


def _undo(db, table, key, old) -> None:
    column = TRACKED[table]
    if table == "segments" and key.startswith(EXTENT):
        row = db.execute("SELECT record FROM segments WHERE seg_key=?", (key,)).fetchone()
        if row is not None and (old is None or _decode(old)[1] != row[0]):
            db.execute("INSERT OR REPLACE INTO segments VALUES (?,?)",
                       (ORPHAN + key[len(EXTENT):], row[0]))
    db.execute(f"DELETE FROM {table} WHERE {column}=?", (key,))
    if old is not None:
        values = _decode(old)
        db.execute(f"INSERT OR REPLACE INTO {table} VALUES ({','.join('?' * len(values))})",
                   values)


class OpenRun:
    """ClientIndex's part for a backup run (mixed in: it works on the
    index's connection and tables)."""

    def orphan_extent(self, first_key: str):
        """The record of an extent a killed run stored and no map names
        (see above), by its first segment's key; None if there is none."""
        return self.segment(ORPHAN + first_key)

    def adopt_extent(self, first_key: str, record) -> None:
        """An orphan extent this run reuses: it is this run's to map now
        (listed as the run's write: a rollback makes it an orphan again)."""
        with self.db:
            self.db.execute("BEGIN")
            self.db.execute("DELETE FROM segments WHERE seg_key=?", (ORPHAN + first_key,))
            self._replace_rows("segments", 2, [(EXTENT + first_key, _pack(record))],
                               transaction=False)

    def begin_run(self) -> None:
        """A backup starts: what a killed one left is settled first
        (recover_run), then this run's writes are listed."""
        self.recover_run()
        self.set_meta(RUN_META, {})
        self._run_open = True

    def publishing(self, snapshot_blob: str, snapshot_id: int, created: float,
                   summary: dict) -> None:
        """The run is about to write its root: what it will be, so a run
        killed after the head was saved is adopted, not rolled back."""
        self.set_meta(RUN_META, {"snapshot": snapshot_blob, "id": snapshot_id,
                                 "created": created, "summary": summary})

    def end_run(self, snapshot_id: int, created: float, summary: dict) -> None:
        """The snapshot is published and the head saved: its rows count from
        now on, in one step with its snapshot row and directory records."""
        with self.db:
            self.db.execute("BEGIN")
            self._add_snapshot_row(snapshot_id, created, summary, None)
            self._keep_built_dirs()
            self.db.execute("DELETE FROM run_rows")
            self.db.execute("DELETE FROM meta WHERE key=?", (RUN_META,))
        self._run_open = False

    def recover_run(self):
        """Settle what a killed backup left: None if nothing, "adopted" if
        the saved head names its snapshot, else "rolled back" (see above)."""
        state = self.get_meta(RUN_META)
        if state is None and not leftover(self.db):
            return None
        head = self.get_meta(REPO_META) or {}
        published = (state and state.get("snapshot") and head.get("snapshot")
                     and head["snapshot"][0] == state["snapshot"])
        with self.db:
            self.db.execute("BEGIN")
            if published:
                if not any(s["id"] == state["id"] for s in self.snapshots()):
                    self._add_snapshot_row(state["id"], state["created"],
                                           {**state["summary"], "record": state["snapshot"]},
                                           None)
                self.db.execute("DELETE FROM run_rows")
            else:
                roll_back(self.db)
            self.db.execute("DELETE FROM meta WHERE key=?", (RUN_META,))
        self._run_open = False
        return "adopted" if published else "rolled back"

