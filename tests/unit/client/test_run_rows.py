"""The client index's open run (run_rows.py): a backup's writes count only
once its snapshot is published; a killed run's are rolled back (new rows
gone, replaced rows as they were, extents kept as orphans) or adopted when
the saved head names its snapshot."""
import sqlite3

from flud.client import index as index_module
from flud.client.repository.head import REPO_META
from flud.client.index import ClientIndex
from flud.client.repository.tree_records import BlobRef
from tests.unit.client.index_rows import file_states, record_files

A, B, C = "aa" * 32, "bb" * 32, "cc" * 32


def _published(index):
    """Rows a published snapshot left: a file, its content, a blob, an extent."""
    record_files(index, [("/t/a", 1, 1, 1, 1, A)])
    index.add_contents([(A, {"t": "s", "b": "x"})])
    index.add_blobs([BlobRef(A, "x", 0, 10)])
    index.add_segment("E" + A, {"shares": [[0, A, "n1"]], "segs": []})


def _killed_run(path):
    """A run that rewrote the published rows and added new ones, then died."""
    index = ClientIndex(path)
    index.begin_run()
    index.begin_pending()
    record_files(index, [("/t/a", 2, 2, 2, 2, B), ("/t/b", 3, 3, 3, 3, C)])
    index.add_contents([(B, {"t": "s", "b": "y"}), (A, {"t": "s", "b": "x2"})])
    index.add_blobs([BlobRef(B, "y", 0, 5), BlobRef(A, "x3", 0, 10)])
    index.add_segment("E" + B, {"shares": [[0, B, "n2"]], "segs": []})
    index.add_bundles([("y", {"shares": []})])
    index.close()   # no end_run: killed


def test_a_killed_run_is_rolled_back_and_what_was_published_stays(tmp_path):
    path = str(tmp_path / "index.db")
    index = ClientIndex(path)
    _published(index)
    index.close()
    _killed_run(path)
    index = ClientIndex(path)
    assert index.recover_run() == "rolled back"
    assert file_states(index) == {"/t/a": (1, 1, 1, 1, A)}
    assert index.content(A) == {"t": "s", "b": "x"} and index.content(B) is None
    assert index.blob(A) == BlobRef(A, "x", 0, 10) and index.blob(B) is None
    assert index.segment("E" + A) is not None and index.segment("E" + B) is None
    assert index.orphan_extent(B) == {"shares": [[0, B, "n2"]], "segs": []}
    assert {key for key, _ in index.extent_rows()} == {"E" + A, "O" + B}
    assert index.bundle("y") is not None    # an inventory row, for prune
    assert index.recover_run() is None      # settled once


def test_a_run_killed_after_its_head_was_saved_is_adopted(tmp_path):
    path = str(tmp_path / "index.db")
    _killed_run(path)
    index = ClientIndex(path)
    index._run_open = True
    index.publishing(C, 7, 123.0, {"files": 2})
    index.set_meta(REPO_META, {"generation": 3, "index": {}, "final": [],
                               "snapshot": [C, "z", 0, 1]})
    index.close()
    index = ClientIndex(path)
    assert index.recover_run() == "adopted"
    assert index.content(B) is not None and index.segment("E" + B) is not None
    assert [(s["id"], s["record"], s["files"]) for s in index.snapshots()] == [(7, C, 2)]


def test_an_ended_run_leaves_nothing_to_recover(tmp_path):
    index = ClientIndex(str(tmp_path / "index.db"))
    index.begin_run()
    index.begin_dirs()
    index.add_contents([(B, {"t": "s"})])
    index.end_run(1, 5.0, {"files": 1})
    assert index.recover_run() is None and index.content(B) is not None
    assert [s["id"] for s in index.snapshots()] == [1]


def test_schema_5_makes_every_older_extent_row_an_orphan(tmp_path):
    """An older flud's extent rows may be a killed run's that no map names:
    the next backup that reuses one maps it (adopts it)."""
    path = str(tmp_path / "index.db")
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("CREATE TABLE schema_version (version INTEGER)")
    for version in (1, 2, 3, 4):
        for statement in index_module._MIGRATIONS[version]:
            if not statement.startswith("_"):
                db.execute(statement)
    db.execute("INSERT INTO schema_version VALUES (4)")
    db.execute("INSERT INTO segments VALUES (?, ?)", ("E" + A, b'{"shares":[]}'))
    db.close()
    index = ClientIndex(path)
    assert index.segment("E" + A) is None and index.orphan_extent(A) == {"shares": []}
