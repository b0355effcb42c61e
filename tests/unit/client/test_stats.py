"""`flud stats` over trees (flud/client/repository/tree_stats.py): a directory shared by two
snapshots is read once and counted twice in the restore size; a content
stored twice is one unique content; the bytes per node come from the holder
map and the large files' streams."""
from types import SimpleNamespace

from twisted.internet import defer

from flud.client.repository.tree_records import DirEntry, LargeRef, SmallRef
from flud.client.repository.tree_stats import RepositoryStats

H = lambda c: c * 64   # noqa: E731 - a 64-hex id


def small(name, key, size, stored):
    return DirEntry(name, "f", 0o644, 0, size, SmallRef(H(key), "", H("b"), 0, stored))


class FakeReader:
    def __init__(self, dirs):
        self.dirs = dirs
        self.read = []

    def entries(self, blob_id):
        self.read.append(blob_id)
        return defer.succeed(list(self.dirs[blob_id]))


class FakeCache:
    def __init__(self, bundles):
        self.bundles = bundles

    def extent(self, extent_id):
        return None

    def bundle_ids(self):
        return list(self.bundles)

    def bundle(self, bundle_id):
        return self.bundles[bundle_id]


def test_shared_directories_are_read_once_and_contents_counted_once():
    large = {"v": 2, "t": "large",
             "c": {"t": "L", "size": 3000,
                   "ext": [{"shares": [[0, H("d"), H("1")], [1, H("e"), H("2")]],
                            "segs": [[H("f"), 3000, 1500, "ab" * 4]]}]}}
    import json

    repo = SimpleNamespace(
        open_blob=lambda blob_id: defer.succeed(json.dumps(large).encode()),
        cache=FakeCache({H("b"): SimpleNamespace(block_length=40, holders=[
            SimpleNamespace(node=H("1")), SimpleNamespace(node=H("3"))])}))
    shared = [small("a.txt", "a", 100, 60), small("copy.txt", "a", 100, 60)]
    reader = FakeReader({
        H("5"): shared,
        H("7"): [DirEntry("docs", "d", 0o755, 0, 0, H("5")),
                 DirEntry("big", "f", 0o644, 0, 3000, LargeRef(H("c")))],
        H("9"): [DirEntry("docs", "d", 0o755, 0, 0, H("5")),
                 DirEntry("link", "l", 0o777, 0, 0, "docs/a.txt")],
    })
    counted = RepositoryStats(repo, reader)
    for tree in (H("7"), H("9")):
        defer.ensureDeferred(counted.add_snapshot(SimpleNamespace(tree=tree)))
    assert reader.read.count(H("5")) == 1          # the shared directory: read once
    f = counted.summary(with_nodes=True)
    assert f["snapshots_count"] == 2
    assert f["total_file_count"] == 2 + 1 + 2 and f["total_size"] == 200 + 3000 + 200
    assert f["total_dir_count"] == 2 and f["total_symlink_count"] == 1
    assert f["unique_file_count"] == 2 and f["unique_size"] == 100 + 3000
    assert f["stored_size"] == 60 + 3000
    assert f["dedup_ratio"] == round(3400 / 3100, 4)
    nodes = {n["node"][:1]: (n["shares"], n["bytes"]) for n in f["nodes"]}
    assert nodes == {"1": (2, 1500 + 40), "2": (1, 1500), "3": (1, 40)}
    assert f["total_node_bytes"] == 3080
