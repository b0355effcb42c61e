"""Every error the client raises on purpose is a FludError with a stable
code of its own; its message is the one it was raised with."""
from flud.client.backup.file_reading import FileChanged
from flud.client.repository.extents import ExtentFailed
from flud.client.home import HomeError
from flud.client.index import IndexVersionError
from tests.unit.client.v1_writer import ManifestIncomplete
from flud.client.repository.root_store import ManifestMissing
from flud.client.network import NodeUnavailable, NotEnoughNodes
from flud.client.restore.destdir import UnsafePath
from flud.client.restore.restore_job import RestoreError
from flud.client.repository.segments import FetchFailed, StoreFailed
from flud.errors import FludError
from flud.protocol.errors import ConnectionLost

CODES = {
    FileChanged: "FILE_CHANGED", ExtentFailed: "EXTENT_FAILED", HomeError: "CLIENT_HOME",
    IndexVersionError: "INDEX_VERSION", ManifestIncomplete: "MANIFEST_INCOMPLETE",
    ManifestMissing: "MANIFEST_MISSING", NodeUnavailable: "NODE_UNAVAILABLE",
    NotEnoughNodes: "NOT_ENOUGH_NODES", UnsafePath: "UNSAFE_PATH",
    RestoreError: "RESTORE", FetchFailed: "FETCH_FAILED", StoreFailed: "STORE_FAILED",
}


def test_each_has_its_own_stable_code():
    for cls, code in CODES.items():
        assert issubclass(cls, FludError) and cls.code == code, cls
    assert len(set(CODES.values())) == len(CODES)


def test_the_message_is_what_it_was_raised_with():
    for cls in CODES:
        if cls is UnsafePath:
            err = cls("a/b", "a is a symlink")
            assert str(err) == "a/b: a is a symlink" and err.code == "UNSAFE_PATH"
            continue
        assert str(cls("only 3 of 8 shares")) == "only 3 of 8 shares"


def test_a_node_found_failed_is_still_a_lost_connection():
    assert issubclass(NodeUnavailable, ConnectionLost)
