"""Building a version-2 tree as the walk hands over directories: the records
read back as the tree on disk, and an unchanged directory is not stored again."""
import hashlib
import os

from twisted.internet import defer

from flud.client.backup.tree_builder import TreeBuilder
from flud.client.repository.blobs import BlobSealer
from flud.client.backup.source_scan import scan
from flud.client.repository.tree_records import SmallRef
from flud.client.repository.tree_walk import TreeReader
from flud.client.backup.source_walk import walk
from flud.crypto import new_user_secret


def make_tree(root):
    for d in ("docs/old", "src/pkg", "empty"):
        os.makedirs(root / d)
    for f, data in (("docs/a.txt", b"alpha"), ("docs/old/b.txt", b"beta"),
                    ("src/pkg/c.py", b"print(1)\n"), ("src/z.bin", b""), ("top", b"t")):
        (root / f).write_bytes(data)
    os.symlink("docs/a.txt", root / "link")


def file_ref(entry):
    if entry.size == 0:
        return None
    with open(entry.path, "rb") as f:
        return SmallRef(hashlib.sha256(f.read()).hexdigest(), "", "ab" * 32, 0, 1)


class Store:
    def __init__(self):
        self.sealer = BlobSealer(new_user_secret())
        self.blobs = {}
        self.new = []

    def put(self, blob_id, sealed):
        self.blobs[blob_id] = sealed
        self.new.append(blob_id)

    def backup(self, root, refs=file_ref):
        self.new = []
        builder = TreeBuilder(self.sealer, self.blobs.__contains__, self.put)
        for listing in walk(str(root)):
            top = builder.directory(listing, refs)
        return top, builder

    def read(self, root_id):
        found = {}
        reader = TreeReader(lambda blob_id: defer.succeed(self.blobs[blob_id]), self.sealer)
        d = reader.walk(root_id, lambda path, entry: found.__setitem__(path, entry),
                        lambda damaged: found.__setitem__("DAMAGED", damaged))
        assert d.called
        return found


def test_the_records_read_back_as_the_tree_on_disk(tmp_path):
    make_tree(tmp_path)
    store = Store()
    top, builder = store.backup(tmp_path)
    found = store.read(top)
    assert sorted(found) == ["docs", "docs/a.txt", "docs/old", "docs/old/b.txt", "empty",
                             "link", "src", "src/pkg", "src/pkg/c.py", "src/z.bin", "top"]
    assert found["link"].ref == "docs/a.txt" and found["src/z.bin"].ref is None
    assert found["docs/a.txt"].ref == SmallRef(hashlib.sha256(b"alpha").hexdigest(), "", "ab" * 32, 0, 1)
    assert found["docs/old/b.txt"].mode == os.stat(tmp_path / "docs/old/b.txt").st_mode & 0o7777
    assert builder.records == builder.stored == 6


def test_an_unchanged_tree_stores_nothing_and_a_change_stores_its_path(tmp_path):
    make_tree(tmp_path)
    store = Store()
    first, _ = store.backup(tmp_path)
    again, builder = store.backup(tmp_path)
    assert again == first and store.new == [] and builder.records == 6
    os.utime(tmp_path / "docs/old", ns=(1, 1))
    (tmp_path / "docs/old/b.txt").write_bytes(b"beta, changed")
    changed, builder = store.backup(tmp_path)
    # docs/old, docs and the top are new records; src, src/pkg and empty are not.
    assert changed != first and builder.stored == 3
    assert store.read(changed)["src/pkg/c.py"] == store.read(first)["src/pkg/c.py"]


def test_a_file_that_could_not_be_read_is_left_out(tmp_path):
    make_tree(tmp_path)
    store = Store()

    def refs(entry):
        if entry.path.endswith("c.py"):
            raise KeyError(entry.path)
        return file_ref(entry)

    top, _ = store.backup(tmp_path, refs)
    found = store.read(top)
    assert "src/pkg" in found and "src/pkg/c.py" not in found


def test_the_snapshot_root_names_each_backed_up_path(tmp_path):
    for name in ("one", "two"):
        os.makedirs(tmp_path / name / "inner")
        (tmp_path / name / "inner" / "f").write_bytes(name.encode())
    (tmp_path / "single").write_bytes(b"a file given as a path")
    store = Store()
    builder = TreeBuilder(store.sealer, store.blobs.__contains__, store.put)
    tops = []
    for name in ("one", "two"):
        listings = list(walk(str(tmp_path / name)))
        for listing in listings:
            builder.directory(listing, file_ref)
        tops.append((name, listings[-1].entry, None))
    single = scan([str(tmp_path / "single")]).entries[0]
    tops.append(("single", single, file_ref(single)))
    found = store.read(builder.root(tops))
    assert sorted(found) == ["one", "one/inner", "one/inner/f", "single",
                             "two", "two/inner", "two/inner/f"]
