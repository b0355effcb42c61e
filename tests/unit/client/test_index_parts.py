"""The client index is made of parts, one concern each, over its one
sqlite file (issue 26: ClientIndex had 47 methods in one class): the
class itself keeps only the file's lifecycle and schema, and no part
grows into a second ClientIndex."""
import inspect

from flud.client.index import ClientIndex
from flud.client.index_blobs import StoredBlobs
from flud.client.index_challenges import ShareChallengeRows
from flud.client.index_dirs import DirRecords
from flud.client.index_files import FileStates
from flud.client.index_pending import PendingFiles
from flud.client.index_rows import IndexRows
from flud.client.index_snapshots import MetaRows, SnapshotRows
from flud.client.index_stored import StoredObjects
from flud.client.run_rows import OpenRun

PARTS = (FileStates, DirRecords, PendingFiles, StoredObjects, StoredBlobs, ShareChallengeRows,
         SnapshotRows, MetaRows, OpenRun)


def _own_methods(cls) -> set:
    return {name for name, value in vars(cls).items()
            if inspect.isfunction(value) or isinstance(value, staticmethod)}


def test_the_index_class_keeps_only_its_file_and_schema():
    assert _own_methods(ClientIndex) == {"__init__", "_fill_file_parents",
                                         "_move_challenges_out_of_meta", "close"}
    assert all(issubclass(ClientIndex, part) for part in PARTS)


def test_each_part_is_narrow_and_no_two_parts_share_a_method():
    seen = {}
    for part in PARTS:
        methods = _own_methods(part)
        assert len(methods) <= 16, f"{part.__name__}: {len(methods)} methods"
        for name in methods:
            assert name not in seen, f"{name} in {seen.get(name)} and {part.__name__}"
            seen[name] = part.__name__
    assert _own_methods(IndexRows) == {"_replace_rows", "_track", "_rows"}


def test_the_parts_work_on_one_file(tmp_path):
    """What one part writes another reads: they share the connection."""
    from flud.client.records import BlobRef

    index = ClientIndex(str(tmp_path / "index.sqlite"))
    try:
        index.add_blobs([BlobRef("ab" * 32, "cd" * 32, 0, 10)])
        index.begin_dirs()
        index.set_meta("k", {"v": 1})
        assert index.known_blob("ab" * 32) and index.get_meta("k") == {"v": 1}
        assert index.reusable_dir("/nowhere") is None
    finally:
        index.close()
