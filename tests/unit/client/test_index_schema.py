"""The client index's schema 3: files asked for one directory at a time, and
the blobs of version-2 records; an index of schema 2 is migrated in place."""
import sqlite3

import pytest

from flud.client import index as index_module
from flud.client.index import ClientIndex, FileState, IndexVersionError
from flud.client.repository.tree_records import BlobRef
from tests.unit.client.index_rows import file_states, record_files

H = "ab" * 32


def schema_2_index(path):
    """An index as the release before schema 3 left it, with two files."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("CREATE TABLE schema_version (version INTEGER)")
    for version in (1, 2):
        for statement in index_module._MIGRATIONS[version]:
            if not statement.startswith("_"):
                db.execute(statement)
    db.execute("INSERT INTO schema_version VALUES (2)")
    db.executemany("INSERT INTO files VALUES (?,?,?,?,?,?)",
                   [("/home/me/docs/a", 1, 2, 3, 4, "c1"), ("/home/me/docs/sub/b", 5, 6, 7, 8, "c2")])
    db.close()


def test_a_schema_2_index_is_migrated_and_keeps_its_files(tmp_path):
    path = str(tmp_path / "index.db")
    schema_2_index(path)
    index = ClientIndex(path)
    assert index.states_in("/home/me/docs") == {"/home/me/docs/a": FileState(1, 2, 3, 4, "c1")}
    assert list(index.states_in("/home/me/docs/sub")) == ["/home/me/docs/sub/b"]
    assert set(file_states(index)) == {"/home/me/docs/a", "/home/me/docs/sub/b"}
    assert index.db.execute("SELECT version FROM schema_version").fetchone()[0] == index_module.SCHEMA_VERSION


def test_files_are_asked_for_one_directory_at_a_time(tmp_path):
    index = ClientIndex(str(tmp_path / "index.db"))
    record_files(index, [("/t/a", 1, 1, 1, 1, "x"), ("/t/d/b", 2, 2, 2, 2, "y"),
                        ("/t/d/e/c", 3, 3, 3, 3, "z"), ("/t2/a", 4, 4, 4, 4, "w")])
    assert list(index.states_in("/t")) == ["/t/a"]
    assert list(index.states_in("/t/d")) == ["/t/d/b"]
    assert index.states_in("/nowhere") == {}
    record_files(index, [("/t/a", 9, 9, 9, 9, "x2")])
    assert index.states_in("/t")["/t/a"].content_id == "x2"


def test_blobs_are_known_and_located(tmp_path):
    index = ClientIndex(str(tmp_path / "index.db"))
    ref = BlobRef(H, "cd" * 32, 4096, 300)
    assert not index.known_blob(H) and index.blob(H) is None
    index.add_blobs([ref])
    assert index.known_blob(H) and index.blob(H) == ref


def test_an_index_newer_than_this_flud_is_refused(tmp_path):
    path = str(tmp_path / "index.db")
    ClientIndex(path).close()
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("UPDATE schema_version SET version=?", (index_module.SCHEMA_VERSION + 1,))
    db.close()
    with pytest.raises(IndexVersionError, match="upgrade flud"):
        ClientIndex(path)
